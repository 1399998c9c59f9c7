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

// |a - b| for two log-probs: NaN when either is NaN or not a number at all (a JSON null, a missing entry), 0 when
// they are equal (two -Infinity included). Every comparison counts NaN entries separately and fails on any: a
// running max `if (!(d <= worst)) worst = d` takes a NaN and then lets the next number overwrite it.
export function absDiff(a, b) {
  if (typeof a !== "number" || typeof b !== "number") return NaN;
  return a === b ? 0 : Math.abs(a - b);
}

// Max |delta log-prob| over every row and the whole vocabulary, argmax per row (a mismatch is forgiven only under
// a loose tol when the reference's top-2 margin is within it), optional mean bound. Prints one line; a failure
// sets the exit code.
// flips (optional, for types whose activations are rounded before each matmul: bf16): {tol, max} lets at most
// `max` positions exceed `tol` (the main bar) as long as they stay within flips.tol. One activation that lands on
// the other side of a bf16 rounding step after a last-ulp difference upstream (another exp, another summation
// order) moves that position's log-probs by up to ~1e-2 while every other position agrees to ~1e-6; such
// isolated positions are counted and printed, never hidden. flips.argmaxMargin (optional) replaces tol in the
// argmax rule (quantized types: positions past tol are flips, and argmax may differ where the top-2 margin is
// within flips.argmaxMargin).
export function compareLogprobs(label, ours, ref, tol, meanTol, flips) {
  let maxDiff = 0, argmaxBad = 0, worst = "", sum = 0, count = 0, nans = 0, nanWhere = "";
  const forgiveUpTo = flips?.argmaxMargin ?? (tol <= 1e-4 ? -1 : tol);
  const flipped = [];
  if (ours.length !== ref.length) return fail(`${label}: ${ours.length} rows vs ${ref.length}`);
  for (let i = 0; i < ours.length; ++i) {
    const a = ours[i], b = ref[i];
    if (a.length !== b.length) return fail(`${label}: vocab ${a.length} vs ${b.length}`);
    let rowMax = 0, rowWorst = 0;
    for (let t = 0; t < a.length; ++t) {
      const d = absDiff(a[t], b[t]);
      if (Number.isNaN(d)) {
        if (!nans++) nanWhere = `pos ${i} token ${t} (ours ${a[t]}, ref ${b[t]})`;
        continue;
      }
      sum += d;
      ++count;
      if (d > rowMax) { rowMax = d; rowWorst = t; }
    }
    if (flips && rowMax > tol && rowMax <= flips.tol) flipped.push(`${i}:${rowMax.toExponential(1)}`);
    else if (rowMax > maxDiff) { maxDiff = rowMax; worst = `pos ${i} token ${rowWorst}`; }
    const ia = argmax(a), ib = argmax(b);
    if (ia !== ib) {
      const sorted = [...b].sort((x, y) => y - x);
      const margin = sorted[0] - sorted[1];
      if (margin > forgiveUpTo) ++argmaxBad;
    }
  }
  const mean = count ? sum / count : NaN;
  const ok = nans === 0 && maxDiff <= tol && argmaxBad === 0 && (meanTol === undefined || mean <= meanTol) &&
             (!flips || flipped.length <= flips.max);
  const flipNote = flips ? `; positions past ${tol} (<= ${flips.tol}, at most ${flips.max}): ${flipped.length ? flipped.join(" ") : "none"}` : "";
  console.log(`${ok ? "ok  " : "FAIL"} ${label}: max |dlogprob| ${maxDiff.toExponential(2)} (tol ${tol}) at ${worst || "-"}; ` +
              `mean ${mean.toExponential(2)}${meanTol === undefined ? "" : ` (tol ${meanTol})`}; argmax mismatches ${argmaxBad}${flipNote}` +
              (nans ? `; ${nans} NaN or non-numeric entries, first at ${nanWhere}` : ""));
  if (!ok) process.exitCode = 1;
}
