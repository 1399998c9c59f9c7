// Bitwise regression guard for restructurings (issues 12, 30): md5 checksums of what deepinfer produces, recorded
// before a change and compared after it. A case's checksum covers
//   - the files make-tiny writes (HF safetensors + config.json and the GGUF holding the same weights),
//   - full-vocabulary log-prob dumps (`deepinfer logprobs`) on those files at several chunk sizes,
//   - engine outputs (`generate --input`: token ids, text, finish reasons, logprobs) with overlap on and off,
//     a tight KV pool (preemption), no prefix cache, and a small batch limit (chunked prefill),
// per instruction set: scalar, avx2 and avx512, each forced with DEEPINFER_ISA (the scalar and AVX2 kernels run on
// an AVX-512 machine; the log line "kernels: NAME" proves which table ran). The recorded values live in
// tests/bitwise/checksums.txt. The check fails when
//   - a produced case has no recorded value, or a recorded case of an ISA this machine has is not produced;
//   - the machine's best ISA has no recorded values at all;
//   - an ISA the file records is missing on this machine (only allowed, by name, for avx512 on a CPU without
//     AVX-512F/BW: the note says so; CI runs on AVX-512 machines, where every recorded ISA runs);
//   - any value differs.
// A second, separately named check ("cross-ISA") compares the outputs of the three ISAs with each other: token ids
// and text of every engine run must be identical, and log-prob dumps bitwise identical, on AVX2 and AVX-512 (the
// project's "same tokens on any x86 CPU with FMA units" claim), except for the pairs crossIsaException names with
// the measured reason (the scalar unit; bf16 weights on AVX512-BF16), whose log-prob differences are printed.
//
//   node tests/bitwise/checksums.mjs BIN                    compare against checksums.txt (exit 1 on any failure)
//   node tests/bitwise/checksums.mjs BIN --write            record every ISA's checksums (pre-change binary only)
//   node tests/bitwise/checksums.mjs BIN --write-isa=ISA    record (replace) one ISA's entries, keep the others
//   node tests/bitwise/checksums.mjs BIN --write-missing    record only cases the file lacks (new cases), keep the rest
//   node tests/bitwise/checksums.mjs BIN --only=PREFIX      only models whose name starts with PREFIX
import {spawnSync} from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {fileURLToPath} from "node:url";

const bin = path.resolve(process.argv[2]);
const write = process.argv.includes("--write");
const writeIsa = process.argv.find(a => a.startsWith("--write-isa="))?.slice(12);
const writeMissing = process.argv.includes("--write-missing");
const only = process.argv.find(a => a.startsWith("--only="))?.slice(7);
const here = path.dirname(fileURLToPath(import.meta.url));
const sumsFile = process.env.DEEPINFER_CHECKSUMS_FILE ?? path.join(here, "checksums.txt");
const shared = process.env.DEEPINFER_SHARED_MODELS ?? path.resolve(here, "../../../shared/models");
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "deepinfer-bitwise-"));
const md5 = buf => crypto.createHash("md5").update(buf).digest("hex");
const env = {...process.env, DEEPINFER_NO_PROGRESS: "1"};
delete env.DEEPINFER_LOG;
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
  // GGUF block types through `deepinfer convert` (rows of 256 so the k-quants apply): the k-quant decode and
  // prefill kernels (q4_K, q6_K; VNNI panels on AVX-512), and q5_1 against q8_1 activations.
  llama_q4km: ["--arch", "llama", "--hidden", "256", "--ffn", "512", "--layers", "2", "--heads", "4", "--kv-heads", "2"],
  llama_q51: ["--arch", "llama", "--hidden", "256", "--ffn", "512", "--layers", "2", "--heads", "4", "--kv-heads", "2"],
  // MXFP4 (gpt-oss's expert type, a 16-entry grid like iq4_nl) on every matrix: its decode and prefill kernels.
  llama_mxfp4: ["--arch", "llama", "--dtype", "mxfp4", "--hidden", "256", "--ffn", "512", "--layers", "2", "--heads", "4", "--kv-heads", "2"],
};
// Models converted to a GGUF type after make-tiny: name -> convert flags (the make-tiny output is only the source).
const converted = {llama_q4km: ["--outtype", "q4_k_m"], llama_q51: ["--outtype", "q5_1", "--pure"]};
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

// Cross-ISA: the ISA pairs whose outputs may differ, with the reason measured when they were listed. Every other
// pair must give the same tokens and text in every engine run, and bitwise the same log-probs. A listed pair that
// turns out identical is reported so the list can shrink.
const SCALAR = "the scalar unit (CPUs without AVX2/FMA) multiplies then adds where AVX2/AVX-512 fuse; exact fmaf made its f32 prefill 20x slower";
const BF16_DOT = "bf16 weights: AVX512-BF16's vdpbf16ps sums bf16 pairs in its own order, the other tables in the f32 tiles' lane order; log-probs differ by ~2e-6 and a near-tie token can flip";
const crossIsaException = (model, a, b) => a === "scalar" ? SCALAR : model === "llama_bf16" && b === "avx512" ? BF16_DOT : null;

