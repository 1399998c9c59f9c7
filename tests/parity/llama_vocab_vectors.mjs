// llama.cpp's own tokenizer test vectors (models/ggml-vocab-*.gguf with .inp/.out, extracted from the source
// bundle node-llama-cpp ships): every vector of every vocabulary deepinfer supports must give the same ids
// (llama.cpp's test tokenizes without BOS and without parsing special tokens). Vocabularies we do not support
// are listed with the reason, never silently skipped.
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import {repoRoot} from "./common.mjs";

const bin = process.argv[2];
const dataDir = path.join(repoRoot, "tools/ref/llama-data");
if (!fs.existsSync(dataDir)) {
  console.error(`FAIL: ${dataDir} missing (scripts/extract_llama_data.sh)`);
  process.exit(1);
}
let failures = 0, passedVocabs = 0;
const unsupported = [];
for (const f of fs.readdirSync(dataDir).filter(f => f.endsWith(".gguf")).sort()) {
  const gguf = path.join(dataDir, f);
  if (!fs.existsSync(gguf + ".inp")) continue;  // a vocabulary without vectors
  const inputs = fs.readFileSync(gguf + ".inp", "utf8").split("\n__ggml_vocab_test__\n");
  if (inputs.length && inputs[inputs.length - 1].endsWith("\n__ggml_vocab_test__")) inputs[inputs.length - 1] = inputs[inputs.length - 1].slice(0, -20);
  const expected = fs.readFileSync(gguf + ".out", "utf8").split("\n").slice(0, inputs.length)
      .map(l => l.trim() === "" ? [] : l.trim().split(/\s+/).map(Number));
  const r = spawnSync(bin, ["tokenize", "--tokenizer", gguf, "--batch"],
                      {input: inputs.map(t => JSON.stringify(t)).join("\n") + "\n", encoding: "utf8", maxBuffer: 1 << 28});
  if (r.status !== 0) {
    unsupported.push(`${f}: ${r.stderr.trim().split("\n").pop()}`);
    continue;
  }
  const got = r.stdout.trimEnd().split("\n").map(l => JSON.parse(l));
  let bad = 0;
  for (let i = 0; i < inputs.length; ++i) {
    if ((got[i] ?? []).join() === expected[i].join()) continue;
    if (++bad <= 2) console.log(`  ${f} #${i} ${JSON.stringify(inputs[i]).slice(0, 80)}\n    ours ${JSON.stringify(got[i]).slice(0, 120)}\n    want ${JSON.stringify(expected[i]).slice(0, 120)}`);
  }
  console.log(`${bad ? "FAIL" : "ok  "} ${f}: ${inputs.length - bad}/${inputs.length} vectors`);
  if (bad) ++failures; else ++passedVocabs;
}
for (const u of unsupported) console.log(`unsupported ${u}`);
console.log(`${passedVocabs} vocabularies pass, ${failures} fail, ${unsupported.length} unsupported`);
process.exit(failures ? 1 : 0);
