// DeepSeek-V3 and V4 MTP (next-n) modules, and llama.cpp's current deepseek2 GGUF layout (pre-split attn_k_b/attn_v_b),
// against llama.cpp: tools/ref/llama_mtp_ref runs the main model and then the MTP module through llama.cpp's C++
// API (node-llama-cpp cannot run MTP) and prints full-vocabulary log-probabilities for both.
//
// For each case, make-tiny writes the same weights twice (same seed): with the GGUF in the split layout (which
// llama.cpp's MTP graph needs) and in the legacy attn_kv_b layout. deepinfer runs the split GGUF, the legacy GGUF
// and the HF directory; every one is compared with the reference computed on the split GGUF. Then the HF directory
// goes through `deepinfer convert` and llama.cpp runs the converted file: the same bar against it.
// Rows: main = 64 positions; MTP = 63 rows, row i predicting token i+2 from token i+1 and the main model's
// final-normed hidden state at i (llama.cpp's h_nextn). Tolerance: 1e-4 on log-probs (f32), argmax equal.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {execFileSync} from "node:child_process";
import {compareLogprobs, runDeepinfer} from "./common.mjs";
import {tokenPrompt} from "../common/rng.mjs";

const [bin, refTool, backendDir] = process.argv.slice(2);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "deepinfer-mtp-"));
const TOL = 1e-4;

const cases = [
  // V3 layout: q_lora, a dense first layer, 16 routed experts (4 used) in 4 groups, one shared expert; the MTP
  // module is a MoE layer with its own embedding and head copies.
  {name: "deepseek_v3-mtp", flags: ["--experts", "16", "--experts-used", "4", "--layers", "3"]},
  // YaRN positions in the MTP layer too (the prompt runs past the original context of 32).
  {name: "deepseek_v3-mtp-yarn", flags: ["--rope-scaling", "yarn", "--layers", "2", "--seed", "9"]},
  // FP8 HF checkpoint (block-scaled e4m3 incl. the MTP's eh_proj and experts); the GGUFs hold the same values in f32.
  {name: "deepseek_v3-mtp-fp8", dtype: "f8_e4m3",
   flags: ["--hidden", "256", "--heads", "8", "--expert-ffn", "160", "--q-lora", "192", "--kv-lora", "160", "--layers", "2"]},
];

// 64 ids below 510 (make-tiny's bos/eos are 510/511 of 512), odd and even, the top 10% included (checked).
const prompt = tokenPrompt(42, 64, 510, {vocab: 512});

for (const c of cases) {
  const split = path.join(tmp, c.name + "-split"), legacy = path.join(tmp, c.name + "-legacy");
  const common = ["make-tiny", "--arch", "deepseek_v3", "--dtype", c.dtype ?? "f32", "--mtp", "-q", ...c.flags];
  runDeepinfer(bin, [...common, "--split-kv-b", "--out", split]);
  runDeepinfer(bin, [...common, "--out", legacy]);
  const ref = JSON.parse(execFileSync(refTool, [backendDir, path.join(split, "model.gguf"), prompt.join(",")],
                                      {encoding: "utf8", maxBuffer: 1 << 30}));
  for (const [fmt, m] of [["split gguf", path.join(split, "model.gguf")], ["legacy gguf", path.join(legacy, "model.gguf")],
                          ["hf", split]]) {
    const ours = JSON.parse(runDeepinfer(bin, ["logprobs", "-m", m, "--mtp", "--tokens", JSON.stringify(prompt)]));
    compareLogprobs(`${c.name} ${fmt} main`, ours.logprobs, ref.main, TOL);
    compareLogprobs(`${c.name} ${fmt} mtp`, ours.mtp, ref.mtp, TOL);
  }
  // `deepinfer convert` of the HF directory (MTP kept as blk.N.nextn.*): llama.cpp runs the converted file.
  const conv = path.join(tmp, c.name + "-converted.gguf");
  runDeepinfer(bin, ["convert", "-m", legacy, "-o", conv, "--outtype", "f32", "-q"]);
  const refConv = JSON.parse(execFileSync(refTool, [backendDir, conv, prompt.join(",")], {encoding: "utf8", maxBuffer: 1 << 30}));
  const ours = JSON.parse(runDeepinfer(bin, ["logprobs", "-m", legacy, "--mtp", "--tokens", JSON.stringify(prompt)]));
  compareLogprobs(`${c.name} hf vs llama.cpp on the converted gguf: main`, ours.logprobs, refConv.main, TOL);
  compareLogprobs(`${c.name} hf vs llama.cpp on the converted gguf: mtp`, ours.mtp, refConv.mtp, TOL);
}

