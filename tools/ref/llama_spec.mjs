// llama.cpp speculative-decoding peer: node llama_spec.mjs TARGET_GGUF THREADS PROMPTS_JSON N_GEN METHOD [DRAFT_GGUF] [K]
// PROMPTS_JSON holds a JSON array of prompts, each an array of token ids; their number is the concurrency C.
// All C sequences run at once in one context (node-llama-cpp batches their evaluations together), each generating
// up to N_GEN tokens greedily. METHOD: "plain" (no predictor), "lookup" (InputLookupTokenPredictor over the
// sequence's own prompt, up to K tokens a step) or "draft" (DraftSequenceTokenPredictor on a sequence of a second
// context made from DRAFT_GGUF, K tokens a step). Prints one JSON line with throughput, the prediction statistics
// and the generated tokens (which speculation must not change under greedy decoding).
//
// node-llama-cpp 3.21.1's speculative path has two bugs that cap what "draft" can show:
//  - LlamaContextSequence._speculativeEvaluate never fills its `validatedTokens` list, so in each verification
//    batch only the first predicted token can be validated; the rest are counted as refuted and erased even when
//    they were right (so at most 2 tokens come out of one target decode, whatever K is).
//  - DraftSequenceTokenPredictor, once the target has used up all its predictions, resumes drafting without first
//    feeding the draft sequence the last predicted token (it was sampled but never evaluated), so the draft falls
//    out of step and its next predictions are wrong even when the draft is the target itself.
// Hence the extra METHOD "draft-loop": the classic llama.cpp speculative loop (the draft model drafts K tokens
// greedily, the target verifies them in one batch of K+1 logits, the longest agreeing prefix plus the target's own
// next token is kept, rejected cells are erased from both KV caches), written here on controlledEvaluate and
// eraseContextTokenRanges. Its validated/refuted are counted by this script (drafted tokens accepted / rejected).
import fs from "node:fs";
import {getLlama, InputLookupTokenPredictor, DraftSequenceTokenPredictor} from "node-llama-cpp";

const [modelPath, threadsArg, promptsPath, gArg, method, draftPath, kArg] = process.argv.slice(2);
const threads = Number(threadsArg), nGen = Number(gArg), K = Number(kArg ?? 3);
if (!modelPath || !promptsPath || !(nGen > 0) || !["plain", "lookup", "draft", "draft-loop"].includes(method) ||
    (method.startsWith("draft") && !draftPath) || !(K > 0)) {
  process.stderr.write("usage: node llama_spec.mjs TARGET_GGUF THREADS PROMPTS_JSON N_GEN {plain|lookup|draft|draft-loop} [DRAFT_GGUF] [K]\n");
  process.exit(2);
}
const prompts = JSON.parse(fs.readFileSync(promptsPath, "utf8"));
if (!Array.isArray(prompts) || prompts.length === 0 ||
    !prompts.every((p) => Array.isArray(p) && p.length > 0 && p.every(Number.isInteger)))
  throw new Error(`${promptsPath}: expected a non-empty JSON array of non-empty token-id arrays`);
const C = prompts.length;
const maxPrompt = Math.max(...prompts.map((p) => p.length));
// contextSize is per sequence (node-llama-cpp allocates contextSize * sequences cells); leave room for predictions.
const contextSize = maxPrompt + nGen + K + 16;

// A deadlock inside node-llama-cpp (seen with DraftSequenceTokenPredictor's default minTokens 0 at C > 1) shows up
// as the event loop running dry; node-llama-cpp's own beforeExit handler would then end the process with status 0
// and no output. Registered before getLlama so it runs first: fail loudly instead.
let finished = false;
process.once("beforeExit", () => {
  if (finished) return;
  process.stderr.write("llama_spec.mjs: node-llama-cpp stalled (event loop drained before generation finished)\n");
  process.exit(3);
});
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath, gpuLayers: 0, useMmap: true});
const md = model.fileInfo.metadata;
const V = md?.tokenizer?.ggml?.tokens?.length ?? Number(md?.[md?.general?.architecture]?.vocab_size);
if (V > 0 && prompts.some((p) => p.some((t) => t < 0 || t >= V)))
  throw new Error(`${promptsPath}: token ids must lie in [0, ${V}) for ${modelPath}`);
