// Streaming-server benchmark, the same client for `deepinfer serve` and llama.cpp's `llama-server -np N`
// (docs/benchmarks.md, "Server vs llama-server"). For each client count C the server is started fresh (llama-server
// with -np C slots, deepinfer with --max-num-seqs C), warmed up with one short request, then C clients each send
// --requests streaming /v1/completions requests back to back (closed loop): a prompt of --n-prompt random token
// ids (its own per request, the same ids for both servers: a seeded xorshift32), max_tokens --n-gen,
// temperature 0, ignore_eos, so every request generates exactly --n-gen tokens. Measured on the client:
//   output tok/s   = all generated tokens / (last response end - first request sent)
//   TTFT           = request sent -> first SSE event carrying text
//   inter-token    = gaps between consecutive text-carrying SSE events of a request (one token per event on both
//                    servers, except that a token ending inside a UTF-8 character is held for the next one)
//   e2e            = request sent -> end of its stream
// Usage:
//   node bench/serve_peer.mjs --server deepinfer --bin build/deepinfer --model M.gguf [flags]
//   node bench/serve_peer.mjs --server llama --bin /work/llama-build/build/bin/llama-server --model M.gguf [flags]
// flags: --clients 1,8,32,64  --n-prompt 32  --n-gen 64  --requests 2 (per client)  --threads 2
//        --ctx-per-seq 256 (llama-server -c = C x this; deepinfer -c)  --server-args "..." (appended)
//        --seed 1  --out FILE.json  --log DIR (server logs; default a temp dir)
//        --events (with --out: each request's text-event times, ms from the run's start, to find which steps were
//        slow: a gap that every decoding stream shows at the same moment is one long step)
import {spawn} from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";

const opt = {server: "", bin: "", model: "", clients: "1,8,32,64", "n-prompt": 32, "n-gen": 64, requests: 2, threads: 2,
             "ctx-per-seq": 256, "server-args": "", seed: 1, out: "", log: "", events: false};
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; ++i) {
  const k = argv[i].replace(/^--/, "");
  if (!(k in opt)) { console.error(`serve_peer: unknown flag ${argv[i]}`); process.exit(2); }
  opt[k] = typeof opt[k] === "boolean" ? true : argv[++i];  // --events takes no value
}
if (!["deepinfer", "llama"].includes(opt.server) || !opt.bin || !opt.model) {
  console.error("usage: node bench/serve_peer.mjs --server deepinfer|llama --bin PATH --model GGUF [--clients 1,8,32,64] " +
                "[--n-prompt 32] [--n-gen 64] [--requests 2] [--threads 2] [--ctx-per-seq 256] [--server-args ARGS] [--out FILE [--events]]");
  process.exit(2);
}
const nPrompt = Number(opt["n-prompt"]), nGen = Number(opt["n-gen"]), perClient = Number(opt.requests);
const threads = Number(opt.threads), ctxPerSeq = Number(opt["ctx-per-seq"]);
const logDir = opt.log || fs.mkdtempSync(path.join(os.tmpdir(), "serve-peer-"));
fs.mkdirSync(logDir, {recursive: true});

// Seeded xorshift32 (exact in 32-bit integer arithmetic).
function rng(seed) {
  let x = (seed >>> 0) || 0x9e3779b9;
  return () => { x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0; return x; };
}
// Token ids in [256, 256 + span): below any special tokens of the Llama-3-style vocabularies make-tiny writes.
function prompts(count, seed, vocab) {
  const r = rng(seed), span = Math.max(1, Math.min(vocab, 32000) - 512);
  return Array.from({length: count}, () => Array.from({length: nPrompt}, () => 256 + (r() % span)));
}

function freePort() {
  return new Promise(resolve => { const s = net.createServer(); s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); }); });
}
const sleep = ms => new Promise(r => setTimeout(r, ms));

function getJson(url) {
  return new Promise(resolve => {
    const req = http.get(url, res => {
      let b = "";
      res.on("data", d => { b += d; });
      res.on("end", () => { try { resolve({status: res.statusCode, body: JSON.parse(b)}); } catch { resolve({status: res.statusCode, body: null}); } });
    });
    req.on("error", () => resolve({status: 0}));
  });
}

