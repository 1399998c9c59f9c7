#include "tokenizer/hf_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <mutex>
#include <queue>
#include <string_view>
#include <unordered_map>

#include "tokenizer/utf8.h"

namespace deepinfer {
namespace {

using json = nlohmann::json;
using Pieces = std::vector<std::string>;

// ------------------------------------------------------------------------------------------------ regex

// PCRE2 with JIT and Unicode properties. Subjects may hold invalid UTF-8: such bytes never match.
class Regex {
 public:
  static StatusOr<std::shared_ptr<Regex>> Compile(const std::string& pattern, bool literal) {
    int err = 0;
    PCRE2_SIZE off = 0;
    // PCRE2_LITERAL refuses PCRE2_UCP (Unicode properties mean nothing to a literal string).
    const uint32_t opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), opts, &err, &off, nullptr);
    if (!code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      return InvalidArgument("regex '" + pattern + "' does not compile at offset " + std::to_string(off) + ": " +
                             reinterpret_cast<char*>(msg));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    return std::shared_ptr<Regex>(new Regex(code));
  }
  ~Regex() { pcre2_code_free(code_); }

  // Non-overlapping matches, left to right, as (begin, end) byte offsets.
  std::vector<std::pair<size_t, size_t>> Matches(std::string_view s) const {
    std::vector<std::pair<size_t, size_t>> out;
    ForEach(s, [&](size_t b, size_t e) { out.emplace_back(b, e); });
    return out;
  }

  // Calls fn(begin, end) for each match as it is found: no buffer proportional to the input.
  template <typename Fn>
  void ForEach(std::string_view s, Fn&& fn) const {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_, nullptr);
    size_t pos = 0;
    while (pos <= s.size()) {
      // The subject was compiled for with PCRE2_MATCH_INVALID_UTF, so skipping the per-call UTF validation (which
      // rescans the whole subject every call: quadratic over a long text) is safe.
      const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
      if (rc < 0) break;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      const size_t b = ov[0], e = ov[1];
      fn(b, e);
      pos = e > b ? e : e + (e < s.size() ? utf8::CharLen(s, e) : 1);
    }
    pcre2_match_data_free(md);
  }

 private:
  explicit Regex(pcre2_code* c) : code_(c) {}
  pcre2_code* code_;
};

// ------------------------------------------------------------------------------------------------ splitting

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

StatusOr<Behavior> ParseBehavior(const std::string& b) {
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  return InvalidArgument("unknown split behavior '" + b + "'");
}

// A piece of text on its way through the pre-tokenizers; at_start marks the piece that begins the segment
// (Metaspace's prepend_scheme "first" needs it).
using Emit = std::function<void(std::string_view piece, bool at_start)>;

// Splits one piece around the regex matches with the `tokenizers` library's delimiter behaviours, emitting the
// parts as they are found: memory stays bounded by the piece, not by the number of parts.
void SplitOne(std::string_view p, bool at_start, const Regex& re, Behavior behavior, bool invert, const Emit& emit) {
  struct Seg {
    size_t b, e;
    bool match;
  };
  auto out = [&](size_t b, size_t e) {
    if (e > b) emit(p.substr(b, e - b), at_start && b == 0);
  };
  Seg pending{0, 0, false};
  bool have_pending = false, prev_match = false;
  auto on_seg = [&](const Seg& sg) {
    switch (behavior) {
      case Behavior::kIsolated:
        out(sg.b, sg.e);
        break;
      case Behavior::kRemoved:
        if (!sg.match) out(sg.b, sg.e);
        break;
      case Behavior::kMergedWithPrevious:  // a delimiter joins the part before it
        if (sg.match && !prev_match && have_pending) {
          pending.e = sg.e;
        } else {
          if (have_pending) out(pending.b, pending.e);
          pending = sg;
          have_pending = true;
        }
        prev_match = sg.match;
        break;
      case Behavior::kMergedWithNext:  // a delimiter joins the part after it (unless another delimiter follows)
        if (sg.match) {
          if (have_pending) out(pending.b, pending.e);
          pending = sg;
          have_pending = true;
        } else if (have_pending) {
          out(pending.b, sg.e);
          have_pending = false;
        } else {
          out(sg.b, sg.e);
        }
        break;
      case Behavior::kContiguous:  // runs of delimiters become one part
        if (sg.match && have_pending && pending.match) {
          pending.e = sg.e;
        } else {
          if (have_pending) out(pending.b, pending.e);
          pending = sg;
          have_pending = true;
        }
        break;
    }
  };
  size_t prev = 0;
  re.ForEach(p, [&](size_t b, size_t e) {
    if (prev != b) on_seg({prev, b, invert});
    on_seg({b, e, !invert});
    prev = e;
  });
  if (prev != p.size()) on_seg({prev, p.size(), invert});
  if (have_pending) out(pending.b, pending.e);
}

