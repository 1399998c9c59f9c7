// The GGUF pre-tokenizer "gpt-4o" (o200k: gpt-oss, Llama 4) against llama.cpp's tokenizer. No real o200k
// vocabulary ships with the test data, so a make-tiny byte-level BPE vocabulary is given gpt-oss's
// tokenizer.json pre-tokenizer (its Split regex, then ByteLevel without its own regex) and o200k_harmony's
// special tokens, converted by `deepinfer convert` (which must name it "gpt-4o", as llama.cpp's converter
// does). deepinfer's ids from the GGUF must equal llama.cpp's (node-llama-cpp) and its ids from the tokenizer.json
// must equal Hugging Face tokenizers' (llama.cpp runs a rewrite of the regex that treats combining marks and
// non-ASCII capitals differently, see src/tokenizer/vocab.cc), on fixed texts (numbers, contractions, case runs, CJK, whitespace runs,
// punctuation, emoji) and on random texts drawn by the shared seeded generator from the same kinds of pieces.
// The pre-tokenizer decides where merges may not cross, so a wrong split gives different ids.
import {spawnSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {createRequire} from "node:module";
import {llama, repoRoot, runDeepinfer} from "./common.mjs";
import {makeRng} from "../common/rng.mjs";

const bin = process.argv[2];
const {Tokenizer: HfTokenizer} = createRequire(path.join(repoRoot, "tools/ref/package.json"))("@anush008/tokenizers");
let failures = 0;
const fail = msg => { console.log(`FAIL ${msg}`); ++failures; };

// gpt-oss's tokenizer.json pre_tokenizer, verbatim.
const GPT4O_REGEX = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const HARMONY_SPECIALS = ["<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>", "<|start|>",
                                 "<|end|>", "<|message|>", "<|call|>"];

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "deepinfer-gpt4o-"));
const dir = path.join(tmp, "m");
runDeepinfer(bin, ["make-tiny", "--arch", "llama", "--vocab", "2000", "--out", dir, "-q"]);
const tj = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
tj.pre_tokenizer = {type: "Sequence", pretokenizers: [
  {type: "Split", pattern: {Regex: GPT4O_REGEX}, behavior: "Isolated", invert: false},
  {type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false}]};
// The Harmony markers take the ids of the vocabulary's last ordinary tokens (the model's rows stay as many).
const byId = Object.entries(tj.model.vocab).sort((a, b) => b[1] - a[1]);
HARMONY_SPECIALS.forEach((s, i) => {
  const [piece, id] = byId[i];
  delete tj.model.vocab[piece];
  tj.added_tokens.push({id, content: s, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true});
});

const fixed = [
  "Hello world! HELLO World's THE CAT'S hat; we'll I'M you'RE they'Ve",
  "Numbers 1 12 123 1234 12345 3.14159 1,000,000 and 2024-06-28",
  "camelCase PascalCase XMLHttpRequest iPhone McDonald ÉCOLE École ÀB",
  "CJK 日本語のテキスト 中文字符 한국어 mixed日本abc",
  "Whitespace:   three  two\t\ttabs\n\nnewlines\r\n crlf   \n  trailing   ",
  "Punctuation!!! ??? ... --- /// path/to/file a/b/c\n/x {\"json\": [1, 2]} <tag/> #@$%^&*()",
  "Emoji 🐶🐱 👍🏽 family 👨‍👩‍👧 flags 🇫🇷 and ✨",
  "Marks: e\u0301 n\u0303 Z\u0327 ก\u0e34 हिन्दी",
  "'s 'S 't 'LL 'd's don't DON'T",
  "",
];
const pieces = ["the", "The", "THE", "cat's", "CAT'S", "I'm", "we'LL", "Élan", "naïve", "straße", "ΣΊΣΥΦΟΣ", "σίσυφος", "日本", "한국", "🐶",
                "👍🏽", "1", "22", "333", "4444", "55555", " ", "  ", "   ", "\t", "\n", "\r\n", "\n\n", "!", "?!", "...", "/", "//",
                "a/b", "-", "_", "(", ")", "[x]", "{", "}", "\"", "'", "e\u0301", "AbC", "aBC", "McX", "x", "Q"];
const rng = makeRng(4242);
const random = [];
for (let i = 0; i < 60; ++i) {
  let s = "";
  const n = rng.range(1, 24);
  for (let k = 0; k < n; ++k) s += rng.pick(pieces);
  random.push(s);
}
const texts = [...fixed, ...random];

