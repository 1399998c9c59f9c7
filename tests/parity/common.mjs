// Shared helpers for the parity tests: run deepinfer, run llama.cpp (node-llama-cpp) in-process.
import {execFileSync} from "node:child_process";
import {createRequire} from "node:module";
import path from "node:path";
import {fileURLToPath} from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
export const repoRoot = path.resolve(here, "../..");
export const sharedModels = process.env.DEEPINFER_SHARED_MODELS ?? path.resolve(repoRoot, "../shared/models");

// node-llama-cpp lives in tools/ref (installed by scripts/setup.sh from its lockfile).
const require = createRequire(path.join(repoRoot, "tools/ref/package.json"));
const {getLlama} = await import(require.resolve("node-llama-cpp"));
let llamaPromise = null;
export function llama() {
  llamaPromise ??= getLlama({gpu: false, build: "never", logLevel: "error"});
  return llamaPromise;
}

export function runDeepinfer(bin, args, opts = {}) {
  return execFileSync(bin, args, {encoding: "utf8", maxBuffer: 1 << 30, stdio: ["ignore", "pipe", "pipe"], ...opts});
}

// Full-vocabulary log-probabilities at every position, from llama.cpp with an f32 KV cache.
export async function llamaLogprobs(modelPath, tokens) {
  const l = await llama();
  const model = await l.loadModel({modelPath, gpuLayers: 0});
  const ctx = await model.createContext({contextSize: Math.max(64, tokens.length + 8), batchSize: Math.max(64, tokens.length + 8),
    threads: 2, sequences: 1, flashAttention: false, experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32"});
  const seq = ctx.getSequence();
  const res = await seq.controlledEvaluate(tokens.map(t => [t, {generateNext: {probabilities: true}}]));
  const rows = res.map(r => {
    const row = [];
    for (const [tok, p] of r.next.probabilities) row[tok] = Math.log(p);
    return row;
  });
  await ctx.dispose();
  await model.dispose();
  return rows;
}

export async function llamaGreedy(modelPath, n) {
  const l = await llama();
  const model = await l.loadModel({modelPath, gpuLayers: 0});
  const ctx = await model.createContext({contextSize: 512, threads: 2, sequences: 1});
  const seq = ctx.getSequence();
  const out = [];
  for await (const t of seq.evaluate([model.tokens.bos], {temperature: 0})) {
    out.push(t);
    if (out.length >= n) break;
  }
  await ctx.dispose();
  await model.dispose();
  return out;
}

export function argmax(row) {
  let best = 0;
  for (let i = 1; i < row.length; ++i) if (row[i] > row[best]) best = i;
  return best;
}

export function fail(msg) {
  console.error("FAIL: " + msg);
  process.exitCode = 1;
}
