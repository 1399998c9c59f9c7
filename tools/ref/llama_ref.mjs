// Reference runner: llama.cpp through node-llama-cpp (CPU, prebuilt binaries).
// Usage:
//   node llama_ref.mjs greedy MODEL.gguf N [TOKENS_JSON]   -> {"tokens":[...]}  (greedy from BOS or given prompt)
//   node llama_ref.mjs logprobs MODEL.gguf TOKENS_JSON     -> {"logprobs":[[...vocab...], ...]} one row per position
//   node llama_ref.mjs tokenize MODEL.gguf TEXT            -> {"tokens":[...]}
import {getLlama} from "node-llama-cpp";

const [cmd, modelPath, ...rest] = process.argv.slice(2);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath, gpuLayers: 0, useMmap: true});

async function makeSeq(ctxSize, threads) {
  // f32 KV cache and no flash attention: the reference keeps full precision so parity tolerances stay tight.
  const ctx = await model.createContext({contextSize: ctxSize, batchSize: ctxSize, threads: threads ?? 2, sequences: 1,
    flashAttention: false, experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32"});
  return ctx.getSequence();
}

if (cmd === "greedy") {
  const n = Number(rest[0]);
  const prompt = rest[1] ? JSON.parse(rest[1]) : [model.tokens.bos];
  const seq = await makeSeq(Math.max(64, prompt.length + n + 8));
  const out = [];
  for await (const t of seq.evaluate(prompt, {temperature: 0})) {
    out.push(t);
    if (out.length >= n) break;
  }
  process.stdout.write(JSON.stringify({tokens: out}) + "\n");
} else if (cmd === "logprobs") {
  const tokens = JSON.parse(rest[0]);
  const seq = await makeSeq(Math.max(64, tokens.length + 8));
  const input = tokens.map(t => [t, {generateNext: {probabilities: true}}]);
  const res = await seq.controlledEvaluate(input);
  const rows = res.map(r => {
    const m = r.next.probabilities;
    const row = [];
    for (const [tok, p] of m) row[tok] = Math.log(p);
    return row;
  });
  process.stdout.write(JSON.stringify({logprobs: rows}) + "\n");
} else if (cmd === "tokenize") {
  process.stdout.write(JSON.stringify({tokens: model.tokenize(rest[0], false)}) + "\n");
}
// Exit only once stdout has drained: a pipe takes 64 KiB at a time.
process.stdout.write("", () => process.exit(0));