// make-tiny's merges join random lowercase letters, so almost no merge would cross the boundaries pre-tokenizers
// disagree on (case changes, contractions, digits, punctuation runs, newlines). Every adjacent byte pair of the
// texts gets a merge (at the lowest priority, on the ids of the vocabulary's last ordinary tokens, whose merges
// go): a piece boundary in the wrong place then changes the ids.
const b2u = (() => {
  const bs = [];
  for (let b = 33; b <= 126; ++b) bs.push(b);
  for (let b = 161; b <= 172; ++b) bs.push(b);
  for (let b = 174; b <= 255; ++b) bs.push(b);
  const map = new Map(bs.map(b => [b, String.fromCodePoint(b)]));
  let n = 0;
  for (let b = 0; b < 256; ++b) if (!map.has(b)) map.set(b, String.fromCodePoint(256 + n++));
  return map;
})();
const pairs = new Set();
for (const t of texts) {
  const u = [...Buffer.from(t, "utf8")].map(b => b2u.get(b));
  for (let i = 0; i + 1 < u.length; ++i) if (!((u[i] + u[i + 1]) in tj.model.vocab)) pairs.add(u[i] + " " + u[i + 1]);
}
const freed = byId.slice(HARMONY_SPECIALS.length, HARMONY_SPECIALS.length + pairs.size);
if (freed.some(([, fid]) => fid < 512)) fail(`too many pairs (${pairs.size}) for the tiny vocabulary`);
const gone = new Set([...byId.slice(0, HARMONY_SPECIALS.length), ...freed].map(([p]) => p));
for (const [p] of freed) delete tj.model.vocab[p];
for (let changed = true; changed;) {  // merges that make or use a freed token go, and what only they made
  changed = false;
  tj.model.merges = tj.model.merges.filter(m => {
    const [a, b] = m.split(" ");
    const keep = !gone.has(a) && !gone.has(b) && !gone.has(a + b);
    if (!keep && !gone.has(a + b) && (a + b) in tj.model.vocab) { gone.add(a + b); delete tj.model.vocab[a + b]; }
    if (!keep) changed = true;
    return keep;
  });
}
[...pairs].forEach((m, i) => {
  tj.model.vocab[m.replace(" ", "")] = freed[i][1];
  tj.model.merges.push(m);
});
fs.writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(tj));
const cfg = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
cfg.eos_token = "<|return|>";  // as gpt-oss's tokenizer_config.json
fs.writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify(cfg));
const gguf = path.join(tmp, "gpt4o.gguf");
const conv = spawnSync(bin, ["convert", "-m", dir, "-o", gguf, "-q"], {encoding: "utf8"});
if (conv.status !== 0) fail(`convert: ${conv.stderr}`);


const l = await llama();
const model = await l.loadModel({modelPath: gguf, gpuLayers: 0, vocabOnly: true});
const batch = (tok) => {
  const r = spawnSync(bin, ["tokenize", "--tokenizer", tok, "--batch"], {input: texts.map(t => JSON.stringify(t)).join("\n") + "\n",
                                                                           encoding: "utf8", maxBuffer: 1 << 28});
  if (r.status !== 0) { fail(`tokenize ${tok}: ${r.stderr}`); return texts.map(() => []); }
  return r.stdout.trimEnd().split("\n").map(l => JSON.parse(l));
};
const fromGguf = batch(gguf), fromJson = batch(dir);
const hf = HfTokenizer.fromFile(path.join(dir, "tokenizer.json"));
let sameGguf = 0, sameJson = 0, hfVsLlama = 0;
for (let i = 0; i < texts.length; ++i) {
  const t = texts[i];
  const ref = Array.from(model.tokenize(t, false));
  const hfIds = Array.from((await hf.encode(t, null, {addSpecialTokens: false})).getIds());
  if (ref.join() !== fromGguf[i].join()) fail(`GGUF ${JSON.stringify(t)}\n  llama.cpp ${JSON.stringify(ref)}\n  deepinfer ${JSON.stringify(fromGguf[i])}`);
  else ++sameGguf;
  if (hfIds.join() !== fromJson[i].join()) fail(`tokenizer.json ${JSON.stringify(t)}\n  HF tokenizers ${JSON.stringify(hfIds)}\n  deepinfer ${JSON.stringify(fromJson[i])}`);
  else ++sameJson;
  hfVsLlama += hfIds.join() !== ref.join();
}
// The two references differ where llama.cpp's rewrite does (combining marks, non-ASCII capitals): the texts reach
// those cases, so each side is checked against its own reference and not merely against the other.
if (hfVsLlama === 0) fail("no text tells llama.cpp's gpt-4o rewrite from the tokenizer.json regex: the texts miss the cases");
console.log(`GGUF: ${sameGguf}/${texts.length} texts as llama.cpp; tokenizer.json: ${sameJson}/${texts.length} as HF tokenizers ` +
            `(the two references differ on ${hfVsLlama})`);
// The file really says gpt-4o (a converter that fell back to another name would test nothing).
const meta = model.fileInfo?.metadata?.tokenizer?.ggml?.pre;
if (meta !== undefined && meta !== "gpt-4o") fail(`the converted GGUF's tokenizer.ggml.pre is ${meta}, not gpt-4o`);
const head = fs.readFileSync(gguf).subarray(0, 1 << 16).toString("latin1");
if (!head.includes("gpt-4o")) fail("the converted GGUF does not name the gpt-4o pre-tokenizer");
await model.dispose();
fs.rmSync(tmp, {recursive: true, force: true});
console.log(failures ? `${failures} failure(s)` : "gpt-4o pre-tokenizer matches llama.cpp");
process.exit(failures ? 1 : 0);