// Runs an engine batch; returns {sum, outputs} where outputs are the decided values (tokens, text, finish reasons,
// logprobs: timings and ids are not outputs).
function engineRun(model, mode, isaEnv) {
  const out = path.join(dir, "out.jsonl");
  run(["generate", "-m", model, "--input", batchFile, "--output", out, "-q", "--seed", "1", ...engineModes[mode]], isaEnv);
  const keep = r => r.choices ? r.choices.map(keep) : [r.token_ids, r.text, r.finish_reason, r.logprobs ?? null, r.error ?? null];
  const outputs = fs.readFileSync(out, "utf8").trim().split("\n").map(l => keep(JSON.parse(l)));
  return {sum: md5(JSON.stringify(outputs)), outputs};
}

const cpu = fs.readFileSync("/proc/cpuinfo", "utf8");
const hasAvx512 = /\bavx512f\b/.test(cpu) && /\bavx512bw\b/.test(cpu);
const isas = ["scalar", "avx2", ...(hasAvx512 ? ["avx512"] : [])];
const bestIsa = isas[isas.length - 1];
if (writeIsa && !isas.includes(writeIsa)) {
  console.error(`FAIL --write-isa=${writeIsa}: this machine runs ${isas.join(", ")}`);
  process.exit(1);
}
const runIsas = writeIsa ? [writeIsa] : isas;

// Each forced ISA must really be the table that runs: the engine logs its kernel table at debug level.
for (const isa of runIsas) {
  const r = spawnSync(bin, ["generate", "-m", path.join(shared, "stories260K.gguf"), "-p", "x", "-n", "1"],
                      {env: {...env, DEEPINFER_ISA: isa, DEEPINFER_LOG: "debug"}, encoding: "utf8"});
  const name = /kernels: (\S+)/.exec(r.stderr ?? "")?.[1];
  if (!name || name.replace(/\+.*/, "") !== isa) {
    console.log(`FAIL DEEPINFER_ISA=${isa} ran kernels '${name}' (exit ${r.status}: ${String(r.stderr).slice(-300)})`);
    process.exit(1);
  }
  console.log(`DEEPINFER_ISA=${isa}: kernels ${name}`);
}

const got = new Map();
const put = (key, value) => { got.set(key, value); };
const engineOut = new Map();     // "model mode" -> {isa: outputs}
const logprobOut = new Map();    // "model fmt chunk" -> {isa: rows}
const note = (map, key, isa, v) => { if (!map.has(key)) map.set(key, {}); map.get(key)[isa] = v; };
for (const [name, flags] of Object.entries(models)) {
  if (only && !name.startsWith(only)) continue;
  let out = path.join(dir, name);
  run(["make-tiny", ...flags, "--vocab", "512", "--out", out, "-q"]);
  if (converted[name]) {
    const gguf = path.join(dir, `${name}.gguf`);
    run(["convert", "-m", out, "-o", gguf, "-q", "-t", "2", ...converted[name]]);
    out = gguf;
  }
  const files = fs.statSync(out).isDirectory() ? fs.readdirSync(out).sort() : [""];
  for (const f of files) put(`files ${name} ${f || "gguf"}`, md5(fs.readFileSync(path.join(out, f))));
  const variants = [];
  if (fs.existsSync(path.join(out, "config.json"))) variants.push(["hf", out]);
  if (out.endsWith(".gguf")) variants.push(["gguf", out]);
  else if (fs.existsSync(path.join(out, "model.gguf"))) variants.push(["gguf", path.join(out, "model.gguf")]);
  for (const isa of runIsas) {
    const isaEnv = {DEEPINFER_ISA: isa};
    for (const [fmt, m] of variants) {
      for (const chunk of ["1", "5", "64"]) {
        const extra = name === "deepseek_v3" ? ["--mtp"] : [];
        const text = run(["logprobs", "-m", m, "--tokens", tokens, "--chunk", chunk, "-t", "2", ...extra], isaEnv);
        put(`${isa} logprobs ${name} ${fmt} chunk${chunk}`, md5(text));
        note(logprobOut, `${name} ${fmt} chunk${chunk}`, isa, JSON.parse(text));
      }
    }
    // The engine on the GGUF (or the HF dir when there is no GGUF), in every mode.
    const [, m] = variants[variants.length - 1];
    for (const mode of Object.keys(engineModes)) {
      const r = engineRun(m, mode, isaEnv);
      put(`${isa} engine ${name} ${mode}`, r.sum);
      note(engineOut, `${name} ${mode}`, isa, r.outputs);
    }
  }
}
// The real trained model, greedy and sampled, overlap on and off, f32 and bf16 KV caches.
const stories = path.join(shared, "stories260K.gguf");
if (!only || only === "stories") for (const isa of runIsas) {
  const isaEnv = {DEEPINFER_ISA: isa};
  for (const mode of Object.keys(engineModes)) {
    const r = engineRun(stories, mode, isaEnv);
    put(`${isa} engine stories260K ${mode}`, r.sum);
    note(engineOut, `stories260K ${mode}`, isa, r.outputs);
  }
  const text = run(["generate", "-m", stories, "-p", "Once upon a time", "-n", "64", "--temp", "0.8", "--seed", "4", "--kv-cache-dtype", "bf16", "--json"], isaEnv).toString();
  put(`${isa} generate stories260K bf16kv`, md5(text.replace(/"timings":\{[^}]*\},?/, "")));
  const g = JSON.parse(text);
  note(engineOut, `stories260K bf16kv`, isa, [[g.token_ids, g.text, g.finish_reason, null, null]]);
}
fs.rmSync(dir, {recursive: true, force: true});

