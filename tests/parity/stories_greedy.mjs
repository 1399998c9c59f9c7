// Must-show 1: stories260K greedy from BOS, first 200 tokens equal llama.cpp's, and the text is the Lily story.
import path from "node:path";
import {fail, llamaGreedy, runDeepinfer, sharedModels} from "./common.mjs";

const bin = process.argv[2];
const model = path.join(sharedModels, "stories260K.gguf");
const N = 200;
const ref = await llamaGreedy(model, N);
const ours = JSON.parse(runDeepinfer(bin, ["generate", "-m", model, "--temp", "0", "-n", String(N), "--ignore-eos", "--json", "-q"]));
if (ref.length !== N) fail(`llama.cpp produced ${ref.length} tokens`);
const first = ours.token_ids.findIndex((t, i) => t !== ref[i]);
if (ours.token_ids.length !== N) fail(`deepinfer produced ${ours.token_ids.length} tokens, expected ${N}`);
if (first !== -1) fail(`token ${first} differs: deepinfer ${ours.token_ids[first]} vs llama.cpp ${ref[first]}`);
if (!ours.text.startsWith("Once upon a time, there was a little girl named Lily."))
  fail(`unexpected text: ${JSON.stringify(ours.text.slice(0, 120))}`);
// The HF path of the same weights is not available for stories260K; the tiny-model test covers HF loading.
console.log(`stories260K: ${N} greedy tokens identical to llama.cpp; text: ${JSON.stringify(ours.text.slice(0, 80))}...`);
process.exit(process.exitCode ?? 0);
