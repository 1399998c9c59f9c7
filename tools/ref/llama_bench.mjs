// llama.cpp peer for `deepinfer bench`: node llama_bench.mjs {decode|prefill} MODEL THREADS N REPS
// decode: tokens/s generating N tokens greedily after a 16-token prompt; prefill: tokens/s for an N-token prompt.
import {getLlama} from "node-llama-cpp";
import {makeRng} from "../../tests/common/rng.mjs";

const [mode, modelPath, threadsArg, nArg, repsArg] = process.argv.slice(2);
const threads = Number(threadsArg), n = Number(nArg), reps = Number(repsArg || 3);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath, gpuLayers: 0, useMmap: true});
const {int: rnd} = makeRng(12345);
const V = Number(model.fileInfo.metadata?.[model.fileInfo.metadata.general.architecture]?.vocab_size ?? 256) || 256;
const tokens = (k) => Array.from({length: k}, () => 256 + rnd(Math.max(1, Math.min(V, 32000) - 512)));

let best = 0;
for (let r = 0; r < reps; ++r) {
  const ctx = await model.createContext({contextSize: Math.max(1024, n + 64), batchSize: 512, threads, sequences: 1});
  const seq = ctx.getSequence();
  if (mode === "prefill") {
    const prompt = tokens(n);
    const t0 = performance.now();
    await seq.evaluateWithoutGeneratingNewTokens(prompt);
    best = Math.max(best, n / ((performance.now() - t0) / 1000));
  } else {
    const prompt = tokens(16);
    let count = 0, t0 = 0;
    for await (const t of seq.evaluate(prompt, {temperature: 0})) {
      if (count === 0) t0 = performance.now();  // the first token comes from the prompt pass
      if (++count > n) break;
    }
    best = Math.max(best, (count - 1) / ((performance.now() - t0) / 1000));
  }
  await ctx.dispose();
}
process.stdout.write(JSON.stringify({engine: "llama.cpp (node-llama-cpp 3.21.1)", mode, threads, tokens_per_second: best}) + "\n");
// Exit only once stdout has drained: a pipe takes 64 KiB at a time.
process.stdout.write("", () => process.exit(0));