const header = isaList => `# md5 checksums recorded by tests/bitwise/checksums.mjs (ISAs: ${isaList.join(", ")}; each ISA's lines with the binary named on its 'recorded' line)\n`;
if (writeMissing) {
  const lines = fs.readFileSync(sumsFile, "utf8").trimEnd().split("\n");
  const have = new Set(lines.filter(l => /^[0-9a-f]{32}  /.test(l)).map(l => l.slice(34)));
  const added = [...got].filter(([k]) => !have.has(k)).map(([k, v]) => `${v}  ${k}`);
  const sha = spawnSync("git", ["-C", path.dirname(bin), "rev-parse", "--short", "HEAD"], {encoding: "utf8"}).stdout?.trim() || "unknown";
  const names = [...new Set(added.map(l => l.slice(34).split(" ")[l.slice(34).startsWith("files") ? 1 : 2]))];
  const at = lines.findIndex(l => /^[0-9a-f]{32}  /.test(l));
  lines.splice(at, 0, `# recorded new cases (${names.join(", ")}) ${new Date().toISOString().slice(0, 10)} with the binary of commit ${sha}`);
  fs.writeFileSync(sumsFile, lines.join("\n") + "\n" + added.join("\n") + "\n");
  console.log(`recorded ${added.length} new checksums in ${sumsFile}`);
  process.exit(0);
}
if (write || writeIsa) {
  // --write-isa keeps every line of the other ISAs (and the 'recorded' notes) and replaces this ISA's.
  const old = writeIsa && fs.existsSync(sumsFile) ? fs.readFileSync(sumsFile, "utf8").split("\n") : [];
  const keepLine = l => (/^[0-9a-f]{32}  /.test(l) && !l.slice(34).startsWith(writeIsa + " ")) || (l.startsWith("# recorded ") && !l.startsWith(`# recorded ${writeIsa} `) && !l.startsWith("# recorded new cases"));
  const kept = old.filter(keepLine);
  const sha = spawnSync("git", ["-C", path.dirname(bin), "rev-parse", "--short", "HEAD"], {encoding: "utf8"}).stdout?.trim() || "unknown";
  const notes = kept.filter(l => l.startsWith("# recorded "));
  for (const isa of runIsas) notes.push(`# recorded ${isa} ${new Date().toISOString().slice(0, 10)} with the binary of commit ${sha}`);
  const sums = kept.filter(l => !l.startsWith("#"));
  const have = new Set(sums.map(l => l.slice(34)));
  for (const [k, v] of got) if (!have.has(k) && (writeIsa ? k.startsWith(writeIsa + " ") : true)) sums.push(`${v}  ${k}`);
  const recordedIsas = [...new Set(sums.map(l => l.slice(34).split(" ")[0]).filter(i => i !== "files"))];
  fs.writeFileSync(sumsFile, header(recordedIsas) + notes.sort().join("\n") + "\n" + sums.join("\n") + "\n");
  console.log(`recorded ${[...got.keys()].filter(k => !writeIsa || k.startsWith(writeIsa + " ")).length} checksums (${runIsas.join(", ")}) in ${sumsFile}`);
  process.exit(0);
}

