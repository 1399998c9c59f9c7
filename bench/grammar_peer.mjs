// Grammar cost per generated token, deepinfer vs llama.cpp's grammar sampler, same model, same schemas, same run
// (docs/benchmarks.md "Structured output"). The model should be tiny with a real vocabulary, so the forward pass
// is small next to the grammar work: e.g. make-tiny --arch llama --vocab 128256 --hidden 64 --layers 1 with the
// Llama-3 tokenizer.json copied in, then convert to GGUF (the commands are in docs/benchmarks.md).
//   node bench/grammar_peer.mjs BIN MODEL_GGUF SCHEMAS_JSONL [--gen 64] [--schemas N]
// deepinfer: `generate --input` with one request at a time (--max-num-seqs 1), every schema as response_format,
// then the same requests without it (ignore_eos); cost per token = time per token with grammar minus without.
// llama.cpp: tools/ref/llama_grammar.mjs (node-llama-cpp, one thread), the same difference per schema.
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {fileURLToPath} from "node:url";

const [bin, model, schemasPath, ...rest] = process.argv.slice(2);
if (!bin || !model || !schemasPath) {
  console.error("usage: node bench/grammar_peer.mjs BIN MODEL_GGUF SCHEMAS_JSONL [--gen G] [--schemas N]");
  process.exit(2);
}
const opt = {gen: 64, schemas: 1e9};
for (let i = 0; i < rest.length; i += 2) opt[rest[i].replace(/^--/, "")] = Number(rest[i + 1]);
const here = path.dirname(fileURLToPath(import.meta.url));
const schemas = fs.readFileSync(schemasPath, "utf8").split("\n").filter(Boolean).slice(0, opt.schemas).map((l) => JSON.parse(l));
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "deepinfer-grammarpeer-"));

function deepinfer(grammar) {
  const lines = schemas.map((schema, i) => JSON.stringify({prompt: "Output:", max_tokens: opt.gen, temperature: 1, seed: i + 1,
    ...(grammar ? {response_format: {type: "json_schema", json_schema: {name: "s", schema}}} : {ignore_eos: true})}));
  const input = path.join(dir, "in.jsonl"), output = path.join(dir, "out.jsonl");
  fs.writeFileSync(input, lines.join("\n") + "\n");
  const t0 = process.hrtime.bigint();
  const r = spawnSync(bin, ["generate", "-m", model, "--input", input, "--output", output, "-q", "-t", "1", "--max-num-seqs", "1"],
                      {encoding: "utf8"});
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  if (r.status !== 0) throw new Error(`generate failed: ${r.stderr}`);
  const out = fs.readFileSync(output, "utf8").trim().split("\n").map((l) => JSON.parse(l));
  return {secs, tokens: out.reduce((a, o) => a + (o.usage?.completion_tokens ?? 0), 0), errors: out.filter((o) => o.error).length};
}

deepinfer(false);  // warm-up
const g = deepinfer(true), p = deepinfer(false);
const diMs = (g.secs / g.tokens - p.secs / p.tokens) * 1000;
console.log(`deepinfer: ${schemas.length} schemas, ${g.tokens} constrained tokens in ${g.secs.toFixed(2)} s, ${p.tokens} plain tokens in ` +
            `${p.secs.toFixed(2)} s (process start and load included in both); grammar cost ${diMs.toFixed(3)} ms/token` +
            (g.errors ? ` (${g.errors} requests refused)` : ""));
const schemaFile = path.join(dir, "schemas.jsonl");
fs.writeFileSync(schemaFile, schemas.map((s) => JSON.stringify(s)).join("\n") + "\n");
const ref = spawnSync(process.execPath, [path.join(here, "../tools/ref/llama_grammar.mjs"), model, schemaFile, String(opt.gen)],
                      {encoding: "utf8", cwd: path.join(here, "../tools/ref")});
const line = ref.stdout.trim().split("\n").pop();
let l;
try { l = JSON.parse(line); } catch { throw new Error(`llama_grammar.mjs: ${ref.stderr || line}`); }
console.log(`llama.cpp (node-llama-cpp): ${l.used}/${l.schemas} schemas (${l.unsupported} its converter refused), grammar cost ` +
            `avg ${l.grammar_ms_per_token_avg.toFixed(3)} ms/token (p50 ${l.p50.toFixed(3)}, p99 ${l.p99.toFixed(3)}), ` +
            `compile avg ${l.compile_ms_avg.toFixed(2)} ms; all tokens together, compiling included: ` +
            `${l.grammar_ms_per_token_total.toFixed(3)} ms/token`);
console.log(`ratio (all tokens, compiling included on both sides): llama.cpp / deepinfer grammar cost per token = ` +
            `${(l.grammar_ms_per_token_total / Math.max(diMs, 1e-3)).toFixed(1)}x`);
fs.rmSync(dir, {recursive: true, force: true});