async function startServer(C) {
  const port = await freePort();
  const extra = opt["server-args"].split(" ").filter(Boolean);
  let args;
  if (opt.server === "llama") {
    // llama-server's defaults otherwise (f16 KV, flash attention auto, n_batch 2048 / n_ubatch 512, continuous
    // batching, KV not unified with an explicit -np); -c is the total: C slots of ctx-per-seq tokens.
    args = ["-m", opt.model, "--host", "127.0.0.1", "--port", String(port), "-np", String(C), "-c", String(C * ctxPerSeq),
            "-t", String(threads), "-tb", String(threads), ...extra];
  } else {
    args = ["serve", "-m", opt.model, "--host", "127.0.0.1", "--port", String(port), "--max-num-seqs", String(C),
            "-c", String(ctxPerSeq), "-t", String(threads), "-q", ...extra];
  }
  const logFile = path.join(logDir, `${opt.server}-c${C}.log`);
  const out = fs.openSync(logFile, "w");
  const proc = spawn(opt.bin, args, {stdio: ["ignore", out, out], env: {...process.env, DEEPINFER_NO_PROGRESS: "1"}});
  let exited = null;
  proc.on("exit", code => { exited = code; });
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 1200; ++i) {  // up to 10 minutes (loading a 2.5 GB model on a busy machine)
    if (exited !== null) throw new Error(`${opt.server} exited (${exited}) while starting; log: ${logFile}`);
    const h = await getJson(`${base}/health`);
    if (h.status === 200) break;
    await sleep(500);
  }
  const models = await getJson(`${base}/v1/models`);
  const model = models.body?.data?.[0]?.id ?? path.basename(opt.model);
  return {proc, base, model, cmd: [opt.bin, ...args].join(" "), logFile,
          stop: () => new Promise(resolve => { if (exited !== null) return resolve(); proc.once("exit", resolve); proc.kill("SIGTERM"); })};
}

// One streaming completion; resolves with its timings.
function stream(base, model, prompt, maxTokens) {
  return new Promise(resolve => {
    const body = JSON.stringify({model, prompt, max_tokens: maxTokens, temperature: 0, ignore_eos: true, stream: true,
                                 stream_options: {include_usage: true}});
    const t0 = performance.now();
    const r = {t0, first: null, end: null, events: [], tokens: null, finish: null, status: 0, error: null};
    const req = http.request(`${base}/v1/completions`, {method: "POST", agent: false,
      headers: {"Content-Type": "application/json", "Content-Length": Buffer.byteLength(body)}}, res => {
      r.status = res.statusCode;
      let buf = "";
      res.setEncoding("utf8");
      res.on("data", d => {
        const now = performance.now();
        buf += d;
        let k;
        while ((k = buf.indexOf("\n\n")) >= 0) {
          const ev = buf.slice(0, k);
          buf = buf.slice(k + 2);
          if (!ev.startsWith("data: ")) continue;
          const data = ev.slice(6).trim();
          if (data === "[DONE]") continue;
          let j;
          try { j = JSON.parse(data); } catch { continue; }
          if (j.error) r.error = `error event: ${j.error.message ?? JSON.stringify(j.error)}`;
          if (j.usage?.completion_tokens != null) r.tokens = j.usage.completion_tokens;
          for (const c of j.choices ?? []) {
            if (c.finish_reason) r.finish = c.finish_reason;
            if (c.text) {
              if (r.first === null) r.first = now;
              r.events.push(now);
            }
          }
        }
      });
      res.on("end", () => { r.end = performance.now(); resolve(r); });
      res.on("error", e => { r.error = String(e); r.end = performance.now(); resolve(r); });
    });
    req.on("error", e => { r.error = String(e); r.end = performance.now(); resolve(r); });
    req.end(body);
  });
}

const pct = (xs, p) => {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(p / 100 * s.length) - 1))];
};

// The vocabulary size from the GGUF (tokenizer.ggml.tokens' length), for the prompt ids.
function ggufVocab(file) {
  const fd = fs.openSync(file, "r"), buf = Buffer.alloc(16 << 20);
  const n = fs.readSync(fd, buf, 0, buf.length, 0);
  fs.closeSync(fd);
  let o = 0;
  const u32 = () => { const v = buf.readUInt32LE(o); o += 4; return v; };
  const u64 = () => { const v = Number(buf.readBigUInt64LE(o)); o += 8; return v; };
  const str = () => { const l = u64(); const s = buf.toString("utf8", o, o + l); o += l; return s; };
  const size = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8};
  const skip = t => { if (t === 8) str(); else if (t === 9) { const et = u32(), c = u64(); for (let i = 0; i < c; ++i) skip(et); } else o += size[t]; };
  if (buf.toString("ascii", 0, 4) !== "GGUF") return 32000;
  o = 8; u64(); const nkv = u64();
  for (let i = 0; i < nkv && o < n; ++i) {
    const key = str(), t = u32();
    if (key === "tokenizer.ggml.tokens" && t === 9) { u32(); return u64(); }
    skip(t);
  }
  return 32000;
}

