// Decode throughput lost to grammar masks (docs/benchmarks.md "Structured output: throughput at 32 concurrent
// requests"): the same batch of C concurrent requests through `deepinfer generate --input`, plain and with a
// JSON Schema on every request, on a model with a real 128k-token vocabulary. The schema (an array of at least
// 200 short strings) cannot complete within --gen tokens, so every row decodes exactly --gen tokens in both runs;
// seeded sampling at temperature 1 keeps the walk inside strings, where masks are widest.
// Decode time = wall time at --gen tokens minus wall time at 1 token (loading, prefill), per configuration.
// --max-length N bounds each string (maxLength, the default 24); 0 leaves strings unbounded.
//   node bench/grammar_throughput.mjs BIN MODEL [--requests 32] [--gen 48] [--repeat 2] [--max-length 24]
// Runs alternate plain / grammar --repeat times; the best of each is kept (load from elsewhere only slows).
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const [bin, model, ...rest] = process.argv.slice(2);
if (!bin || !model) {
  console.error("usage: node bench/grammar_throughput.mjs BIN MODEL [--requests N] [--gen G] [--repeat R]");
  process.exit(2);
}
const opt = {requests: 32, gen: 48, repeat: 2, "max-length": 24};
for (let i = 0; i < rest.length; i += 2) opt[rest[i].replace(/^--/, "")] = Number(rest[i + 1]);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "deepinfer-grammarbench-"));
const schema = {type: "array", items: {type: "string", ...(opt["max-length"] > 0 ? {maxLength: opt["max-length"]} : {})},
                minItems: 200};

function run(grammar, gen) {
  const lines = Array.from({length: opt.requests}, (_, i) => JSON.stringify({
    prompt: `Record ${i}: list the names.`, max_tokens: gen, temperature: 1, seed: i,
    ...(grammar ? {response_format: {type: "json_schema", json_schema: {name: "names", schema}}} : {ignore_eos: true})}));
  const input = path.join(dir, "in.jsonl"), output = path.join(dir, "out.jsonl");
  fs.writeFileSync(input, lines.join("\n") + "\n");
  const t0 = process.hrtime.bigint();
  const r = spawnSync(bin, ["generate", "-m", model, "--input", input, "--output", output, "-q",
                            "--max-num-seqs", String(opt.requests), "--kv-cache", "1GiB"], {encoding: "utf8"});
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  if (r.status !== 0) throw new Error(`generate failed: ${r.stderr}`);
  const out = fs.readFileSync(output, "utf8").trim().split("\n").map(l => JSON.parse(l));
  const tokens = out.reduce((a, o) => a + o.usage.completion_tokens, 0);
  const lengths = out.filter(o => o.finish_reason === "length").length;
  return {secs, tokens, lengths, sample: out[0].text};
}

const best = {};
run(false, 1);  // warm-up: the model file into the page cache
for (let k = 0; k < opt.repeat; ++k)
  for (const grammar of [false, true])
    for (const gen of [1, opt.gen]) {
      const key = `${grammar ? "grammar" : "plain"}-${gen}`;
      const r = run(grammar, gen);
      if (!best[key] || r.secs < best[key].secs) best[key] = r;
    }
const rate = (g) => {
  const full = best[`${g}-${opt.gen}`], one = best[`${g}-1`];
  return {tokPerS: (full.tokens - one.tokens) / (full.secs - one.secs), full, one};
};
const plain = rate("plain"), grammar = rate("grammar");
console.log(`model ${path.basename(model)}, ${opt.requests} concurrent requests, ${opt.gen} tokens each (best of ${opt.repeat}), ` +
            `schema ${JSON.stringify(schema)}`);
for (const [name, r] of [["plain", plain], ["json_schema", grammar]])
  console.log(`  ${name.padEnd(12)} decode ${r.tokPerS.toFixed(2)} tok/s (${r.full.tokens} tokens in ${r.full.secs.toFixed(2)} s, ` +
              `1-token run ${r.one.secs.toFixed(2)} s; ${r.full.lengths}/${opt.requests} rows ran to max_tokens)`);
console.log(`  a grammar row's text starts: ${JSON.stringify(grammar.full.sample.slice(0, 60))}`);
console.log(`  throughput with grammars: ${(grammar.tokPerS / plain.tokPerS).toFixed(3)}x plain ` +
            `(loss ${(100 * (1 - grammar.tokPerS / plain.tokPerS)).toFixed(1)}%)`);
fs.rmSync(dir, {recursive: true, force: true});