// ------------------------------------------------------------------------------------------------ normalizers

using Normalizer = std::function<std::string(const std::string&)>;

std::string Utf8procMap(const std::string& s, int options) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()),
                                          &out, static_cast<utf8proc_option_t>(options));
  if (n < 0) return s;  // invalid UTF-8: leave the bytes alone
  std::string r(reinterpret_cast<char*>(out), static_cast<size_t>(n));
  free(out);
  return r;
}

std::string Lowercase(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    utf8proc_int32_t cp;
    const utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i), s.size() - i, &cp);
    if (n <= 0) {
      out += s[i++];
      continue;
    }
    out += utf8::Encode(static_cast<uint32_t>(utf8proc_tolower(cp)));
    i += n;
  }
  return out;
}

StatusOr<std::shared_ptr<Regex>> PatternOf(const json& p) {
  if (p.is_object() && p.contains("Regex") && p["Regex"].is_string()) return Regex::Compile(p["Regex"].get<std::string>(), false);
  if (p.is_object() && p.contains("String") && p["String"].is_string()) return Regex::Compile(p["String"].get<std::string>(), true);
  return InvalidArgument("pattern must be {\"Regex\": ...} or {\"String\": ...}");
}

std::string ReplaceAll(const std::string& s, const Regex& re, const std::string& with) {
  std::string out;
  size_t prev = 0;
  for (auto [b, e] : re.Matches(s)) {
    out.append(s, prev, b - prev);
    out += with;
    prev = e;
  }
  out.append(s, prev, std::string::npos);
  return out;
}

