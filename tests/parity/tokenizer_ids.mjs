// Token ids from deepinfer's GGUF-embedded vocabularies equal llama.cpp's for stories260K (SentencePiece-style)
// and a make-tiny byte-level BPE vocabulary, and the HF tokenizer.json of the same tiny model gives the same ids.
// (The full Hugging Face tokenizer suite is the tokenizer issue's work.)
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {fail, llama, runDeepinfer, sharedModels} from "./common.mjs";

const bin = process.argv[2];
const texts = [
  "Once upon a time, there was a little girl named Lily.",
  "Hello world!  Two spaces,\ttab and\nnewline.",
  "Numbers 12345 and 3.14159; symbols #@$%^&*()",
  "She said: \"don't\" and 'I'll' -- ok?",
  "café naïve Straße 日本語 🐶",
  "   leading spaces and trailing   ",
];
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "deepinfer-tok-"));
runDeepinfer(bin, ["make-tiny", "--arch", "llama", "--vocab", "2000", "--out", path.join(tmp, "bpe"), "-q"]);
const l = await llama();
let failures = 0;
for (const [label, gguf, hfDir] of [["stories260K (spm)", path.join(sharedModels, "stories260K.gguf"), null],
                                    ["tiny byte-level BPE", path.join(tmp, "bpe/model.gguf"), path.join(tmp, "bpe")]]) {
  const model = await l.loadModel({modelPath: gguf, gpuLayers: 0, vocabOnly: true});
  for (const t of texts) {
    const ref = Array.from(model.tokenize(t, false));
    const ours = JSON.parse(runDeepinfer(bin, ["tokenize", "--tokenizer", gguf, "-p", t, "--json"]));
    const same = ref.join() === ours.join();
    if (!same) { ++failures; fail(`${label}: ${JSON.stringify(t)}\n  llama.cpp ${JSON.stringify(ref)}\n  deepinfer ${JSON.stringify(ours)}`); }
    if (hfDir) {
      const hf = JSON.parse(runDeepinfer(bin, ["tokenize", "--tokenizer", hfDir, "-p", t, "--json"]));
      if (hf.join() !== ref.join()) { ++failures; fail(`${label} tokenizer.json: ${JSON.stringify(t)} gives ${JSON.stringify(hf)}`); }
    }
    const back = runDeepinfer(bin, ["tokenize", "--tokenizer", gguf, "--decode", "-p", JSON.stringify(ours)]);
    if (back !== t) { ++failures; fail(`${label}: decode(encode(x)) != x for ${JSON.stringify(t)}: ${JSON.stringify(back)}`); }
  }
  await model.dispose();
  console.log(`${label}: ${texts.length} texts checked`);
}
fs.rmSync(tmp, {recursive: true, force: true});
console.log(failures ? `${failures} failure(s)` : "tokenizer ids match llama.cpp");
process.exit(failures ? 1 : 0);