// DeepSeek-V4's MTP block (issue 33, must-show 1 "with MTP"): the specification's tiny V4 (window 16, CSA, HCA,
// hash layers, 4 streams, YaRN) plus one window-only MTP layer. llama.cpp's MTP context reads the main context's
// un-collapsed streams (h_nextn, hc x hidden per row) and keeps the block's window in its own iSWA cache. 300
// positions, so the MTP window (16) slides many times; deepinfer runs the GGUF in one batch, in 37-token chunks
// and one row per forward, and the HF directory beside it (DeepSeek's format: mtp.0.* with e_proj / h_proj and
// the block's own hc_head_*, equal to the model's, which llama.cpp's single-file GGUF uses) in one batch and in
// chunks; then an FP8 HF directory (E8M0 block scales, MTP included) against llama.cpp on its f32 GGUF.
{
  const tokens = tokenPrompt(33, 300, 512);
  const v4 = [{name: "deepseek_v4-mtp", flags: [], gguf: [300, 37, 1], hf: [300, 37]},
              {name: "deepseek_v4-mtp-fp8", flags: ["--dtype", "f8_e4m3"], gguf: [], hf: [300]}];
  for (const c of v4) {
    const dir = path.join(tmp, c.name);
    runDeepinfer(bin, ["make-tiny", "--arch", "deepseek_v4", "--mtp", "-q", "-o", dir, ...c.flags]);
    const gguf = path.join(dir, "model.gguf");
    const ref = JSON.parse(execFileSync(refTool, [backendDir, gguf, tokens.join(",")], {encoding: "utf8", maxBuffer: 1 << 30}));
    for (const [fmt, m, chunks] of [["gguf", gguf, c.gguf], ["hf", dir, c.hf]])
      for (const chunk of chunks) {
        const ours = JSON.parse(runDeepinfer(bin, ["logprobs", "-m", m, "--mtp", "--chunk", String(chunk), "-t", "2",
                                                   "--tokens", JSON.stringify(tokens)]));
        compareLogprobs(`${c.name} ${fmt} chunk ${chunk} main`, ours.logprobs, ref.main, TOL);
        compareLogprobs(`${c.name} ${fmt} chunk ${chunk} mtp`, ours.mtp, ref.mtp, TOL);
      }
  }
}

