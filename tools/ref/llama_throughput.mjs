// llama.cpp peer for `deepinfer bench throughput`: node llama_throughput.mjs MODEL THREADS CONCURRENCY N_PROMPT N_GEN
// C sequences in one context, each with its own random N_PROMPT-token prompt, all generating N_GEN tokens
// greedily at once (node-llama-cpp batches the sequences' evaluations together). Prints output tokens/s.
import {getLlama} from "node-llama-cpp";
import {makeRng} from "../../tests/common/rng.mjs";

const [modelPath, threadsArg, cArg, pArg, gArg] = process.argv.slice(2);
const threads = Number(threadsArg), C = Number(cArg), nPrompt = Number(pArg), nGen = Number(gArg);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath, gpuLayers: 0, useMmap: true});
const {int: rnd} = makeRng(4242);
const V = Number(model.fileInfo.metadata?.[model.fileInfo.metadata.general.architecture]?.vocab_size ?? 256) || 256;
const tokens = (k) => Array.from({length: k}, () => 256 + rnd(Math.max(1, Math.min(V, 32000) - 512)));
const ctx = await model.createContext({contextSize: C * (nPrompt + nGen + 16), batchSize: 512, threads, sequences: C,
  flashAttention: false});
const seqs = Array.from({length: C}, () => ctx.getSequence());
const t0 = performance.now();
let generated = 0, firstTokenMs = [];
await Promise.all(seqs.map(async (seq) => {
  let count = 0;
  for await (const t of seq.evaluate(tokens(nPrompt), {temperature: 0})) {
    if (count === 0) firstTokenMs.push(performance.now() - t0);
    ++generated;
    if (++count >= nGen) break;
  }
}));
const secs = (performance.now() - t0) / 1000;
await ctx.dispose();
process.stdout.write(JSON.stringify({engine: "llama.cpp (node-llama-cpp 3.21.1)", concurrency: C, threads,
  output_tokens_per_second: generated / secs, seconds: secs, generated}) + "\n");
process.stdout.write("", () => process.exit(0));