Status BuildNormalizer(const json& j, std::vector<Normalizer>* out) {
  if (j.is_null()) return Status::Ok();
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    for (auto& n : j.value("normalizers", json::array())) DI_RETURN_IF_ERROR(BuildNormalizer(n, out));
  } else if (type == "NFC") {
    out->push_back([](const std::string& s) { return Utf8procMap(s, UTF8PROC_STABLE | UTF8PROC_COMPOSE); });
  } else if (type == "NFD") {
    out->push_back([](const std::string& s) { return Utf8procMap(s, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE); });
  } else if (type == "NFKC") {
    out->push_back([](const std::string& s) { return Utf8procMap(s, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT); });
  } else if (type == "NFKD") {
    out->push_back([](const std::string& s) { return Utf8procMap(s, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT); });
  } else if (type == "Lowercase") {
    out->push_back(Lowercase);
  } else if (type == "Replace") {
    DI_ASSIGN_OR_RETURN(std::shared_ptr<Regex> re, PatternOf(j.value("pattern", json())));
    const std::string with = j.value("content", "");
    out->push_back([re, with](const std::string& s) { return ReplaceAll(s, *re, with); });
  } else if (type == "Prepend") {
    const std::string pre = j.value("prepend", "");
    out->push_back([pre](const std::string& s) { return s.empty() ? s : pre + s; });
  } else if (type == "Strip") {
    const bool left = j.value("strip_left", true), right = j.value("strip_right", true);
    out->push_back([left, right](const std::string& s) {
      size_t b = 0, e = s.size();
      while (left && b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
      while (right && e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
      return s.substr(b, e - b);
    });
  } else {
    return Unimplemented("normalizer '" + type + "'");
  }
  return Status::Ok();
}

// ------------------------------------------------------------------------------------------------ pre-tokenizers

using PreTokenizer = std::function<void(std::string_view piece, bool at_start, const Emit& emit)>;

const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

Status BuildPreTokenizer(const json& j, std::vector<PreTokenizer>* out, bool* byte_level) {
  if (j.is_null()) return Status::Ok();
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    for (auto& p : j.value("pretokenizers", json::array())) DI_RETURN_IF_ERROR(BuildPreTokenizer(p, out, byte_level));
  } else if (type == "Split") {
    DI_ASSIGN_OR_RETURN(std::shared_ptr<Regex> re, PatternOf(j.value("pattern", json())));
    DI_ASSIGN_OR_RETURN(Behavior b, ParseBehavior(j.value("behavior", "Isolated")));
    const bool invert = j.value("invert", false);
    out->push_back([re, b, invert](std::string_view p, bool s, const Emit& e) { SplitOne(p, s, *re, b, invert, e); });
  } else if (type == "ByteLevel") {
    *byte_level = true;
    const bool prefix = j.value("add_prefix_space", false), use_regex = j.value("use_regex", true);
    DI_ASSIGN_OR_RETURN(std::shared_ptr<Regex> re, Regex::Compile(kGpt2Pattern, false));
    out->push_back([prefix, use_regex, re](std::string_view p, bool s, const Emit& e) {
      std::string with_space;
      if (prefix && (p.empty() || p[0] != ' ')) {
        with_space = " " + std::string(p);
        p = with_space;
      }
      if (use_regex) SplitOne(p, s, *re, Behavior::kIsolated, false, e);
      else e(p, s);
    });
  } else if (type == "Digits") {
    DI_ASSIGN_OR_RETURN(std::shared_ptr<Regex> re, Regex::Compile(j.value("individual_digits", false) ? "\\p{N}" : "\\p{N}+", false));
    out->push_back([re](std::string_view p, bool s, const Emit& e) { SplitOne(p, s, *re, Behavior::kIsolated, false, e); });
  } else if (type == "Whitespace") {
    DI_ASSIGN_OR_RETURN(std::shared_ptr<Regex> re, Regex::Compile("\\w+|[^\\w\\s]+", false));
    out->push_back([re](std::string_view p, bool s, const Emit& e) { SplitOne(p, s, *re, Behavior::kRemoved, true, e); });
  } else if (type == "WhitespaceSplit") {
    DI_ASSIGN_OR_RETURN(std::shared_ptr<Regex> re, Regex::Compile("\\s+", false));
    out->push_back([re](std::string_view p, bool s, const Emit& e) { SplitOne(p, s, *re, Behavior::kRemoved, false, e); });
  } else if (type == "Punctuation") {
    DI_ASSIGN_OR_RETURN(std::shared_ptr<Regex> re, Regex::Compile("\\p{P}", false));
    DI_ASSIGN_OR_RETURN(Behavior b, ParseBehavior(j.value("behavior", "Isolated")));
    out->push_back([re, b](std::string_view p, bool s, const Emit& e) { SplitOne(p, s, *re, b, false, e); });
  } else if (type == "Metaspace") {
    const std::string rep = j.value("replacement", "\xE2\x96\x81");
    std::string scheme = j.value("prepend_scheme", "");
    if (scheme.empty()) scheme = j.value("add_prefix_space", true) ? "always" : "never";
    const bool split = j.value("split", true);
    DI_ASSIGN_OR_RETURN(std::shared_ptr<Regex> space, Regex::Compile(" ", true));
    DI_ASSIGN_OR_RETURN(std::shared_ptr<Regex> marker, Regex::Compile(rep, true));
    out->push_back([rep, scheme, split, space, marker](std::string_view p, bool s, const Emit& e) {
      std::string r = ReplaceAll(std::string(p), *space, rep);
      const bool prepend = scheme == "always" || (scheme == "first" && s);
      if (prepend && r.compare(0, rep.size(), rep) != 0) r = rep + r;
      if (split) SplitOne(r, s, *marker, Behavior::kMergedWithNext, false, e);
      else e(r, s);
    });
  } else {
    return Unimplemented("pre-tokenizer '" + type + "'");
  }
  return Status::Ok();
}

// ------------------------------------------------------------------------------------------------ decoders

using Decoder = std::function<void(Pieces&)>;

