// DeepSeek-V4 (issue 33, must-show 1): the tiny V4 of `make-tiny --arch deepseek_v4` (every layer kind: window
// only, CSA with the lightning indexer, HCA; hash and biased routing; window 16, indexer top-k 4, 4 streams x 20
// Sinkhorn iterations, YaRN on the compressed layers) against llama.cpp on the same GGUF: full-vocabulary
// log-probabilities at every position of a 300-token prompt (CSA sees up to 75 blocks of which the indexer keeps
// 4; HCA closes blocks at positions 127 and 255), with f32 KV and flash attention off in llama.cpp.
// deepinfer runs the prompt in one batch, in 37-token chunks (blocks straddle chunk boundaries), and one token
// per forward (decode steps): each within 1e-4 of the reference, argmax equal everywhere.
// DeepSeek's own checkpoint format (the HF directory of `make-tiny`, as llama.cpp's converter reads it): deepinfer
// on the HF directory against llama.cpp on the GGUF of the same weights, f32 and FP8 (e4m3 linear weights with
// E8M0 128x128 block scales; the GGUF holds their values in f32), same bar. MXFP4 experts (DeepSeek's packing)
// cannot meet it against llama.cpp (below): the HF directory and the GGUF holding the same blocks as ggml MXFP4
// are compared in deepinfer, bitwise.
// Quantized weights (MXFP4 experts, as V4 ships them) are not compared with llama.cpp yet: on this shape (hidden 256,
// expert FFN 128) deepinfer and llama.cpp differ by a mean 8e-2 with MXFP4 and from position 2 with q8_0 experts
// alone, and qwen3_moe at the same hidden/expert sizes in q8_0 differs as well (with the binary from before
// DeepSeek-V4 too), while the f32 cases agree to 3e-5: a quantized-MoE difference at these sizes, open.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {compareLogprobs, fail, llamaLogprobs, runDeepinfer} from "./common.mjs";
import {tokenPrompt} from "../common/rng.mjs";

const bin = process.argv[2];
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "deepinfer-dsv4-"));
const TOL = 1e-4;
try {
  const cases = [
    {name: "f32", flags: [], tol: TOL, chunks: [300, 37, 1]},
    // Another draw of every weight and an 8-token window: more blocks of every kind per window.
    {name: "f32-seed7-window8", flags: ["--seed", "7", "--window", "8"], tol: TOL, chunks: [300, 37, 1]},
  ];
  for (const c of cases) {
    const gguf = path.join(tmp, `${c.name}.gguf`);
    runDeepinfer(bin, ["make-tiny", "--arch", "deepseek_v4", "--format", "gguf", "-o", gguf, ...c.flags]);
    const tokens = tokenPrompt(33, 300, 512);
    const ref = await llamaLogprobs(gguf, tokens);
    for (const chunk of c.chunks) {
      const out = JSON.parse(runDeepinfer(bin, ["logprobs", "-m", gguf, "--tokens", JSON.stringify(tokens), "--chunk", String(chunk), "-t", "2"]));
      compareLogprobs(`deepseek_v4 ${c.name} chunk ${chunk}`, out.logprobs, ref, c.tol, c.mean);
    }
  }
  // HF directories in DeepSeek's format against llama.cpp on the GGUF make-tiny wrote beside them.
  const tokens = tokenPrompt(33, 300, 512);
  const hfCases = [
    {name: "hf-f32", flags: []},
    {name: "hf-fp8", flags: ["--dtype", "f8_e4m3"]},
    {name: "hf-fp8-seed7-window8", flags: ["--dtype", "f8_e4m3", "--seed", "7", "--window", "8"]},
  ];
  for (const c of hfCases) {
    const dir = path.join(tmp, c.name);
    runDeepinfer(bin, ["make-tiny", "--arch", "deepseek_v4", "-q", "-o", dir, ...c.flags]);
    const ref = await llamaLogprobs(path.join(dir, "model.gguf"), tokens);
    for (const chunk of [300, 37]) {
      const out = JSON.parse(runDeepinfer(bin, ["logprobs", "-m", dir, "--tokens", JSON.stringify(tokens), "--chunk", String(chunk), "-t", "2"]));
      compareLogprobs(`deepseek_v4 ${c.name} (HF dir) vs llama.cpp on its GGUF, chunk ${chunk}`, out.logprobs, ref, TOL);
    }
  }
  // MXFP4 experts in DeepSeek's packing (and FP8 elsewhere): the HF directory and its GGUF (ggml MXFP4 blocks) in
  // deepinfer, bitwise: the loader's repack is the blocks llama.cpp's converter writes.
  {
    const dir = path.join(tmp, "hf-fp8-mxfp4");
    runDeepinfer(bin, ["make-tiny", "--arch", "deepseek_v4", "-q", "-o", dir, "--dtype", "f8_e4m3", "--expert-dtype", "mxfp4"]);
    const run = (m) => JSON.parse(runDeepinfer(bin, ["logprobs", "-m", m, "--tokens", JSON.stringify(tokens), "-t", "2"])).logprobs;
    compareLogprobs("deepseek_v4 hf-fp8-mxfp4: HF dir vs its GGUF in deepinfer (bitwise)", run(dir), run(path.join(dir, "model.gguf")), 0);
  }
} catch (e) {
  fail(e.stack || String(e));
} finally {
  fs.rmSync(tmp, {recursive: true, force: true});
}
