// Bitwise regression guard for restructurings (issue 12): md5 checksums of what deepinfer produces, recorded
// before a change and compared after it. A case's checksum covers
//   - the files make-tiny writes (HF safetensors + config.json and the GGUF holding the same weights),
//   - full-vocabulary log-prob dumps (`deepinfer logprobs`) on those files at several chunk sizes,
//   - engine outputs (`generate --input`: token ids, text, finish reasons, logprobs) with overlap on and off,
//     a tight KV pool (preemption), no prefix cache, and a small batch limit (chunked prefill),
// per instruction set the CPU offers (scalar and avx2 everywhere here; avx512 when present). The recorded
// values live in tests/bitwise/checksums.txt; an ISA with no recorded values (e.g. avx512 recorded on a machine
// without it) is reported and skipped, never silently passed.
//
//   node tests/bitwise/checksums.mjs BIN            compare against checksums.txt (exit 1 on any difference)
//   node tests/bitwise/checksums.mjs BIN --write    record checksums.txt (only from the pre-change binary)
import {execFileSync, spawnSync} from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {fileURLToPath} from "node:url";

const bin = path.resolve(process.argv[2]);
const write = process.argv.includes("--write");
const only = process.argv.find(a => a.startsWith("--only="))?.slice(7);
const here = path.dirname(fileURLToPath(import.meta.url));
const sumsFile = path.join(here, "checksums.txt");
const shared = process.env.DEEPINFER_SHARED_MODELS ?? path.resolve(here, "../../../shared/models");
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "deepinfer-bitwise-"));
const md5 = buf => crypto.createHash("md5").update(buf).digest("hex");
const env = {...process.env, DEEPINFER_NO_PROGRESS: "1"};
const run = (args, extraEnv = {}) => {
  const r = spawnSync(bin, args, {env: {...env, ...extraEnv}, maxBuffer: 1 << 30});
  if (r.status !== 0) throw new Error(`${args.join(" ")}: exit ${r.status}: ${String(r.stderr).slice(-400)}`);
  return r.stdout;
};

// Tiny models: every architecture and the layout variants that take different code paths.
const models = {
  llama: ["--arch", "llama"],
  llama_tied_r3: ["--arch", "llama", "--tie", "--rope-scaling", "llama3", "--seed", "3"],
  llama_bf16: ["--arch", "llama", "--dtype", "bf16"],
  llama_q8: ["--arch", "llama", "--dtype", "q8_0", "--hidden", "64", "--ffn", "128"],
  mistral: ["--arch", "mistral"],
  qwen2: ["--arch", "qwen2"],
  qwen3: ["--arch", "qwen3", "--kv-heads", "1"],
  qwen3_moe: ["--arch", "qwen3_moe"],
  deepseek_v3: ["--arch", "deepseek_v3", "--mtp"],
  deepseek_nolora_yarn: ["--arch", "deepseek_v3", "--q-lora", "0", "--rope-scaling", "yarn", "--split-kv-b"],
  deepseek_fp8: ["--arch", "deepseek_v3", "--dtype", "f8_e4m3", "--format", "hf"],
};
const tokens = JSON.stringify([1, 17, 260, 301, 5, 99, 400, 7, 7, 7, 123, 45, 300, 2, 88, 411, 3, 9, 250, 64]);
// An offline batch exercising sampling, n > 1, stop strings, logprobs and shared prefixes.
const batch = [
  {prompt: [1, 5, 9, 200, 33], max_tokens: 24, temperature: 0},
  {prompt: [1, 5, 9, 200, 33, 8], max_tokens: 16, temperature: 0.9, top_p: 0.9, seed: 3, n: 2, logprobs: 2},
  {prompt: [1, 400, 401, 402, 403, 404, 405, 406, 407, 408, 409, 410, 411, 412, 413, 414, 415, 416], max_tokens: 20, temperature: 0.7, top_k: 20, seed: 5},
  {prompt: [1, 100, 101], max_tokens: 30, temperature: 1.1, min_p: 0.05, seed: 9, presence_penalty: 0.5, frequency_penalty: 0.3},
  {prompt: [1, 5, 9, 200, 33, 8, 8, 8], max_tokens: 12, temperature: 0.8, seed: 11, repetition_penalty: 1.3, logprobs: 0},
  {prompt: [1, 250, 251, 252], max_tokens: 18, temperature: 0.6, seed: 13, logit_bias: {"17": 5, "300": -100}},
];
const batchFile = path.join(dir, "batch.jsonl");
fs.writeFileSync(batchFile, batch.map(l => JSON.stringify(l)).join("\n") + "\n");
const engineModes = {
  overlap: [],
  no_overlap: ["--no-overlap"],
  tight_kv_chunked: ["--kv-cache", "48KiB", "--block-size", "4", "--max-batched-tokens", "16", "--max-num-seqs", "3"],
  no_prefix_cache: ["--no-prefix-cache", "--max-batched-tokens", "7"],
};

