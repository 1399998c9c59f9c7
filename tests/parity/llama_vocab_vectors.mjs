// llama.cpp's own tokenizer test vectors (models/ggml-vocab-*.gguf with .inp/.out, extracted from the source
// bundle node-llama-cpp ships): every vector of every vocabulary deepinfer supports must give the same ids
// (llama.cpp's test tokenizes without BOS and without parsing special tokens). A few vocabularies ship without
// vectors (aquila, baichuan, gpt-neox, nomic-bert-moe): for those the expected ids are llama.cpp's own, computed
// now through node-llama-cpp on the inputs of ggml-vocab-llama-bpe.gguf.inp.
// Nothing is skipped: llama_vocab_vectors.json lists every vocabulary as "pass" (every vector must match) or
// "unsupported" (deepinfer must refuse it cleanly: exit code 1, no signal, and exactly the expected reason). A
// vocabulary on neither list, a listed one that is missing, a crash, a different reason, or an unsupported one
// that now loads (update the list) fails the test.
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import {llama, repoRoot} from "./common.mjs";

const bin = process.argv[2];
const dataDir = path.join(repoRoot, "tools/ref/llama-data");
const expected = JSON.parse(fs.readFileSync(new URL("./llama_vocab_vectors.json", import.meta.url), "utf8"));
const PASS = new Set(expected.pass), UNSUPPORTED = new Map(Object.entries(expected.unsupported));
let failures = 0;
const fail = msg => { console.log(`FAIL ${msg}`); ++failures; };
if (!fs.existsSync(dataDir)) {
  console.error(`FAIL: ${dataDir} missing (scripts/extract_llama_data.sh)`);
  process.exit(1);
}
const splitInputs = file => {
  const inputs = fs.readFileSync(file, "utf8").split("\n__ggml_vocab_test__\n");
  if (inputs.length && inputs[inputs.length - 1].endsWith("\n__ggml_vocab_test__")) inputs[inputs.length - 1] = inputs[inputs.length - 1].slice(0, -20);
  return inputs;
};
const present = fs.readdirSync(dataDir).filter(f => f.endsWith(".gguf")).sort();
for (const f of [...PASS, ...UNSUPPORTED.keys()])
  if (!present.includes(f)) fail(`${f}: listed in llama_vocab_vectors.json but not in ${dataDir}`);
let passed = 0, refused = 0;
for (const f of present) {
  const gguf = path.join(dataDir, f);
  if (!PASS.has(f) && !UNSUPPORTED.has(f)) {
    fail(`${f}: on neither list of llama_vocab_vectors.json (a new vocabulary in the llama.cpp bundle: decide and list it)`);
    continue;
  }
  let inputs, expectedIds, source;
  if (fs.existsSync(gguf + ".inp")) {
    inputs = splitInputs(gguf + ".inp");
    expectedIds = fs.readFileSync(gguf + ".out", "utf8").split("\n").slice(0, inputs.length)
        .map(l => l.trim() === "" ? [] : l.trim().split(/\s+/).map(Number));
    source = "llama.cpp's vectors";
  } else {
    inputs = splitInputs(path.join(dataDir, "ggml-vocab-llama-bpe.gguf.inp"));
    source = "llama.cpp's ids now (no vectors shipped)";
  }
  const r = spawnSync(bin, ["tokenize", "--tokenizer", gguf, "--batch"],
                      {input: inputs.map(t => JSON.stringify(t)).join("\n") + "\n", encoding: "utf8", maxBuffer: 1 << 28});
  const last = (r.stderr ?? "").trim().split("\n").pop();
  if (r.signal !== null || r.status === null) {
    fail(`${f}: tokenize crashed (signal ${r.signal}${r.error ? `, ${r.error}` : ""}): ${last}`);
    continue;
  }
  if (UNSUPPORTED.has(f)) {
    const want = `error: unsupported: ${gguf}: ${UNSUPPORTED.get(f)}`;
    if (r.status === 0) fail(`${f}: listed as unsupported ("${UNSUPPORTED.get(f)}") but now tokenizes: check its vectors and move it to "pass"`);
    else if (r.status !== 1 || last !== want) fail(`${f}: expected exit 1 with\n    ${want}\n  got exit ${r.status} with\n    ${last}`);
    else { ++refused; console.log(`ok   ${f}: refused: ${UNSUPPORTED.get(f)}`); }
    continue;
  }
  if (r.status !== 0) {
    fail(`${f}: tokenize exited ${r.status}: ${last}`);
    continue;
  }
  if (!expectedIds) {
    const model = await (await llama()).loadModel({modelPath: gguf, gpuLayers: 0, vocabOnly: true});
    expectedIds = inputs.map(t => Array.from(model.tokenize(t, false)));
    await model.dispose();
  }
  const got = r.stdout.trimEnd().split("\n").map(l => JSON.parse(l));
  let bad = got.length === inputs.length ? 0 : 1;
  if (bad) console.log(`  ${f}: ${got.length} results for ${inputs.length} inputs`);
  for (let i = 0; i < inputs.length; ++i) {
    if ((got[i] ?? []).join() === expectedIds[i].join()) continue;
    if (++bad <= 2) console.log(`  ${f} #${i} ${JSON.stringify(inputs[i]).slice(0, 80)}\n    ours ${JSON.stringify(got[i]).slice(0, 120)}\n    want ${JSON.stringify(expectedIds[i]).slice(0, 120)}`);
  }
  if (bad) fail(`${f}: ${bad} of ${inputs.length} vectors differ (${source})`);
  else { ++passed; console.log(`ok   ${f}: ${inputs.length}/${inputs.length} vectors (${source})`); }
}
console.log(`${passed} of ${PASS.size} vocabularies pass, ${refused} of ${UNSUPPORTED.size} refused as expected, ${failures} failure(s)`);
process.exit(failures || passed !== PASS.size || refused !== UNSUPPORTED.size ? 1 : 0);