const want = new Map();
for (const l of fs.readFileSync(sumsFile, "utf8").split("\n")) {
  const m = /^([0-9a-f]{32})  (.+)$/.exec(l);
  if (m) want.set(m[2], m[1]);
}
let fail = 0, same = 0;
const recordedIsas = new Set([...want.keys()].map(k => k.split(" ")[0]).filter(i => i !== "files"));
if (!recordedIsas.has(bestIsa)) { console.log(`FAIL no checksums recorded for this machine's best ISA (${bestIsa})`); ++fail; }
for (const isa of recordedIsas) {
  if (isas.includes(isa)) continue;
  if (isa === "avx512" && !hasAvx512) console.log("note: avx512 checksums not checked: this CPU has no AVX-512F/BW (CI machines have it)");
  else { console.log(`FAIL checksums recorded for ISA '${isa}', which this checker cannot run`); ++fail; }
}
for (const [k, v] of got) {
  if (!want.has(k)) { console.log(`FAIL no recorded checksum for '${k}'`); ++fail; continue; }
  if (want.get(k) !== v) { console.log(`FAIL ${k}: ${v} != recorded ${want.get(k)}`); ++fail; } else ++same;
}
const produced = k => !only || k.split(" ")[2]?.startsWith(only) || (k.startsWith("files ") && k.split(" ")[1].startsWith(only));
for (const k of want.keys()) {
  const isa = k.split(" ")[0];
  if ((isa === "files" || isas.includes(isa)) && produced(k) && !got.has(k)) { console.log(`FAIL recorded case '${k}' was not produced`); ++fail; }
}
console.log(fail ? `${fail} checksum failure(s)` : `all ${same} checksums identical to the recorded ones (${isas.join(", ")})`);

// Cross-ISA check: tokens and text equal on every ISA; log-prob differences printed.
let crossFail = 0, crossSame = 0;
const pairs = [];
for (let i = 0; i < isas.length; ++i) for (let j = i + 1; j < isas.length; ++j) pairs.push([isas[i], isas[j]]);
const tokensText = outputs => JSON.stringify(outputs.map(function strip(o) { return Array.isArray(o[0]) && Array.isArray(o[0][0]) ? o.map(strip) : [o[0], o[1]]; }));
for (const [key, byIsa] of engineOut) {
  const model = key.split(" ")[0];
  for (const [a, b] of pairs) {
    const exc = crossIsaException(model, a, b);
    const equal = tokensText(byIsa[a]) === tokensText(byIsa[b]);
    if (equal) {
      ++crossSame;
      if (exc === BF16_DOT) console.log(`cross-ISA note: ${key} ${a}/${b} listed as an exception (bf16 dot) but identical in this run`);
    } else if (exc) {
      console.log(`cross-ISA exception ${key} ${a}/${b}: tokens differ (${exc === SCALAR ? "scalar" : "bf16 dot"})`);
    } else {
      console.log(`FAIL cross-ISA ${key}: tokens/text differ between ${a} and ${b}`);
      ++crossFail;
    }
  }
}
const logprobDiffs = new Map();  // "model fmt a/b" -> max |delta|
for (const [key, byIsa] of logprobOut) {
  const [model, fmt] = key.split(" ");
  for (const [a, b] of pairs) {
    let worst = 0, nan = false;
    const walk = (x, y) => {
      if (Array.isArray(x)) { for (let i = 0; i < x.length; ++i) walk(x[i], y?.[i]); return; }
      if (x && typeof x === "object") { for (const k of Object.keys(x)) walk(x[k], y?.[k]); return; }
      if (typeof x !== "number") return;
      const d = Math.abs(x - y);
      if (Number.isNaN(d)) nan = true;
      else if (d > worst) worst = d;
    };
    walk(byIsa[a], byIsa[b]);
    const k = `${model} ${fmt} ${a}/${b}`;
    const prev = logprobDiffs.get(k) ?? 0;
    logprobDiffs.set(k, nan || Number.isNaN(prev) ? NaN : Math.max(prev, worst));
  }
}
let logprobSame = 0;
for (const [k, d] of logprobDiffs) {
  const [model, , pair] = k.split(" ");
  const exc = crossIsaException(model, ...pair.split("/"));
  if (Number.isNaN(d)) { console.log(`FAIL cross-ISA logprobs ${k}: NaN or missing value`); ++crossFail; }
  else if (d !== 0 && !exc) { console.log(`FAIL cross-ISA logprobs ${k}: max |delta| ${d.toExponential(2)} (must be bitwise identical)`); ++crossFail; }
  else if (d === 0) ++logprobSame;
  else console.log(`cross-ISA logprobs ${k}: max |delta| ${d.toExponential(2)} (exception: ${exc === SCALAR ? "scalar" : "bf16 dot"})`);
}
console.log(crossFail ? `cross-ISA: ${crossFail} failure(s)` : `cross-ISA: tokens and text identical in ${crossSame} (run, ISA pair) comparisons, log-probs bitwise identical in ${logprobSame} (model, format, ISA pair) comparisons; the pairs above are the named exceptions`);
process.exit(fail || crossFail ? 1 : 0);