function engineChecksum(model, mode, isaEnv) {
  const out = path.join(dir, "out.jsonl");
  run(["generate", "-m", model, "--input", batchFile, "--output", out, "-q", "--seed", "1", ...engineModes[mode]], isaEnv);
  // Only what the engine decides: tokens, text, finish reasons, logprobs (timings and ids are not outputs).
  const keep = r => r.choices ? r.choices.map(keep) : [r.token_ids, r.text, r.finish_reason, r.logprobs ?? null, r.error ?? null];
  return md5(JSON.stringify(fs.readFileSync(out, "utf8").trim().split("\n").map(l => keep(JSON.parse(l)))));
}

const isas = ["scalar", "avx2"];
const cpu = fs.readFileSync("/proc/cpuinfo", "utf8");
if (/\bavx512f\b/.test(cpu) && /\bavx512bw\b/.test(cpu)) isas.push("avx512");

const got = new Map();
const put = (key, value) => { got.set(key, value); };
for (const [name, flags] of Object.entries(models)) {
  if (only && !name.startsWith(only)) continue;
  const out = path.join(dir, name);
  run(["make-tiny", ...flags, "--vocab", "512", "--out", out, "-q"]);
  const files = fs.statSync(out).isDirectory() ? fs.readdirSync(out).sort() : [""];
  for (const f of files) put(`files ${name} ${f || "gguf"}`, md5(fs.readFileSync(path.join(out, f))));
  const variants = [];
  if (fs.existsSync(path.join(out, "config.json"))) variants.push(["hf", out]);
  if (fs.existsSync(path.join(out, "model.gguf"))) variants.push(["gguf", path.join(out, "model.gguf")]);
  for (const isa of isas) {
    const isaEnv = {DEEPINFER_ISA: isa};
    for (const [fmt, m] of variants) {
      for (const chunk of ["1", "5", "64"]) {
        const extra = name === "deepseek_v3" ? ["--mtp"] : [];
        put(`${isa} logprobs ${name} ${fmt} chunk${chunk}`, md5(run(["logprobs", "-m", m, "--tokens", tokens, "--chunk", chunk, "-t", "2", ...extra], isaEnv)));
      }
    }
    // The engine on the GGUF (or the HF dir when there is no GGUF), in every mode, plus a bf16 KV cache once.
    const [, m] = variants[variants.length - 1];
    for (const mode of Object.keys(engineModes)) put(`${isa} engine ${name} ${mode}`, engineChecksum(m, mode, isaEnv));
  }
}
// The real trained model, greedy and sampled, overlap on and off, f32 and bf16 KV caches.
const stories = path.join(shared, "stories260K.gguf");
if (!only || only === "stories") for (const isa of isas) {
  const isaEnv = {DEEPINFER_ISA: isa};
  for (const mode of Object.keys(engineModes)) put(`${isa} engine stories260K ${mode}`, engineChecksum(stories, mode, isaEnv));
  put(`${isa} generate stories260K bf16kv`, md5(run(["generate", "-m", stories, "-p", "Once upon a time", "-n", "64", "--temp", "0.8", "--seed", "4", "--kv-cache-dtype", "bf16", "--json"], isaEnv).toString().replace(/"timings":\{[^}]*\},?/, "")));
}
fs.rmSync(dir, {recursive: true, force: true});

if (write) {
  const lines = [...got].map(([k, v]) => `${v}  ${k}`);
  fs.writeFileSync(sumsFile, `# md5 checksums recorded by tests/bitwise/checksums.mjs --write (${new Date().toISOString().slice(0, 10)}, ISAs: ${isas.join(", ")})\n` + lines.join("\n") + "\n");
  console.log(`recorded ${lines.length} checksums in ${sumsFile}`);
  process.exit(0);
}
const want = new Map();
for (const l of fs.readFileSync(sumsFile, "utf8").split("\n")) {
  const m = /^([0-9a-f]{32})  (.+)$/.exec(l);
  if (m) want.set(m[2], m[1]);
}
let fail = 0, same = 0;
const skippedIsas = new Set();
for (const [k, v] of got) {
  if (!want.has(k)) {
    const isa = k.split(" ")[0];
    if (isas.includes(isa)) { skippedIsas.add(isa); continue; }
    console.log(`FAIL no recorded checksum for '${k}'`); ++fail; continue;
  }
  if (want.get(k) !== v) { console.log(`FAIL ${k}: ${v} != recorded ${want.get(k)}`); ++fail; } else ++same;
}
for (const isa of skippedIsas) console.log(`note: no checksums recorded for ${isa} (recorded on a machine without it); not checked`);
for (const k of want.keys()) if (!got.has(k) && isas.includes(k.split(" ")[0]) && !only) { console.log(`FAIL recorded case '${k}' was not produced`); ++fail; }
console.log(fail ? `${fail} checksum(s) differ` : `all ${same} checksums identical to the recorded ones`);
process.exit(fail ? 1 : 0);
