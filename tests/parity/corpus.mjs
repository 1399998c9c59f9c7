// A deterministic multilingual test corpus (>= 1 MB by default) of short and long documents: Latin with
// diacritics (precomposed and combining), CJK, Japanese, Korean, Arabic, Devanagari, Cyrillic, emoji with ZWJ
// and skin tones, source code, long digit runs, whitespace and newline runs, and special-token strings inside
// text. JavaScript strings cannot hold invalid UTF-8, so the reference never sees it; that case is covered by
// deepinfer's own unit tests.
import {makeRng} from "../common/rng.mjs";

const {int: rnd, pick} = makeRng(20261129);
const range = (lo, hi, n) => Array.from({length: n}, () => String.fromCodePoint(lo + rnd(hi - lo + 1))).join("");

const latin = ["café", "naïve", "Straße", "façade", "jalapeño", "Ångström", "Dvořák", "Łódź", "smörgåsbord", "coöperate",
  "résumé", "piñata", "über", "crème brûlée", "Ærøskøbing", "İstanbul", "ﬁnance", "Ｆｕｌｌｗｉｄｔｈ", "e\u0301clair", "n\u0303o"];
const english = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "It's", "we'll", "they've", "I'M", "DON'T",
  "inference", "engine", "tokens", "per", "second", "Hello", "World", "state-of-the-art", "e.g.", "U.S.A.", "—", "…"];
const specials = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|begin_of_text|>", "<|eot_id|>", "<｜begin▁of▁sentence｜>",
  "<｜User｜>", "<think>", "</think>", "<tool_call>", "<|im_st", "<|endoftext", "<|fim_prefix|>"];
const emoji = ["👍", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇺🇸", "🇯🇵", "❤️", "🤖", "🚀", "😀😃😄", "👩🏿‍💻", "🧑‍🤝‍🧑", "☺︎", "✌🏻"];
const code = [
  "int main(int argc, char** argv) {\n  for (int i = 0; i < argc; ++i) printf(\"%s\\n\", argv[i]);\n  return 0;\n}\n",
  "def f(x: list[int]) -> dict:\n    return {k: v ** 2 for k, v in enumerate(x) if v % 2 == 0}\n\n\nif __name__ == '__main__':\n\tprint(f([1, 2, 3]))\n",
  "{\"model\": \"deepinfer\", \"max_tokens\": 128, \"stop\": [\"\\n\\n\"], \"temperature\": 0.7}\n",
  "SELECT id, name FROM users WHERE created_at >= '2026-01-01' ORDER BY id DESC LIMIT 10;\r\n",
  "    return x->next ? x->next->value : -1;  // TODO(deepinfer): handle   empty lists\n",
  "<html>\n  <body class=\"main\">&nbsp;&lt;tag&gt;</body>\n</html>\n",
];
const spaces = [" ", "  ", "   ", "\t", "\n", "\n\n", "\n\n\n", "\r\n", " \n ", "\u00a0", "\u3000", "\t\t  \n", "        "];

const generators = [
  () => Array.from({length: 5 + rnd(30)}, () => pick(rnd(3) ? english : latin)).join(pick([" ", " ", " ", ", ", ". "])),
  () => range(0x4e00, 0x9fa5, 5 + rnd(60)) + pick(["。", "，", "！", "? ", ""]) + range(0x4e00, 0x9fa5, rnd(20)),
  () => range(0x3041, 0x3093, 3 + rnd(20)) + range(0x30a1, 0x30f6, 3 + rnd(20)) + "です。",
  () => range(0xac00, 0xd7a3, 2 + rnd(6)) + " " + range(0xac00, 0xd7a3, 2 + rnd(6)) + ".",
  () => "مرحبا بالعالم " + range(0x0621, 0x064a, 3 + rnd(10)) + " " + range(0x0621, 0x064a, 3 + rnd(10)) + "؟",
  () => "नमस्ते दुनिया " + range(0x0915, 0x0939, 3 + rnd(8)) + "\u093e\u093f " + range(0x0915, 0x0939, 4),
  () => "Привет, мир! " + range(0x0430, 0x044f, 3 + rnd(10)) + " " + range(0x0410, 0x042f, 1) + range(0x0430, 0x044f, 5),
  () => Array.from({length: 1 + rnd(6)}, () => pick(emoji)).join(pick(["", " ", "\u200d"])),
  () => pick(code),
  () => range(0x30, 0x39, 1 + rnd(200)) + pick(["", ".", ",", " ", "e-5"]) + range(0x30, 0x39, 1 + rnd(12)),
  () => pick(spaces) + pick(spaces) + pick(spaces),
  () => pick(english) + pick(specials) + pick(english) + " " + pick(specials),
];

export function buildCorpus(minBytes = 1 << 20) {
  const docs = [];
  let bytes = 0;
  while (bytes < minBytes) {
    const parts = Array.from({length: 1 + rnd(24)}, () => pick(generators)());
    const doc = parts.join(pick(["", " ", "\n", " ", "\n\n"]));
    docs.push(doc);
    bytes += Buffer.byteLength(doc);
  }
  return docs;
}
