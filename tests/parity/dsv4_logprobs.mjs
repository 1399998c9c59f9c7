// DeepSeek-V4 (issue 33, must-show 1): the tiny V4 of `make-tiny --arch deepseek_v4` (every layer kind: window
// only, CSA with the lightning indexer, HCA; hash and biased routing; window 16, indexer top-k 4, 4 streams x 20
// Sinkhorn iterations, YaRN on the compressed layers) against llama.cpp on the same GGUF: full-vocabulary
// log-probabilities at every position of a 300-token prompt (CSA sees up to 75 blocks of which the indexer keeps
// 4; HCA closes blocks at positions 127 and 255), with f32 KV and flash attention off in llama.cpp.
// deepinfer runs the prompt in one batch, in 37-token chunks (blocks straddle chunk boundaries), and one token
// per forward (decode steps): each within 1e-4 of the reference, argmax equal everywhere.
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
    {name: "f32", flags: []},
    // Another draw of every weight and an 8-token window: more blocks of every kind per window.
    {name: "f32-seed7-window8", flags: ["--seed", "7", "--window", "8"]},
  ];
  for (const c of cases) {
    const gguf = path.join(tmp, `${c.name}.gguf`);
    runDeepinfer(bin, ["make-tiny", "--arch", "deepseek_v4", "--format", "gguf", "-o", gguf, ...c.flags]);
    const tokens = tokenPrompt(33, 300, 512);
    const ref = await llamaLogprobs(gguf, tokens);
    for (const chunk of [300, 37, 1]) {
      const out = JSON.parse(runDeepinfer(bin, ["logprobs", "-m", gguf, "--tokens", JSON.stringify(tokens), "--chunk", String(chunk), "-t", "2"]));
      compareLogprobs(`deepseek_v4 ${c.name} chunk ${chunk}`, out.logprobs, ref, TOL);
    }
  }
} catch (e) {
  fail(e.stack || String(e));
} finally {
  fs.rmSync(tmp, {recursive: true, force: true});
}
