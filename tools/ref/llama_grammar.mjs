// llama.cpp's grammar sampler as a peer for `deepinfer bench grammar`: node llama_grammar.mjs MODEL_GGUF SCHEMAS_JSONL N_GEN [MAX_SCHEMAS]
// For each JSON Schema (node-llama-cpp's createGrammarForJsonSchema, llama.cpp's GBNF engine; schemas it cannot
// express are counted and skipped), one completion of up to N_GEN tokens at temperature 1 with the grammar, and
// the same completion without it. The grammar's cost per token is the difference of the per-token times; on a
// tiny model (1 layer, hidden 64) with a real 128k vocabulary the forward pass is small, so the difference is
// mostly the sampler checking candidates against the grammar. Prints one JSON line: per-token grammar cost
// (avg, p50, p99 over schemas; and over all schemas' tokens together with compiling included), compile time,
// and the number of schemas used.
import fs from "node:fs";
import {getLlama, LlamaCompletion} from "node-llama-cpp";

const [modelPath, schemasPath, gArg, maxArg] = process.argv.slice(2);
const nGen = Number(gArg ?? 64), maxSchemas = Number(maxArg ?? 1e9);
if (!modelPath || !schemasPath || !(nGen > 0)) {
  process.stderr.write("usage: node llama_grammar.mjs MODEL_GGUF SCHEMAS_JSONL N_GEN [MAX_SCHEMAS]\n");
  process.exit(2);
}
const schemas = fs.readFileSync(schemasPath, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l)).slice(0, maxSchemas);
const llama = await getLlama({gpu: false, build: "never", logLevel: "error"});
const model = await llama.loadModel({modelPath, gpuLayers: 0, useMmap: true});
const ctx = await model.createContext({contextSize: 512, threads: 1, sequences: 1});
const seq = ctx.getSequence();
const completion = new LlamaCompletion({contextSequence: seq});

async function timed(grammar, seed) {
  let tokens = 0;
  const t0 = process.hrtime.bigint();
  await completion.generateCompletion("Output:", {grammar, maxTokens: nGen, temperature: 1, seed,
                                                  onToken: (t) => { tokens += t.length; }});
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  await seq.clearHistory();
  return {ms, tokens};
}

const perToken = [], compileMs = [];
let gMs = 0, gTokens = 0, pMs = 0, pTokens = 0, cMs = 0;  // totals, for the cost per token with compiling included
let unsupported = 0, failed = 0;
for (let i = 0; i < schemas.length; ++i) {
  let grammar;
  const t0 = process.hrtime.bigint();
  try { grammar = await llama.createGrammarForJsonSchema(schemas[i]); } catch { ++unsupported; continue; }
  compileMs.push(Number(process.hrtime.bigint() - t0) / 1e6);
  try {
    const g = await timed(grammar, i + 1);
    const p = await timed(undefined, i + 1);
    if (g.tokens > 0 && p.tokens > 0) perToken.push(g.ms / g.tokens - p.ms / p.tokens);
    gMs += g.ms; gTokens += g.tokens; pMs += p.ms; pTokens += p.tokens; cMs += compileMs[compileMs.length - 1];
  } catch { ++failed; }
}
const pct = (v, q) => { const s = [...v].sort((a, b) => a - b); return s.length ? s[Math.min(s.length - 1, Math.floor(q * s.length))] : 0; };
const avg = (v) => v.reduce((a, b) => a + b, 0) / Math.max(1, v.length);
console.log(JSON.stringify({schemas: schemas.length, used: perToken.length, unsupported, failed,
                            grammar_ms_per_token_avg: avg(perToken), p50: pct(perToken, 0.5), p99: pct(perToken, 0.99),
                            compile_ms_avg: avg(compileMs), compile_ms_p99: pct(compileMs, 0.99),
                            // all schemas together, compiling included: what a batch of these requests costs extra per token
                            grammar_ms_per_token_total: (gMs + cMs) / Math.max(1, gTokens) - pMs / Math.max(1, pTokens)}));
process.exit(0);