Status BuildDecoder(const json& j, std::vector<Decoder>* out) {
  if (j.is_null()) return Status::Ok();
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    for (auto& d : j.value("decoders", json::array())) DI_RETURN_IF_ERROR(BuildDecoder(d, out));
  } else if (type == "ByteLevel") {
    out->push_back([](Pieces& p) {
      const auto& t = utf8::ByteLevelTable::Get();
      std::string bytes;
      for (const std::string& tok : p) {
        // A token with any character outside the byte alphabet passes through as its own UTF-8 (as `tokenizers` does).
        std::string mapped;
        bool ok = true;
        for (size_t i = 0; i < tok.size() && ok;) {
          const size_t n = utf8::CharLen(tok, i);
          auto it = t.char_to_byte.find(tok.substr(i, n));
          if (it == t.char_to_byte.end()) ok = false;
          else mapped += static_cast<char>(it->second);
          i += n;
        }
        bytes += ok ? mapped : tok;
      }
      p.assign(1, bytes);
    });
  } else if (type == "Metaspace") {
    const std::string rep = j.value("replacement", "\xE2\x96\x81");
    std::string scheme = j.value("prepend_scheme", "");
    if (scheme.empty()) scheme = j.value("add_prefix_space", true) ? "always" : "never";
    DI_ASSIGN_OR_RETURN(std::shared_ptr<Regex> marker, Regex::Compile(rep, true));
    out->push_back([scheme, marker](Pieces& p) {
      for (size_t k = 0; k < p.size(); ++k) {
        p[k] = ReplaceAll(p[k], *marker, " ");
        if (k == 0 && scheme != "never" && !p[k].empty() && p[k][0] == ' ') p[k].erase(0, 1);
      }
    });
  } else if (type == "ByteFallback") {
    out->push_back([](Pieces& p) {
      Pieces res;
      std::string pending;
      auto flush = [&] {
        if (pending.empty()) return;
        // Bytes that do not form valid UTF-8 become U+FFFD, one per byte, as the reference does.
        const bool valid = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(pending.data()), -1, nullptr) >= 0 &&
                           Utf8procMap(pending, UTF8PROC_STABLE) == pending;
        if (valid) res.push_back(pending);
        else
          for (size_t i = 0; i < pending.size(); ++i) res.push_back("\xEF\xBF\xBD");
        pending.clear();
      };
      for (const std::string& tok : p) {
        if (tok.size() == 6 && tok.compare(0, 3, "<0x") == 0 && tok[5] == '>') {
          pending += static_cast<char>(std::stoi(tok.substr(3, 2), nullptr, 16));
        } else {
          flush();
          res.push_back(tok);
        }
      }
      flush();
      p.swap(res);
    });
  } else if (type == "Fuse") {
    out->push_back([](Pieces& p) {
      std::string all;
      for (auto& s : p) all += s;
      p.assign(1, all);
    });
  } else if (type == "Strip") {
    const std::string content = j.value("content", " ");
    const int start = j.value("start", 0), stop = j.value("stop", 0);
    out->push_back([content, start, stop](Pieces& p) {
      for (auto& s : p) {
        for (int k = 0; k < start && s.compare(0, content.size(), content) == 0; ++k) s.erase(0, content.size());
        for (int k = 0; k < stop && s.size() >= content.size() && s.compare(s.size() - content.size(), content.size(), content) == 0; ++k)
          s.erase(s.size() - content.size());
      }
    });
  } else if (type == "Replace") {
    DI_ASSIGN_OR_RETURN(std::shared_ptr<Regex> re, PatternOf(j.value("pattern", json())));
    const std::string with = j.value("content", "");
    out->push_back([re, with](Pieces& p) {
      for (auto& s : p) s = ReplaceAll(s, *re, with);
    });
  } else {
    return Unimplemented("decoder '" + type + "'");
  }
  return Status::Ok();
}

// ------------------------------------------------------------------------------------------------ tokenizer

struct AddedToken {
  std::string content;
  int32_t id;
  bool special, lstrip, rstrip, single_word;
  bool match_in_text;  // false for GGUF control tokens: llama.cpp does not parse them out of plain text
};

class HfTokenizer : public Tokenizer {
 public:
  static StatusOr<std::unique_ptr<Tokenizer>> Create(const json& j, const json& cfg, const std::string& name);

  std::vector<int32_t> Encode(const std::string& text, bool add_special) const override {
    return EncodeImpl(text, add_special, false);
  }
  std::vector<int32_t> EncodeWithSpecials(const std::string& text, bool add_special) const override {
    return EncodeImpl(text, add_special, true);
  }

  std::string TokenBytes(int32_t id) const override { return Decode({id}, false); }

