// Peer for the tokenizer benchmark: the Hugging Face tokenizers library (@anush008/tokenizers, native Rust),
// encoding the documents one call at a time (single-threaded work; batch calls would fan out over rayon).
// Usage: node hf_tokenizer_bench.mjs TOKENIZER_JSON DOCS.jsonl [REPS]
import fs from "node:fs";
import {Tokenizer} from "@anush008/tokenizers";

const [tokPath, docsPath, repsArg] = process.argv.slice(2);
const docs = fs.readFileSync(docsPath, "utf8").trimEnd().split("\n").map(l => JSON.parse(l));
const bytes = docs.reduce((a, d) => a + Buffer.byteLength(d), 0);
let bestEnc = Infinity, bestDec = Infinity, tokens = 0;
for (let r = 0; r < Number(repsArg ?? 3); ++r) {
  const tok = Tokenizer.fromFile(tokPath);
  const ids = [];
  let t0 = performance.now();
  for (const d of docs) ids.push((await tok.encode(d, null, {addSpecialTokens: false})).getIds());
  bestEnc = Math.min(bestEnc, (performance.now() - t0) / 1000);
  tokens = ids.reduce((a, v) => a + v.length, 0);
  t0 = performance.now();
  for (const v of ids) await tok.decode(Array.from(v), false);
  bestDec = Math.min(bestDec, (performance.now() - t0) / 1000);
}
process.stdout.write(JSON.stringify({engine: "HF tokenizers (@anush008/tokenizers 0.6.0)", bytes, tokens,
  encode_mb_per_s: bytes / 1e6 / bestEnc, encode_tokens_per_s: tokens / bestEnc, decode_mb_per_s: bytes / 1e6 / bestDec}) + "\n",
  () => process.exit(0));
