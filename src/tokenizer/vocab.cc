// GGUF-embedded vocabularies: SentencePiece-style (llama) merged by score here; byte-level BPE (gpt2) handed to
// the tokenizer.json pipeline with its pre-tokenizer regexes. Also the loaders by path.

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <queue>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "format/gguf.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace deepinfer {
namespace {

const char* kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// o200k (gpt-4o, gpt-oss, Llama 4). kGpt4oHfRegex is tokenizer.json's own; llama.cpp runs a rewrite of it
// (llama-vocab.cpp, LLAMA_VOCAB_PRE_TYPE_GPT4O) in which "upper" is a letter other than a-z and "lower" one other
// than A-Z, and \p{M} is gone: a combining mark is not part of a word there ("e\u0301" splits after the e) and
// a non-ASCII capital can start a lower-case run ("ÉCOLE" is "É" + "COLE"). GGUF files get llama.cpp's ids, so
// they run the rewrite (PCRE2 gives the same matches as llama.cpp's category-collapsed std::regex); tokenizer.json
// keeps the original, as Hugging Face tokenizers runs it.
const char* kGpt4oHfRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kGpt4oLlamaRegex =
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

using utf8::CharLen;

// ------------------------------------------------------------------------------------------ SentencePiece-style

class SpmTokenizer : public Tokenizer {
 public:
  SpmTokenizer(std::vector<std::string> pieces, std::vector<float> scores, std::vector<int> types, int bos, int eos,
               bool add_bos, bool add_space_prefix)
      : scores_(std::move(scores)), add_space_prefix_(add_space_prefix) {
    pieces_ = std::move(pieces);
    is_control_.resize(pieces_.size());
    byte_ids_.fill(-1);
    for (size_t i = 0; i < pieces_.size(); ++i) {
      const int type = i < types.size() ? types[i] : 1;
      is_control_[i] = type == 3;
      if (type == 6 && pieces_[i].size() == 6 && pieces_[i].rfind("<0x", 0) == 0)  // <0xAB> byte token
        byte_ids_[std::stoi(pieces_[i].substr(3, 2), nullptr, 16)] = static_cast<int>(i);
      if (type == 1 || type == 4) ids_.emplace(pieces_[i], static_cast<int>(i));
      if (type == 2) unk_ = static_cast<int>(i);
    }
    bos_id_ = bos;
    eos_id_ = eos;
    add_bos_ = add_bos;
  }

  std::vector<int32_t> Encode(const std::string& text, bool add_bos) const override {
    std::vector<int32_t> out;
    if (add_bos && bos_id_ >= 0) out.push_back(bos_id_);
    if (text.empty()) return out;
    std::string norm;
    norm.reserve(text.size() + 3);
    if (add_space_prefix_) norm += "\xE2\x96\x81";
    for (char c : text) {
      if (c == ' ') norm += "\xE2\x96\x81";
      else norm += c;
    }
    // Symbols start as single characters; the adjacent pair whose concatenation scores best is merged, leftmost
    // first on ties, until no pair is a piece. A linked list of symbols and a max-heap of candidate pairs make
    // that O(n log n) (llama.cpp's llm_tokenizer_spm); a pair whose symbols changed since it was queued is stale
    // and skipped, which the length check detects because a symbol's start never moves and it only grows.
    struct Symbol {
      int prev, next;
      size_t start, len;  // bytes of norm; len 0: merged into its left neighbour
    };
    std::vector<Symbol> sym;
    sym.reserve(norm.size());
    for (size_t i = 0; i < norm.size();) {
      const size_t n = std::min(CharLen(norm, i), norm.size() - i);
      const int idx = static_cast<int>(sym.size());
      sym.push_back({idx - 1, idx + 1, i, n});
      i += n;
    }
    sym.back().next = -1;
    struct Pair {
      float score;
      int left, right;
      size_t len;
    };
    // Highest score first; on equal scores the leftmost pair (left symbols are numbered in text order).
    auto worse = [](const Pair& a, const Pair& b) { return a.score < b.score || (a.score == b.score && a.left > b.left); };
    std::priority_queue<Pair, std::vector<Pair>, decltype(worse)> heap(worse);
    std::string key;
    auto try_pair = [&](int left, int right) {
      if (left < 0 || right < 0) return;
      key.assign(norm, sym[left].start, sym[left].len + sym[right].len);
      auto it = ids_.find(key);
      if (it == ids_.end()) return;
      heap.push({scores_[it->second], left, right, key.size()});
    };
    for (size_t i = 1; i < sym.size(); ++i) try_pair(static_cast<int>(i) - 1, static_cast<int>(i));
    while (!heap.empty()) {
      const Pair p = heap.top();
      heap.pop();
      Symbol& l = sym[p.left];
      Symbol& r = sym[p.right];
      if (l.len == 0 || r.len == 0 || l.len + r.len != p.len || l.next != p.right) continue;  // stale
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = p.left;
      try_pair(l.prev, p.left);
      try_pair(p.left, l.next);
    }
    for (int i = 0; i >= 0; i = sym[i].next) {
      key.assign(norm, sym[i].start, sym[i].len);
      auto it = ids_.find(key);
      if (it != ids_.end()) {
        out.push_back(it->second);
        continue;
      }
      for (unsigned char b : key) out.push_back(byte_ids_[b] >= 0 ? byte_ids_[b] : unk_);
    }
    return out;
  }