  std::string Decode(const std::vector<int32_t>& ids, bool skip_special) const override {
    Pieces toks;
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size() || pieces_[id].empty()) continue;
      if (skip_special && is_control_[id]) continue;
      toks.push_back(pieces_[id]);
    }
    if (decoders_.empty()) {
      std::string s;
      for (size_t k = 0; k < toks.size(); ++k) s += (k ? " " : "") + toks[k];
      return s;
    }
    for (const auto& d : decoders_) d(toks);
    std::string s;
    for (auto& t : toks) s += t;
    return s;
  }

 private:
  // all_added: every added token is matched in the text, GGUF control tokens included.
  std::vector<int32_t> EncodeImpl(const std::string& text, bool add_special, bool all_added) const {
    std::vector<int32_t> body;
    size_t prev = 0;
    for (const auto& m : FindAdded(text, all_added)) {
      if (m.begin > prev) EncodeSegment(std::string_view(text).substr(prev, m.begin - prev), prev == 0, &body);
      body.push_back(m.id);
      prev = m.end;
    }
    if (prev < text.size()) EncodeSegment(std::string_view(text).substr(prev), prev == 0, &body);
    if (!add_special) return body;
    if (template_.empty()) {
      // No template post-processor: transformers' fast tokenizers still honour add_bos_token from
      // tokenizer_config.json (Llama-family configs rely on it).
      if (add_bos_ && bos_id_ >= 0) body.insert(body.begin(), bos_id_);
      return body;
    }
    std::vector<int32_t> out;
    for (const auto& item : template_) {
      if (item.empty()) out.insert(out.end(), body.begin(), body.end());
      else out.insert(out.end(), item.begin(), item.end());
    }
    return out;
  }

  struct Match {
    size_t begin, end;
    int32_t id;
  };

  // Leftmost-longest occurrences of added tokens in the raw text.
  std::vector<Match> FindAdded(const std::string& text, bool all) const {
    std::vector<Match> out;
    if (added_.empty()) return out;
    bool any = all;
    for (const auto& a : added_) any = any || a.match_in_text;
    if (!any) return out;
    for (size_t i = 0; i < text.size();) {
      const auto& cands = (all ? all_added_by_byte_ : added_by_byte_)[static_cast<unsigned char>(text[i])];
      const AddedToken* best = nullptr;
      for (const AddedToken* a : cands)
        if (text.compare(i, a->content.size(), a->content) == 0 && (!best || a->content.size() > best->content.size()) &&
            (!a->single_word || SingleWordOk(text, i, i + a->content.size())))
          best = a;
      if (!best) {
        ++i;
        continue;
      }
      size_t b = i, e = i + best->content.size();
      if (best->lstrip)
        while (b > (out.empty() ? 0 : out.back().end) && std::isspace(static_cast<unsigned char>(text[b - 1]))) --b;
      if (best->rstrip)
        while (e < text.size() && std::isspace(static_cast<unsigned char>(text[e]))) ++e;
      out.push_back({b, e, best->id});
      i = e;
    }
    return out;
  }

  static bool SingleWordOk(const std::string& t, size_t b, size_t e) {
    auto word = [](unsigned char c) { return std::isalnum(c) || c == '_' || c >= 0x80; };
    return (b == 0 || !word(static_cast<unsigned char>(t[b - 1]))) && (e >= t.size() || !word(static_cast<unsigned char>(t[e])));
  }

  // Normalizes a segment (text between added tokens) and streams it through the pre-tokenizers into BPE.
  void EncodeSegment(std::string_view raw, bool at_start, std::vector<int32_t>* out) const {
    std::string text(raw);
    for (const auto& n : normalizers_) text = n(text);
    std::function<void(size_t, std::string_view, bool)> run = [&](size_t level, std::string_view piece, bool start) {
      if (level == pre_.size()) return EncodeWord(piece, out);
      pre_[level](piece, start, [&](std::string_view part, bool part_start) { run(level + 1, part, part_start); });
    };
    run(0, text, at_start);
  }

  void EncodeWord(std::string_view raw_word, std::vector<int32_t>* out) const {
    if (raw_word.empty()) return;
    std::string word;
    if (byte_level_) {
      const auto& t = utf8::ByteLevelTable::Get();
      for (unsigned char c : raw_word) word += t.byte_to_char[c];
    } else {
      word = raw_word;
    }
    if (ignore_merges_) {
      auto it = vocab_.find(word);
      if (it != vocab_.end()) {
        out->push_back(it->second);
        return;
      }
    }
    {
      std::lock_guard<std::mutex> lock(cache_mu_);
      auto it = cache_.find(word);
      if (it != cache_.end()) {
        out->insert(out->end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<int32_t> ids = Bpe(word);
    out->insert(out->end(), ids.begin(), ids.end());
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() > 200000) cache_.clear();
    cache_.emplace(word, std::move(ids));
  }

  // Byte-pair merging with a min-heap of candidate pairs ordered by (rank, position): O(n log n) per word.
  std::vector<int32_t> Bpe(const std::string& word) const {
    struct Sym {
      int32_t id;
      int prev, next;
    };
    std::vector<Sym> syms;
    for (size_t i = 0; i < word.size();) {
      const size_t n = utf8::CharLen(word, i);
      auto it = vocab_.find(word.substr(i, n));
      if (it != vocab_.end()) {
        syms.push_back({it->second, static_cast<int>(syms.size()) - 1, static_cast<int>(syms.size()) + 1});
      } else if (byte_fallback_) {
        for (size_t k = 0; k < n; ++k) {
          char hex[8];
          std::snprintf(hex, sizeof hex, "<0x%02X>", static_cast<unsigned char>(word[i + k]));
          auto b = vocab_.find(hex);
          if (b != vocab_.end()) syms.push_back({b->second, static_cast<int>(syms.size()) - 1, static_cast<int>(syms.size()) + 1});
          else if (unk_ >= 0) syms.push_back({unk_, static_cast<int>(syms.size()) - 1, static_cast<int>(syms.size()) + 1});
        }
      } else if (unk_ >= 0) {
        if (!(fuse_unk_ && !syms.empty() && syms.back().id == unk_))
          syms.push_back({unk_, static_cast<int>(syms.size()) - 1, static_cast<int>(syms.size()) + 1});
      }
      i += n;
    }
    if (syms.empty()) return {};
    syms.back().next = -1;
    struct Cand {
      int rank, pos;
      int32_t left, right;
      bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
    auto push = [&](int pos) {
      if (pos < 0 || syms[pos].next < 0) return;
      auto it = merges_.find(Key(syms[pos].id, syms[syms[pos].next].id));
      if (it != merges_.end()) heap.push({it->second.first, pos, syms[pos].id, syms[syms[pos].next].id});
    };
    for (int p = 0; p + 1 < static_cast<int>(syms.size()); ++p) push(p);
    while (!heap.empty()) {
      const Cand c = heap.top();
      heap.pop();
      Sym& l = syms[c.pos];
      if (l.id != c.left || l.next < 0 || syms[l.next].id != c.right) continue;  // stale
      const int r = l.next;
      l.id = merges_.at(Key(c.left, c.right)).second;
      l.next = syms[r].next;
      if (l.next >= 0) syms[l.next].prev = c.pos;
      syms[r].id = -1;
      push(l.prev);
      push(c.pos);
    }
    std::vector<int32_t> ids;
    for (int p = 0; p >= 0; p = syms[p].next) ids.push_back(syms[p].id);
    return ids;
  }

  static uint64_t Key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }

  std::vector<Normalizer> normalizers_;
  std::vector<PreTokenizer> pre_;
  std::vector<Decoder> decoders_;
  std::vector<std::vector<int32_t>> template_;  // post-processor: empty entry = the sequence itself
  bool byte_level_ = false, ignore_merges_ = false, byte_fallback_ = false, fuse_unk_ = false;
  int32_t unk_ = -1;
  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, std::pair<int, int32_t>> merges_;  // (left, right) -> (rank, merged id)
  std::vector<AddedToken> added_;
  std::array<std::vector<const AddedToken*>, 256> added_by_byte_;
  std::array<std::vector<const AddedToken*>, 256> all_added_by_byte_;  // match_in_text or not
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

Status BuildPostProcessor(const json& j, const std::unordered_map<std::string, int32_t>& ids,
                          std::vector<std::vector<int32_t>>* tmpl) {
  if (j.is_null()) return Status::Ok();
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    for (auto& p : j.value("processors", json::array())) DI_RETURN_IF_ERROR(BuildPostProcessor(p, ids, tmpl));
    return Status::Ok();
  }
  if (type == "ByteLevel") return Status::Ok();  // only adjusts offsets
  if (type == "TemplateProcessing") {
    tmpl->clear();
    const json specials = j.value("special_tokens", json::object());
    for (auto& item : j.value("single", json::array())) {
      if (item.contains("Sequence")) {
        tmpl->push_back({});
      } else if (item.contains("SpecialToken")) {
        const std::string name = item["SpecialToken"].value("id", "");
        std::vector<int32_t> v;
        if (specials.contains(name) && specials[name].contains("ids"))
          for (auto& x : specials[name]["ids"]) v.push_back(x.get<int32_t>());
        else if (ids.count(name)) v.push_back(ids.at(name));
        else return InvalidArgument("post-processor names unknown special token '" + name + "'");
        tmpl->push_back(v);
      }
    }
    return Status::Ok();
  }
  return Unimplemented("post-processor '" + type + "'");
}

StatusOr<std::unique_ptr<Tokenizer>> HfTokenizer::Create(const json& j, const json& cfg, const std::string& name) {
  auto t = std::unique_ptr<HfTokenizer>(new HfTokenizer());
  auto ctx = [&](const Status& s) { return s.WithContext(name); };
  if (!j.contains("model") || !j["model"].is_object()) return DataLoss(name + ": no \"model\" object");
  const json& m = j["model"];
  if (m.value("type", "BPE") != "BPE") return Unimplemented(name + ": model type '" + m.value("type", "") + "' (supported: BPE)");
  if (!m.contains("vocab") || !m["vocab"].is_object()) return DataLoss(name + ": model.vocab must be an object");
  int32_t n = 0;
  for (auto& [tok, id] : m["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (1 << 24))
      return DataLoss(name + ": vocab id for '" + tok + "' is not a valid integer");
    t->vocab_[tok] = id.get<int32_t>();
    n = std::max(n, id.get<int32_t>() + 1);
  }
  const json added = j.value("added_tokens", json::array());
  if (!added.is_array()) return DataLoss(name + ": added_tokens must be an array");
  for (auto& a : added) {
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") || !a["content"].is_string())
      return DataLoss(name + ": malformed added token entry");
    const int64_t id = a["id"].get<int64_t>();
    if (id < 0 || id >= (1 << 24)) return DataLoss(name + ": added token id out of range");
    t->added_.push_back({a["content"].get<std::string>(), static_cast<int32_t>(id), a.value("special", false),
                         a.value("lstrip", false), a.value("rstrip", false), a.value("single_word", false),
                         a.value("deepinfer_match_in_text", true)});
    n = std::max(n, static_cast<int32_t>(id) + 1);
  }
  t->pieces_.assign(n, "");
  t->is_control_.assign(n, false);
  for (auto& [tok, id] : t->vocab_) t->pieces_[id] = tok;
  for (auto& a : t->added_) {
    t->pieces_[a.id] = a.content;
    t->is_control_[a.id] = a.special;
    if (!a.content.empty() && a.match_in_text) t->added_by_byte_[static_cast<unsigned char>(a.content[0])].push_back(&a);
    if (!a.content.empty()) t->all_added_by_byte_[static_cast<unsigned char>(a.content[0])].push_back(&a);
  }
  // Merges: "a b" strings or [a, b] pairs; each must name tokens of the vocabulary.
  const json merges = m.value("merges", json::array());
  int rank = 0;
  for (auto& mg : merges) {
    std::string a, b;
    if (mg.is_string()) {
      const std::string s = mg.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos) return DataLoss(name + ": merge '" + s + "' is not two tokens");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
      a = mg[0].get<std::string>();
      b = mg[1].get<std::string>();
    } else {
      return DataLoss(name + ": malformed merge entry");
    }
    auto ia = t->vocab_.find(a), ib = t->vocab_.find(b), iab = t->vocab_.find(a + b);
    if (ia == t->vocab_.end() || ib == t->vocab_.end() || iab == t->vocab_.end()) {
      ++rank;
      continue;  // `tokenizers` rejects such files; real ones never have them, and skipping is harmless
    }
    t->merges_.emplace(Key(ia->second, ib->second), std::make_pair(rank++, iab->second));
  }
  t->ignore_merges_ = m.value("ignore_merges", false);
  t->byte_fallback_ = m.value("byte_fallback", false);
  t->fuse_unk_ = m.value("fuse_unk", false);
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    auto it = t->vocab_.find(m["unk_token"].get<std::string>());
    if (it != t->vocab_.end()) t->unk_ = it->second;
  }
  if (m.contains("continuing_subword_prefix") && !m["continuing_subword_prefix"].is_null() && m["continuing_subword_prefix"] != "")
    return Unimplemented(name + ": BPE continuing_subword_prefix");
  DI_RETURN_IF_ERROR(ctx(BuildNormalizer(j.value("normalizer", json()), &t->normalizers_)));
  DI_RETURN_IF_ERROR(ctx(BuildPreTokenizer(j.value("pre_tokenizer", json()), &t->pre_, &t->byte_level_)));
  DI_RETURN_IF_ERROR(ctx(BuildDecoder(j.value("decoder", json()), &t->decoders_)));
  std::unordered_map<std::string, int32_t> all_ids = t->vocab_;
  for (auto& a : t->added_) all_ids[a.content] = a.id;
  DI_RETURN_IF_ERROR(ctx(BuildPostProcessor(j.value("post_processor", json()), all_ids, &t->template_)));
  // bos / eos from tokenizer_config.json.
  auto token_id = [&](const char* key) -> int32_t {
    if (!cfg.is_object() || !cfg.contains(key)) return -1;
    const json& v = cfg[key];
    const std::string s = v.is_string() ? v.get<std::string>()
                          : (v.is_object() && v.contains("content") && v["content"].is_string()) ? v["content"].get<std::string>()
                                                                                               : "";
    auto it = all_ids.find(s);
    return it == all_ids.end() ? -1 : it->second;
  };
  t->bos_id_ = token_id("bos_token");
  t->eos_id_ = token_id("eos_token");
  t->add_bos_ = cfg.is_object() && cfg.value("add_bos_token", false);
  // End-of-turn markers that also end generation. Harmony (o200k_harmony, gpt-oss) ends a turn with <|return|>
  // (final answer) or <|call|> (tool call); its <|end|> closes a message inside the turn (analysis, then final),
  // so it is deliberately not listed: llama.cpp drops <|end|> from its EOG set when <|return|> and <|call|> exist.
  for (const char* eot : {"<|eot_id|>", "<|im_end|>", "<|end_of_text|>", "<|endoftext|>", "<｜end▁of▁sentence｜>",
                          "<|return|>", "<|call|>"}) {
    auto it = all_ids.find(eot);
    if (it != all_ids.end()) t->eog_ids_.push_back(it->second);
  }
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> MakeByteLevelBpe(const ByteLevelBpeSpec& spec, const std::string& name) {
  json vocab = json::object(), added = json::array(), pre = json::array();
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    const int type = i < spec.types.size() ? spec.types[i] : 1;
    if (type == 3 || type == 4)
      added.push_back({{"id", i}, {"content", spec.tokens[i]}, {"special", type == 3}, {"deepinfer_match_in_text", type == 4}});
    else
      vocab[spec.tokens[i]] = i;
  }
  for (const auto& r : spec.split_regexes)
    pre.push_back({{"type", "Split"}, {"pattern", {{"Regex", r}}}, {"behavior", "Isolated"}, {"invert", false}});
  pre.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}});
  json j = {{"added_tokens", added},
            {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", pre}}},
            {"decoder", {{"type", "ByteLevel"}}},
            {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", spec.merges}, {"ignore_merges", spec.ignore_merges}}}};
  json cfg = {{"add_bos_token", spec.add_bos}};
  const int n = static_cast<int>(spec.tokens.size());
  if (spec.bos >= 0 && spec.bos < n) cfg["bos_token"] = spec.tokens[spec.bos];
  if (spec.eos >= 0 && spec.eos < n) cfg["eos_token"] = spec.tokens[spec.eos];
  return HfTokenizer::Create(j, cfg, name);
}

StatusOr<std::unique_ptr<Tokenizer>> ParseHfTokenizer(const std::string& tokenizer_json, const std::string& config_json,
                                                      const std::string& name) {
  json j = json::parse(tokenizer_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return DataLoss(name + ": not valid JSON");
  json cfg = json::object();
  if (!config_json.empty()) {
    cfg = json::parse(config_json, nullptr, false);
    if (cfg.is_discarded() || !cfg.is_object()) return DataLoss(name + ": tokenizer_config.json is not a JSON object");
  }
  return HfTokenizer::Create(j, cfg, name);
}

}  // namespace deepinfer
