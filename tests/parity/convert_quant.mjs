// `deepinfer convert --outtype q4_k_m | q4_k_s | q5_k_m | q5_k_s | q6_k | q8_0 | q4_0 ...` against llama.cpp.
// A random llama-shaped model from make-tiny (f32 unless --dtype f16, rows of 256 and 512 so the k-quants apply; 8 layers so
// llama.cpp's use_more_bits picks some layers and not others; vocab 520 makes token_embd/output rows of 256 but
// one case uses hidden 288, a row length that is no multiple of 256, to exercise the fallbacks) is converted from
// its HF directory by deepinfer, and its GGUF copy (same f32 weights) is quantized by llama.cpp's own quantizer
// (tools/ref/llama_quantize_ref.cc: llama_model_quantize, what llama-quantize runs, no imatrix). Also: the pure
// types (--pure), an 8-expert qwen3_moe (stacked experts, llama.cpp's 8-expert rules; mxfp4_moe), a DeepSeek-V3 GGUF
// (attn_kv_b) and f32/f16 GGUF inputs. Checks:
//   1. the same tensors, the same per-tensor types (llama.cpp's mix rules) and bitwise the same tensor bytes
//      (deepinfer's quantizers and ggml's reference search), and general.file_type as llama.cpp writes it;
//   2. llama.cpp (node-llama-cpp) loads deepinfer's q4_k_m file and generates the same 32 greedy tokens as
//      deepinfer on that file;
//   3. full-vocabulary log-probs of a 64-token prompt, deepinfer vs llama.cpp on deepinfer's q4_k_m file, within
//      quant_logprobs.mjs's bars (max 0.5, mean 3e-2: the activations are q8_K-quantized on both sides and a
//      last-ulp difference in a summation order can move one activation across a q8 rounding step; see the
//      measurement there) and argmax equal at >= 99% of the positions. Measured on this host (2 layers): max
//      8.6e-6, mean 1.0e-6, argmax 64/64; the 8-layer model crosses such a step (max 0.75, mean 3.5e-2, argmax
//      63/64), so parts 2 and 3 use the 2-layer one (which still has q4_K and q6_K layers).
//
// usage: node convert_quant.mjs DEEPINFER_BIN LLAMA_QUANTIZE_REF
import {execFileSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {createRequire} from "node:module";
import {argmax, compareLogprobs, fail, llama, llamaLogprobs, repoRoot, runDeepinfer} from "./common.mjs";
import {tokenPrompt} from "../common/rng.mjs";

const [bin, quantizeRef] = process.argv.slice(2);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "deepinfer-convert-quant-"));
const require = createRequire(path.join(repoRoot, "tools/ref/package.json"));
const {readGgufFileInfo} = await import(require.resolve("node-llama-cpp"));

// ggml type id -> [block bytes, block elements] (ggml-common.h).
const kBlock = {0: [4, 1], 1: [2, 1], 2: [18, 32], 3: [20, 32], 6: [22, 32], 7: [24, 32], 8: [34, 32],
                10: [84, 256], 11: [110, 256], 12: [144, 256], 13: [176, 256], 14: [210, 256], 30: [2, 1],
                39: [17, 32]};
const kFtype = {q4_0: 2, q4_1: 3, q8_0: 7, q5_0: 8, q5_1: 9, q2_k: 10, q3_k_s: 11, q3_k_m: 12, q3_k_l: 13, q4_k_s: 14,
               q4_k_m: 15, q5_k_s: 16, q5_k_m: 17, q6_k: 18, q3_k: 12, q4_k: 15, q5_k: 17, mxfp4_moe: 38};
// --pure (one type for every matrix) against llama-quantize --pure with the same file type.
const kPure = {q2_k: 10, q3_k: 12, q4_k: 15, q5_k: 17};

async function tensors(file) {
  const info = await readGgufFileInfo(file, {readTensorInfo: true});
  const fd = fs.openSync(file, "r");
  const out = new Map();
  for (const t of info.tensorInfo) {
    const [bb, be] = kBlock[t.ggmlType] ?? [0, 1];
    if (!bb) fail(`${file}: ${t.name}: unexpected ggml type ${t.ggmlType}`);
    const n = t.dimensions.reduce((a, b) => a * Number(b), 1);
    const buf = Buffer.alloc(n / be * bb);
    fs.readSync(fd, buf, 0, buf.length, Number(t.fileOffset));
    out.set(t.name, {type: t.ggmlType, bytes: buf});
  }
  fs.closeSync(fd);
  return {fileType: info.metadata.general.file_type, tensors: out};
}

function model(name, flags) {
  const dir = path.join(tmp, name);
  runDeepinfer(bin, ["make-tiny", "--arch", "llama", "--vocab", "520", "--heads", "4", "--kv-heads", "2",
                     "--layers", "8", "-q", "--out", dir, ...flags]);  // later flags override these
  return dir;
}