const ctxOptions = {contextSize, batchSize: 512, threads, sequences: C, flashAttention: false};
const ctx = await model.createContext(ctxOptions);
let draftModel, draftCtx;
if (method.startsWith("draft")) {
  draftModel = await llama.loadModel({modelPath: draftPath, gpuLayers: 0, useMmap: true});
  draftCtx = await draftModel.createContext(ctxOptions);
}
const seqs = prompts.map((prompt) => {
  if (method === "plain" || method === "draft-loop") return ctx.getSequence();
  if (method === "lookup") {
    const tokenPredictor = new InputLookupTokenPredictor({patternLength: {min: 2, max: 4}, predictionLength: {max: K}});
    // Only LlamaChat / LlamaCompletion feed the predictor its input; with a bare sequence.evaluate we must do it
    // ourselves, or it never predicts anything.
    tokenPredictor.updateInputTokens(prompt);
    return ctx.getSequence({tokenPredictor});
  }
  // minConfidence 0 disables the confidence cut-off. minTokens K makes the target wait for K drafted tokens each
  // step, as llama.cpp's speculative loop does; with the default (0) the target never waits, and as the draft runs
  // no faster than the target here, its predictions always arrive too late and none is ever used.
  const tokenPredictor = new DraftSequenceTokenPredictor(draftCtx.getSequence(), {minTokens: K, maxTokens: K, minConfidence: 0});
  return ctx.getSequence({tokenPredictor});
});

const draftSeqs = method === "draft-loop" ? prompts.map(() => draftCtx.getSequence()) : [];
const next = {generateNext: {token: true}};  // greedy: controlledEvaluate samples with temperature 0 by default
const outputs = seqs.map(() => []);
let loopValidated = 0, loopRefuted = 0;

// One sequence of the explicit draft-then-verify loop. Invariant at the top of each round: both sequences hold
// the same accepted tokens except `last` (accepted, evaluated by neither) and `draftPending` (accepted, evaluated by
// the target only).
async function draftLoop(i) {
  const seq = seqs[i], dseq = draftSeqs[i], out = outputs[i], prompt = prompts[i];
  const [, first] = await Promise.all([dseq.evaluateWithoutGeneratingNewTokens(prompt),
    seq.controlledEvaluate(prompt.map((t, j) => j === prompt.length - 1 ? [t, next] : t))]);
  let last = first.at(-1).next.token, draftPending = [];
  while (last != null && !model.isEogToken(last)) {
    out.push(last);
    if (out.length >= nGen) return;
    const drafted = [];
    let input = [...draftPending, last];
    for (let j = 0; j < K; ++j) {
      const res = await dseq.controlledEvaluate(input.map((t, m) => m === input.length - 1 ? [t, next] : t));
      const tok = res.at(-1)?.next?.token;
      if (tok == null) break;
      drafted.push(tok);
      input = [tok];
    }
    // The draft sequence now holds ...last, drafted[0 .. n-2] and has not evaluated drafted.at(-1).
    const verify = await seq.controlledEvaluate([last, ...drafted].map((t) => [t, next]));
    let n = 0;
    while (n < drafted.length && verify[n]?.next?.token === drafted[n]) ++n;
    loopValidated += n;
    loopRefuted += drafted.length - n;
    if (n < drafted.length) {
      await seq.eraseContextTokenRanges([{start: seq.nextTokenIndex - (drafted.length - n), end: seq.nextTokenIndex}]);
      const extra = drafted.length - 1 - n;  // rejected drafts the draft sequence did evaluate
      if (extra > 0)
        await dseq.eraseContextTokenRanges([{start: dseq.nextTokenIndex - extra, end: dseq.nextTokenIndex}]);
      draftPending = [];
    } else {
      draftPending = drafted.length > 0 ? [drafted.at(-1)] : [];
    }
    for (let j = 0; j < n; ++j) {
      if (model.isEogToken(drafted[j])) return;
      out.push(drafted[j]);
      if (out.length >= nGen) return;
    }
    last = verify[n]?.next?.token;
  }
}

const t0 = performance.now();
await Promise.all(seqs.map(async (seq, i) => {
  if (method === "draft-loop") return draftLoop(i);
  for await (const t of seq.evaluate(prompts[i], {temperature: 0})) {
    outputs[i].push(t);
    if (outputs[i].length >= nGen) break;
  }
}));
const secs = (performance.now() - t0) / 1000;
const generated = outputs.reduce((s, o) => s + o.length, 0);
let validated = loopValidated, refuted = loopRefuted;
if (method !== "draft-loop") {
  for (const seq of seqs) {
    const stats = seq.tokenPredictions;
    validated += stats.validated;
    refuted += stats.refuted;
  }
}
finished = true;
await ctx.dispose();
if (draftCtx) await draftCtx.dispose();
process.stdout.write(JSON.stringify({engine: "llama.cpp (node-llama-cpp 3.21.1)", method, concurrency: C, threads,
  k: K, generated, seconds: secs, output_tokens_per_second: generated / secs, validated, refuted,
  tokens: outputs}) + "\n");
// Exit only once stdout has drained: a pipe takes 64 KiB at a time.
process.stdout.write("", () => process.exit(0));