  std::string TokenBytes(int32_t id) const override {
    if (id < 0 || id >= vocab_size() || is_control_[id]) return {};
    const std::string& p = pieces_[id];
    for (int b = 0; b < 256; ++b)
      if (byte_ids_[b] == id) return std::string(1, static_cast<char>(b));
    std::string o;
    for (size_t i = 0; i < p.size();) {
      if (p.compare(i, 3, "\xE2\x96\x81") == 0) {
        o += ' ';
        i += 3;
      } else {
        o += p[i++];
      }
    }
    return o;
  }

  std::string Decode(const std::vector<int32_t>& ids, bool skip_special) const override {
    std::string o = Tokenizer::Decode(ids, skip_special);
    // The encoder added a space in front of the text; drop it again at the start of a sequence.
    if (add_space_prefix_ && !o.empty() && o[0] == ' ') o.erase(0, 1);
    return o;
  }

 private:
  std::vector<float> scores_;
  std::unordered_map<std::string, int> ids_;
  std::array<int, 256> byte_ids_{};
  int unk_ = 0;
  bool add_space_prefix_;
};

// Pre-tokenizer regexes per GGUF `tokenizer.ggml.pre`, as the models' own tokenizer.json files define them.
struct PreSpec {
  std::vector<std::string> regexes;
  bool ignore_merges = false;
};

StatusOr<PreSpec> PreForGguf(const std::string& pre) {
  // No tokenizer.ggml.pre (older conversions: aquila, gpt-neox in llama.cpp's test vocabularies), or "default":
  // llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEFAULT regexes, which it runs for such files (with a warning that quality
  // may suffer), not GPT-2's: the ids must be the ones llama.cpp gives on the same GGUF.
  if (pre.empty() || pre == "default")
    return PreSpec{{R"([\p{P}\$\+<=>\^~\|]+)", R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))",
                    R"(\p{N}+)", "[0-9][0-9][0-9]"}};
  if (pre == "gpt-2" || pre == "gpt2" || pre == "mpt" || pre == "olmo") return PreSpec{{kGpt2Regex}};
  if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "smaug-bpe" || pre == "falcon3" || pre == "pixtral")
    return PreSpec{{kLlama3Regex}, true};
  if (pre == "qwen2" || pre == "deepseek-r1-qwen" || pre == "stablelm2" || pre == "megrez") return PreSpec{{kQwen2Regex}};
  // llama.cpp maps these four names to one pre-tokenizer type (and turns clean_spaces off, which only affects
  // its detokenizer's space cleanup, a no-op for byte-level vocabularies).
  if (pre == "gpt-4o" || pre == "llama4" || pre == "kanana2" || pre == "talkie") return PreSpec{{kGpt4oLlamaRegex}};
  if (pre == "starcoder" || pre == "refact" || pre == "command-r" || pre == "smollm" || pre == "codeshell")
    return PreSpec{{R"(\p{N})", kGpt2Regex}};
  if (pre == "deepseek-v3")
    return PreSpec{{R"(\p{N}{1,3})", R"([\x{4e00}-\x{9fa5}\x{3040}-\x{309f}\x{30a0}-\x{30ff}]+)",
                    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}};
  if (pre == "qwen35")
    return PreSpec{{R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}};
  if (pre == "deepseek-llm")
    return PreSpec{{"[\r\n]",
                    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
                    "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", "[一-龥ࠀ-一가-퟿]+", "\\p{N}+"}};
  if (pre == "deepseek-coder")
    return PreSpec{{"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}"}};
  if (pre == "falcon")
    return PreSpec{{"[\\p{P}\\$\\+<=>\\^~\\|`]+",
                    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)", "[0-9][0-9][0-9]"}};
  return Unimplemented("GGUF pre-tokenizer '" + pre + "' is not supported yet");
}

}  // namespace