const big = model("m256", ["--hidden", "256", "--ffn", "512"]);
const small = model("m256-2", ["--hidden", "256", "--ffn", "512", "--layers", "2"]);
const moe = model("moe8", ["--arch", "qwen3_moe", "--hidden", "256", "--experts", "8", "--experts-used", "2",
                           "--expert-ffn", "256", "--layers", "2"]);
// DeepSeek-V3-shaped GGUF (make-tiny's GGUF keeps MLA's single attn_kv_b, which llama.cpp treats as attn_v).
const ds = model("ds8", ["--arch", "deepseek_v3", "--hidden", "256", "--kv-lora", "256", "--q-lora", "256", "--ffn", "512",
                         "--expert-ffn", "256", "--experts", "8", "--experts-used", "2", "--layers", "3"]);
const f16 = model("m256-f16", ["--hidden", "256", "--ffn", "512", "--dtype", "f16"]);
const gqa4 = model("m256-gqa4", ["--hidden", "256", "--ffn", "512", "--heads", "8", "--kv-heads", "2", "--layers", "16"]);
// gpt-oss (a GGUF input): biases per expert ({E, n}, kept f32 as llama.cpp keeps every non-"weight" tensor), sinks,
// the router (f32 in llama.cpp's mixes), MXFP4 experts under mxfp4_moe.
const gptOss = path.join(tmp, "gptoss");
fs.mkdirSync(gptOss, {recursive: true});
runDeepinfer(bin, ["make-tiny", "--arch", "gpt_oss", "--format", "gguf", "--out", path.join(gptOss, "model.gguf"), "-q", "--hidden", "256",
                   "--heads", "4", "--kv-heads", "2", "--head-dim", "64", "--experts", "8", "--experts-used", "4",
                   "--expert-ffn", "256", "--layers", "2", "--vocab", "520"]);
const odd = model("m288", ["--hidden", "288", "--ffn", "544", "--heads", "4", "--kv-heads", "2"]);
const cases = [
  ...["q4_k_m", "q4_k_s", "q5_k_m", "q5_k_s", "q6_k", "q8_0", "q4_0", "q5_1"].map(t => ({dir: big, outtype: t})),
  // The q2_K / q3_K mixes (their attn_v rule depends on n_gqa: 2 here, 4 in gqa4), and the aliases.
  ...["q2_k", "q3_k_s", "q3_k_m", "q3_k_l", "q3_k", "q5_k"].map(t => ({dir: big, outtype: t})),
  ...["q2_k", "q3_k_m"].map(t => ({dir: gqa4, outtype: t})),
  ...["q4_k_m", "q6_k"].map(t => ({dir: odd, outtype: t})),
  {dir: small, outtype: "q4_k_m"},
  ...Object.keys(kPure).map(t => ({dir: big, outtype: t, pure: true})),
  // MoE with 8 experts (llama.cpp's q8_0 attn_k/attn_v and q5_K attn_output rules), stacked expert tensors.
  {dir: moe, outtype: "q4_k_m"},
  // MXFP4_MOE (gpt-oss's file type): stacked experts in MXFP4, every other matrix in q8_0.
  {dir: moe, outtype: "mxfp4_moe"},
  {dir: gptOss, outtype: "mxfp4_moe", gguf: true},
  {dir: gptOss, outtype: "q8_0", gguf: true},
  // GGUF inputs (f32, and f16 from make-tiny --dtype f16): deepinfer re-types the same file llama.cpp quantizes.
  {dir: big, outtype: "q4_k_m", gguf: true},
  {dir: f16, outtype: "q5_k_m", gguf: true},
  {dir: ds, outtype: "q4_k_m", gguf: true},
];
for (const c of cases) {
  const label = `${c.outtype}${c.pure ? " --pure" : ""} (${path.basename(c.dir)}${c.gguf ? ", from its GGUF" : ""})`;
  const tag = `${c.outtype}${c.pure ? "-pure" : ""}-${path.basename(c.dir)}`;
  const ours = path.join(tmp, `ours-${tag}${c.gguf ? "-gguf" : ""}.gguf`);
  const ref = path.join(tmp, `ref-${tag}.gguf`);
  runDeepinfer(bin, ["convert", "-m", c.gguf ? path.join(c.dir, "model.gguf") : c.dir, "-o", ours, "-q", "--outtype", c.outtype,
                     ...(c.pure ? ["--pure"] : [])]);
  const refArgs = c.pure ? [String(kPure[c.outtype]), "pure"] : [String(kFtype[c.outtype])];
  execFileSync(quantizeRef, [path.join(c.dir, "model.gguf"), ref, ...refArgs], {stdio: ["ignore", "ignore", "pipe"]});
  const a = await tensors(ours), b = await tensors(ref);
  if (a.fileType !== b.fileType) fail(`${label}: general.file_type ${a.fileType} vs llama.cpp's ${b.fileType}`);
  const names = [...b.tensors.keys()].sort();
  if (JSON.stringify([...a.tensors.keys()].sort()) !== JSON.stringify(names)) fail(`${label}: tensor names differ`);
  let typesBad = 0, bytesBad = 0;
  const mix = {};
  for (const n of names) {
    const x = a.tensors.get(n), y = b.tensors.get(n);
    if (!x) continue;
    mix[y.type] = (mix[y.type] ?? 0) + 1;
    if (x.type !== y.type) { ++typesBad; fail(`${label}: ${n}: type ${x.type}, llama.cpp ${y.type}`); continue; }
    if (!x.bytes.equals(y.bytes)) { ++bytesBad; fail(`${label}: ${n}: bytes differ from llama.cpp's`); }
  }
  console.log(`${typesBad || bytesBad ? "FAIL" : "ok  "} ${label}: ${names.length} tensors, types by ggml id ${JSON.stringify(mix)}, ` +
              `${typesBad} types and ${bytesBad} tensors' bytes differ from llama-quantize's`);
}