const vocab = ggufVocab(opt.model);
const results = [];
console.log(`serve_peer: ${opt.server} (${opt.bin}), ${path.basename(opt.model)}, prompt ${nPrompt} random ids, ${nGen} tokens, ` +
            `ignore_eos, ${perClient} requests per client, ${threads} threads; server logs in ${logDir}`);
console.log(`${"clients".padStart(7)} | ${"out tok/s".padStart(10)} | ${"TTFT p50".padStart(9)} ${"p90".padStart(9)} ${"p99".padStart(9)} | ` +
            `${"ITL p50".padStart(8)} ${"p90".padStart(8)} ${"p99".padStart(8)} | ${"e2e p50".padStart(8)} | ${"ok".padStart(7)}`);
for (const C of opt.clients.split(",").map(Number)) {
  const srv = await startServer(C);
  try {
    await stream(srv.base, srv.model, prompts(1, 999, vocab)[0], 4);  // warm-up: weights paged in, threads up
    const all = prompts(C * perClient, Number(opt.seed) * 7919 + C, vocab);
    const t0 = performance.now();
    const runs = await Promise.all(Array.from({length: C}, async (_, c) => {
      const mine = [];
      for (let k = 0; k < perClient; ++k) mine.push(await stream(srv.base, srv.model, all[c * perClient + k], nGen));
      return mine;
    }));
    const t1 = performance.now();
    const rs = runs.flat();
    const ok = rs.filter(r => r.status === 200 && !r.error && r.first !== null);
    const tokens = ok.reduce((a, r) => a + (r.tokens ?? nGen), 0);
    const ttft = ok.map(r => r.first - r.t0), e2e = ok.map(r => r.end - r.t0);
    const itl = ok.flatMap(r => r.events.slice(1).map((t, i) => t - r.events[i]));
    const exact = ok.filter(r => (r.tokens ?? nGen) === nGen && (r.finish === "length" || r.finish === null)).length;
    const row = {clients: C, requests: rs.length, ok: ok.length, exact_length: exact, output_tokens: tokens,
                 seconds: (t1 - t0) / 1e3, output_tokens_per_s: tokens / ((t1 - t0) / 1e3),
                 ttft_ms: {p50: pct(ttft, 50), p90: pct(ttft, 90), p99: pct(ttft, 99)},
                 itl_ms: {p50: pct(itl, 50), p90: pct(itl, 90), p99: pct(itl, 99)},
                 e2e_ms: {p50: pct(e2e, 50), p99: pct(e2e, 99)}, text_events: itl.length + ok.length, server_command: srv.cmd};
    if (opt.events) row.events = ok.map(r => r.events.map(t => t - t0));
    results.push(row);
    const f = (x, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : "-");
    console.log(`${String(C).padStart(7)} | ${f(row.output_tokens_per_s).padStart(10)} | ${f(row.ttft_ms.p50, 0).padStart(9)} ` +
                `${f(row.ttft_ms.p90, 0).padStart(9)} ${f(row.ttft_ms.p99, 0).padStart(9)} | ${f(row.itl_ms.p50).padStart(8)} ` +
                `${f(row.itl_ms.p90).padStart(8)} ${f(row.itl_ms.p99).padStart(8)} | ` +
                `${f(row.e2e_ms.p50, 0).padStart(8)} | ${(ok.length + "/" + rs.length).padStart(7)}` +
                (exact === ok.length ? "" : `  (${ok.length - exact} not exactly ${nGen} tokens)`));
    if (ok.length !== rs.length) {
      const bad = rs.find(r => !(r.status === 200 && !r.error && r.first !== null));
      console.log(`  first failure: status ${bad.status} ${bad.error ?? ""} (log ${srv.logFile})`);
    }
  } finally {
    await srv.stop();
  }
}
console.log("(ms; output tok/s over the whole closed-loop run; server command lines in the JSON)");
if (opt.out) fs.writeFileSync(opt.out, JSON.stringify({benchmark: "serve_peer", server: opt.server, bin: opt.bin, model: opt.model,
  n_prompt: nPrompt, n_gen: nGen, requests_per_client: perClient, threads, vocab, results}, null, 2) + "\n");