// One spelling per regex: literal CR/LF/TAB become \r \n \t, other non-ASCII characters \x{hex} (tokenizer.json
// files write "[\u4e00-\u9fa5]" as literal characters where the table above uses \x{4e00}).
std::string CanonicalRegex(const std::string& r) {
  std::string o;
  for (size_t i = 0; i < r.size();) {
    const size_t n = utf8::CharLen(r, i);
    const unsigned char c = static_cast<unsigned char>(r[i]);
    if (c == '\r') o += "\\r";
    else if (c == '\n') o += "\\n";
    else if (c == '\t') o += "\\t";
    else if (c < 0x80 || n == 1) o += r[i];
    else {
      uint32_t cp = c & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
      for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(r[i + k]) & 0x3F);
      char buf[16];
      std::snprintf(buf, sizeof buf, "\\x{%x}", cp);
      o += buf;
    }
    i += n;
  }
  return o;
}

StatusOr<std::string> GgufPreForRegexes(const std::vector<std::string>& regexes) {
  std::vector<std::string> want;
  for (const auto& r : regexes) want.push_back(CanonicalRegex(r));
  // Every name PreForGguf knows, in its canonical spelling (the one llama.cpp's converter writes).
  for (const char* name : {"gpt-2", "llama-bpe", "qwen2", "starcoder", "deepseek-v3", "qwen35", "deepseek-llm",
                           "deepseek-coder", "falcon"}) {
    auto spec = PreForGguf(name);
    if (!spec.ok() || spec->regexes.size() != want.size()) continue;
    bool same = true;
    for (size_t i = 0; i < want.size() && same; ++i) same = CanonicalRegex(spec->regexes[i]) == want[i];
    if (same) return std::string(name);
  }
  // Names whose tokenizer.json spelling is not the regex run for the GGUF (see kGpt4oHfRegex).
  if (want.size() == 1 && want[0] == CanonicalRegex(kGpt4oHfRegex)) return std::string("gpt-4o");
  return Unimplemented("the tokenizer's pre-tokenizer regexes match no GGUF tokenizer.ggml.pre type known here");
}

StatusOr<std::string> GgufPreForHfPreTokenizer(const std::vector<std::string>& split_regexes, bool byte_level_regex) {
  std::vector<std::string> all = split_regexes;
  if (byte_level_regex) all.push_back(kGpt2Regex);
  return GgufPreForRegexes(all);
}

StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromGguf(const GgufFile& g) {
  const std::string& path = g.path();
  DI_ASSIGN_OR_RETURN(std::string model, g.GetString("tokenizer.ggml.model"));
  const GgufValue* tokens = g.Find("tokenizer.ggml.tokens");
  if (!tokens || !tokens->is_array() || tokens->strings.empty())
    return DataLoss(path + ": tokenizer.ggml.tokens is missing or empty");
  std::vector<int> types;
  if (auto* t = g.Find("tokenizer.ggml.token_type"); t && t->is_array())
    for (double v : t->numbers) types.push_back(static_cast<int>(v));
  auto get_id = [&](const char* key, int def) {
    auto v = g.GetInt(key);
    return v.ok() ? static_cast<int>(*v) : def;
  };
  auto get_bool = [&](const char* key, bool def) {
    auto* v = g.Find(key);
    if (!v || v->is_array()) return def;
    if (auto* b = std::get_if<bool>(&v->scalar)) return *b;
    return def;
  };
  const int n = static_cast<int>(tokens->strings.size());
  int bos = get_id("tokenizer.ggml.bos_token_id", -1), eos = get_id("tokenizer.ggml.eos_token_id", -1);
  if (bos >= n || eos >= n) return DataLoss(path + ": bos/eos token id outside the vocabulary");
  if (model == "llama") {
    std::vector<float> scores(n, 0.f);
    if (auto* s = g.Find("tokenizer.ggml.scores"); s && s->is_array() && static_cast<int>(s->numbers.size()) == n)
      for (int i = 0; i < n; ++i) scores[i] = static_cast<float>(s->numbers[i]);
    return std::unique_ptr<Tokenizer>(new SpmTokenizer(tokens->strings, scores, types, bos, eos,
                                                       get_bool("tokenizer.ggml.add_bos_token", true),
                                                       get_bool("tokenizer.ggml.add_space_prefix", true)));
  }
  if (model == "gpt2") {
    ByteLevelBpeSpec spec;
    spec.tokens = tokens->strings;
    spec.types = types;
    if (auto* m = g.Find("tokenizer.ggml.merges"); m && m->is_array()) spec.merges = m->strings;
    auto pre = g.GetString("tokenizer.ggml.pre");
    auto pre_spec = PreForGguf(pre.ok() ? *pre : "");
    if (!pre_spec.ok()) return pre_spec.status().WithContext(path);
    spec.split_regexes = pre_spec->regexes;
    spec.ignore_merges = pre_spec->ignore_merges;
    spec.bos = bos;
    spec.eos = eos;
    spec.add_bos = get_bool("tokenizer.ggml.add_bos_token", false);
    return MakeByteLevelBpe(spec, path);
  }
  return Unimplemented(path + ": tokenizer model '" + model + "' (supported here: llama, gpt2)");
}

StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromHfDir(const std::string& dir) {
  namespace fs = std::filesystem;
  auto read = [](const fs::path& p, std::string* out) -> Status {
    std::ifstream in(p, std::ios::binary);
    if (!in) return NotFound(p.string() + ": cannot open");
    std::stringstream ss;
    ss << in.rdbuf();
    *out = ss.str();
    return Status::Ok();
  };
  std::string tok, cfg;
  const fs::path tj = fs::path(dir) / "tokenizer.json", tc = fs::path(dir) / "tokenizer_config.json";
  DI_RETURN_IF_ERROR(read(tj, &tok));
  if (fs::exists(tc)) DI_RETURN_IF_ERROR(read(tc, &cfg));
  return ParseHfTokenizer(tok, cfg, tj.string());
}

StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromPath(const std::string& path) {
  namespace fs = std::filesystem;
  if (path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0) {
    DI_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> g, GgufFile::Open(path));
    return TokenizerFromGguf(*g);
  }
  std::error_code ec;
  if (fs::is_directory(path, ec)) return TokenizerFromHfDir(path);
  // A tokenizer.json file itself (as HF tokenizers' Tokenizer.from_file takes it): its directory's
  // tokenizer_config.json, when there is one, still gives BOS/EOS and the chat-template settings.
  if (fs::is_regular_file(path, ec) && fs::path(path).filename() == "tokenizer.json")
    return TokenizerFromHfDir(fs::path(path).parent_path().empty() ? "." : fs::path(path).parent_path().string());
  if (fs::is_regular_file(path, ec))
    return InvalidArgument(path + ": not a tokenizer: give a .gguf file, a tokenizer.json file or a directory holding one");
  return NotFound(path + ": no such file or directory");
}

}  // namespace deepinfer