// DeepSeek-V4's MTP block with a head collapse of its own (mtp.0.hc_head_* other than the model's, which one GGUF
// cannot hold beside the model's): `convert` writes the block to mtp-<name>.gguf beside the model's GGUF, in the
// layout llama.cpp's converter writes (block_count + 1, the block's collapse under the root output_hc_* names).
// llama.cpp runs the pair (the MTP GGUF as the MTP context's model); deepinfer runs the HF directory and the pair
// (`--mtp-model`); both against that reference. The collapse is shown to matter: llama.cpp on make-tiny's one-file
// GGUF (the model's collapse for the block) gives other MTP log-probs.
{
  const tokens = tokenPrompt(35, 300, 512);
  const dir = path.join(tmp, "v4-own-hc");
  runDeepinfer(bin, ["make-tiny", "--arch", "deepseek_v4", "--mtp", "-q", "-o", dir]);
  // The block's own collapse: base and scale moved off the model's (f32 in make-tiny's safetensors).
  const st = path.join(dir, "model.safetensors");
  const buf = fs.readFileSync(st);
  const hlen = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + hlen).toString());
  for (const [name, delta] of [["mtp.0.hc_head_base", 0.7], ["mtp.0.hc_head_scale", 0.5]]) {
    const t = header[name];
    if (!t || t.dtype !== "F32") throw new Error(`${name}: expected an F32 tensor in ${st}`);
    for (let off = 8 + hlen + t.data_offsets[0], i = 0; off < 8 + hlen + t.data_offsets[1]; off += 4, ++i)
      buf.writeFloatLE(buf.readFloatLE(off) + delta * (i % 2 ? -1 : 1), off);
  }
  fs.writeFileSync(st, buf);
  const conv = path.join(tmp, "v4-own-hc.gguf"), side = path.join(tmp, "mtp-v4-own-hc.gguf");
  runDeepinfer(bin, ["convert", "-m", dir, "-o", conv, "--outtype", "f32", "-q"]);
  if (!fs.existsSync(side)) throw new Error(`convert wrote no MTP GGUF at ${side}`);
  const ref = JSON.parse(execFileSync(refTool, [backendDir, conv, tokens.join(","), side], {encoding: "utf8", maxBuffer: 1 << 30}));
  for (const [what, args] of [["hf", ["-m", dir, "--chunk", "300"]],
                              ["gguf + --mtp-model", ["-m", conv, "--mtp-model", side, "--chunk", "37"]]]) {
    const ours = JSON.parse(runDeepinfer(bin, ["logprobs", ...args, "--mtp", "-t", "2", "--tokens", JSON.stringify(tokens)]));
    compareLogprobs(`deepseek_v4 own MTP collapse, ${what}: main`, ours.logprobs, ref.main, TOL);
    compareLogprobs(`deepseek_v4 own MTP collapse, ${what}: mtp`, ours.mtp, ref.mtp, TOL);
  }
  const one = JSON.parse(execFileSync(refTool, [backendDir, path.join(dir, "model.gguf"), tokens.join(",")],
                                      {encoding: "utf8", maxBuffer: 1 << 30}));
  let moved = 0;
  for (let i = 0; i < one.mtp.length; ++i)
    for (let j = 0; j < one.mtp[i].length; ++j) moved = Math.max(moved, Math.abs(one.mtp[i][j] - ref.mtp[i][j]));
  console.log(`${moved > 1e-2 ? "ok  " : "FAIL"} the block's own collapse moves its log-probs by ${moved.toExponential(2)} (> 1e-2)`);
  if (!(moved > 1e-2)) process.exitCode = 1;
  // An MTP GGUF for another model is refused, naming the difference.
  const other = path.join(tmp, "v4-other");
  runDeepinfer(bin, ["make-tiny", "--arch", "deepseek_v4", "--window", "32", "-q", "-o", other]);
  try {
    runDeepinfer(bin, ["logprobs", "-m", path.join(other, "model.gguf"), "--mtp-model", side, "--mtp", "--tokens", "[1,2,3]"]);
    console.log("FAIL --mtp-model of another model's block succeeded");
    process.exitCode = 1;
  } catch (e) {
    const ok = /not this model's MTP block \(sliding window/.test(String(e.stderr));
    console.log(`${ok ? "ok  " : "FAIL"} --mtp-model of another model: ${String(e.stderr).trim().split("\n").pop()}`);
    if (!ok) process.exitCode = 1;
  }
}

// A model without an MTP module is refused with a clear error.
const plain = path.join(tmp, "plain");
runDeepinfer(bin, ["make-tiny", "--arch", "deepseek_v3", "--layers", "2", "-q", "--out", plain]);
try {
  runDeepinfer(bin, ["logprobs", "-m", plain, "--mtp", "--tokens", "[1,2,3]"]);
  console.log("FAIL --mtp on a model without MTP succeeded");
  process.exitCode = 1;
} catch (e) {
  const ok = /no MTP module/.test(String(e.stderr));
  console.log(`${ok ? "ok  " : "FAIL"} --mtp without an MTP module: ${String(e.stderr).trim().split("\n").pop()}`);
  if (!ok) process.exitCode = 1;
}
fs.rmSync(tmp, {recursive: true, force: true});
process.exit(process.exitCode ?? 0);