// llama.cpp's greedy generation from BOS with an f32 KV cache (common.mjs's llamaGreedy keeps llama.cpp's default
// f16 cache, which moves this random model's near-tied logits; deepinfer's cache is f32).
async function llamaGreedyF32(modelPath, n) {
  const l = await llama();
  const m = await l.loadModel({modelPath, gpuLayers: 0});
  const ctx = await m.createContext({contextSize: 512, threads: 2, sequences: 1, flashAttention: false,
    experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32"});
  const out = [];
  for await (const t of ctx.getSequence().evaluate([m.tokens.bos], {temperature: 0})) {
    out.push(t);
    if (out.length >= n) break;
  }
  await ctx.dispose();
  await m.dispose();
  return out;
}

// 2 + 3: deepinfer's q4_k_m file in llama.cpp.
const file = path.join(tmp, "ours-q4_k_m-m256-2.gguf");
const N = 32;
const refTokens = await llamaGreedyF32(file, N);
const ourTokens = JSON.parse(runDeepinfer(bin, ["generate", "-m", file, "--temp", "0", "-n", String(N), "--ignore-eos", "--json", "-q"]));
const ids = ourTokens.tokens ?? ourTokens.token_ids ?? ourTokens.ids;
if (JSON.stringify(ids) !== JSON.stringify(refTokens)) fail(`q4_k_m greedy: ours ${JSON.stringify(ids)} vs llama.cpp ${JSON.stringify(refTokens)}`);
else console.log(`ok   q4_k_m greedy: ${N} tokens equal llama.cpp's`);
// 64 ids of the 520-token vocabulary (its bos/eos at 518/519 included), odd and even, the top 10% included (checked).
const prompt = tokenPrompt(7, 64, 520);
const refLp = await llamaLogprobs(file, prompt);
const ourLp = JSON.parse(runDeepinfer(bin, ["logprobs", "-m", file, "--tokens", JSON.stringify(prompt)])).logprobs;
compareLogprobs("q4_k_m logprobs", ourLp, refLp, 0.5, 3e-2);
const agree = ourLp.filter((row, i) => argmax(row) === argmax(refLp[i])).length;
console.log(`     q4_k_m: argmax agrees at ${agree}/${prompt.length} positions`);
if (agree < 0.99 * prompt.length) fail(`argmax agrees at ${agree}/${prompt.length} positions (< 99%)`);
// 4. A file re-typed from a GGUF keeps the input's metadata: llama.cpp loads it and gives the log-probs it gives
// on llama-quantize's file of the same input (same tensor bytes, so exactly equal).
{
  const a = await llamaLogprobs(path.join(tmp, "ours-q5_k_m-m256-f16-gguf.gguf"), prompt.slice(0, 16));
  const b = await llamaLogprobs(path.join(tmp, "ref-q5_k_m-m256-f16.gguf"), prompt.slice(0, 16));
  compareLogprobs("q5_k_m from an f16 GGUF, in llama.cpp, vs llama-quantize's file", a, b, 0);
}
// 5. Bad input gets a clear error naming the tensor: requantizing an already quantized file, and no --outtype.
for (const [args, want] of [[["--outtype", "q4_k_m"], /tensor \S+ is q\d_K.*no requantization/], [[], /needs --outtype/]]) {
  try {
    runDeepinfer(bin, ["convert", "-m", file, "-o", path.join(tmp, "bad.gguf"), "-q", ...args]);
    fail(`convert ${args.join(" ")} of a quantized GGUF succeeded`);
  } catch (e) {
    if (!want.test(String(e.stderr))) fail(`convert ${args.join(" ")}: unexpected error ${e.stderr}`);
    else console.log(`ok   error: ${String(e.stderr).trim().split("\n").pop()}`);
  }
}
fs.rmSync(tmp, {recursive: true, force: true});
