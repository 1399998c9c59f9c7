// GBNF parser, following llama.cpp's grammar-parser.cpp: `name ::= alternatives`, a newline ends a rule except
// inside parentheses or right after `::=` / `|`; literals "...", classes [...] / [^...], `.`, groups, and the
// postfix operators * + ? {m} {m,} {m,n}, which become generated rules (`x*` is `r ::= x r | ""`, right
// recursive, so the matcher's stacks do not grow with the repetition count).
#include <algorithm>
#include <functional>
#include <map>

#include "grammar/grammar.h"
#include "tokenizer/utf8.h"

namespace deepinfer::grammar {

bool CharClass::Matches(uint32_t cp) const {
  if (cp < 128) return (ascii[cp >> 6] >> (cp & 63)) & 1;
  auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                             [](uint32_t v, const std::pair<uint32_t, uint32_t>& r) { return v < r.first; });
  const bool in = it != ranges.begin() && std::prev(it)->second >= cp;
  return in != negated;
}

bool CharClass::Intersects(uint32_t lo, uint32_t hi) const {
  if (!negated) {
    for (const auto& [a, b] : ranges)
      if (a <= hi && b >= lo) return true;
    return false;
  }
  // Negated: some point of [lo, hi] is outside every range (ranges are sorted and merged).
  uint32_t next = lo;
  for (const auto& [a, b] : ranges) {
    if (b < next) continue;
    if (a > next) return true;
    if (b >= hi) return false;
    next = b + 1;
  }
  return next <= hi;
}

void CharClass::Finish() {
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (const auto& r : ranges) {
    if (!merged.empty() && r.first <= merged.back().second + 1)
      merged.back().second = std::max(merged.back().second, r.second);
    else
      merged.push_back(r);
  }
  ranges = std::move(merged);
  ascii[0] = ascii[1] = 0;
  for (uint32_t c = 0; c < 128; ++c) {
    bool in = false;
    for (const auto& [a, b] : ranges) in |= a <= c && c <= b;
    if (in != negated) ascii[c >> 6] |= uint64_t{1} << (c & 63);
  }
}

std::string GbnfLiteral(const std::string& text) {
  std::string o = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += static_cast<char>(c);
    } else if (c == '\n') {
      o += "\\n";
    } else if (c == '\r') {
      o += "\\r";
    } else if (c == '\t') {
      o += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      static const char* hex = "0123456789ABCDEF";
      o += "\\x";
      o += hex[c >> 4];
      o += hex[c & 15];
    } else {
      o += static_cast<char>(c);
    }
  }
  return o + "\"";
}

namespace {

using Seq = std::vector<Symbol>;
constexpr int kMaxRepeat = 4096;  // bounds x{m,n}, which is unrolled into m + (n - m) symbols
// Bounds on the compiled grammar: unrolled repetitions multiply (x{4096}{4096}), and the matcher's expansion
// recurses along chains of rules, so both sizes are capped.
constexpr size_t kMaxUnrolled = size_t{1} << 20;
constexpr size_t kMaxRules = 16384;

class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}

  StatusOr<std::shared_ptr<const Grammar>> Run(const std::string& root) {
    SkipSpace(true);
    while (ok() && p_ < s_.size()) ParseRule();
    if (!ok()) return err_;
    for (size_t r = 0; r < defined_.size(); ++r)
      if (!defined_[r]) return InvalidArgument("grammar: rule '" + g_.rule_names[r] + "' is used but never defined");
    auto it = ids_.find(root);
    if (it == ids_.end()) return InvalidArgument("grammar: no '" + root + "' rule");
    g_.root = it->second;
    for (size_t r = 0; r < alts_.size(); ++r) {
      std::vector<uint32_t> starts;
      for (const Seq& alt : alts_[r]) {
        starts.push_back(static_cast<uint32_t>(g_.symbols.size()));
        g_.symbols.insert(g_.symbols.end(), alt.begin(), alt.end());
        g_.symbols.push_back(Symbol{});
      }
      g_.rules.push_back(std::move(starts));
    }
    DI_RETURN_IF_ERROR(CheckLeftRecursion());
    return std::shared_ptr<const Grammar>(std::make_shared<Grammar>(std::move(g_)));
  }

 private:
  bool ok() const { return err_.ok(); }
  void Fail(const std::string& what) {
    if (!ok()) return;
    int line = 1, col = 1;
    for (size_t i = 0; i < p_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') ++line, col = 1;
      else ++col;
    }
    err_ = InvalidArgument("grammar: " + what + " at line " + std::to_string(line) + ", column " + std::to_string(col));
    p_ = s_.size();
  }
  char Peek(size_t k = 0) const { return p_ + k < s_.size() ? s_[p_ + k] : '\0'; }
  static bool NameChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }
  void SkipSpace(bool newlines) {
    while (p_ < s_.size()) {
      const char c = s_[p_];
      if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newlines)) {
        ++p_;
      } else if (c == '#') {
        while (p_ < s_.size() && s_[p_] != '\n') ++p_;
      } else {
        break;
      }
    }
  }
  uint32_t RuleId(const std::string& name) {
    if (g_.rule_names.size() >= kMaxRules && !ids_.count(name)) {
      Fail("more than 16384 rules");
      return 0;
    }
    auto [it, fresh] = ids_.emplace(name, static_cast<uint32_t>(g_.rule_names.size()));
    if (fresh) {
      g_.rule_names.push_back(name);
      alts_.emplace_back();
      defined_.push_back(false);
    }
    return it->second;
  }
  uint32_t NewRule(const std::string& base, std::vector<Seq> alts) {
    std::string name;
    do name = base + "~" + std::to_string(++generated_);  // "~" is not a name character: never clashes
    while (ids_.count(name));
    const uint32_t id = RuleId(name);
    alts_[id] = std::move(alts);
    defined_[id] = true;
    return id;
  }
  uint32_t AddClass(CharClass c) {
    c.Finish();
    g_.classes.push_back(std::move(c));
    return static_cast<uint32_t>(g_.classes.size() - 1);
  }
  Symbol Char(uint32_t cp) {
    CharClass c;
    c.ranges.push_back({cp, cp});
    return Symbol{Symbol::kChar, AddClass(std::move(c))};
  }

  void ParseRule() {
    const size_t start = p_;
    while (NameChar(Peek())) ++p_;
    if (p_ == start) return Fail("expected a rule name");
    const std::string name = s_.substr(start, p_ - start);
    SkipSpace(false);
    if (s_.compare(p_, 3, "::=") != 0) return Fail("expected ::=");
    p_ += 3;
    SkipSpace(true);
    const uint32_t id = RuleId(name);
    if (defined_[id]) return Fail("rule '" + name + "' defined twice");
    defined_[id] = true;
    auto alts = ParseAlternates(name, false);
    if (!ok()) return;
    alts_[id] = std::move(alts);
    if (Peek() == '\r') ++p_;
    if (p_ < s_.size() && Peek() != '\n') return Fail(std::string("unexpected '") + Peek() + "'");
    SkipSpace(true);
  }

  std::vector<Seq> ParseAlternates(const std::string& rule, bool nested) {
    std::vector<Seq> alts;
    alts.push_back(ParseSequence(rule, nested));
    while (ok() && Peek() == '|') {
      ++p_;
      SkipSpace(true);
      alts.push_back(ParseSequence(rule, nested));
    }
    return alts;
  }

  // One code point of a literal or class, with llama.cpp's escapes.
  uint32_t ParseChar() {
    if (p_ >= s_.size()) {
      Fail("unexpected end of grammar");
      return 0;
    }
    if (s_[p_] == '\\') {
      const char e = Peek(1);
      p_ += 2;
      int digits = 0;
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        case '\\': case '"': case '[': case ']': case '-': case '/': case '\'': case '^': return static_cast<uint8_t>(e);
        default: Fail(std::string("unknown escape '\\") + e + "'"); return 0;
      }
      uint32_t v = 0;
      for (int i = 0; i < digits; ++i) {
        const char h = Peek();
        int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (d < 0) {
          Fail("bad hex escape");
          return 0;
        }
        v = v * 16 + d;
        ++p_;
      }
      if (v > 0x10FFFF) Fail("code point out of range");
      return v;
    }
    // A UTF-8 sequence (the grammar text is UTF-8).
    size_t n = 0;
    const uint32_t v = utf8::DecodeAt(s_, p_, &n);
    p_ += n;
    return v;
  }

  Seq ParseSequence(const std::string& rule, bool nested) {
    Seq out;
    size_t last = 0;  // where the last element starts (what a postfix operator applies to)
    bool have_last = false;
    while (ok() && p_ < s_.size()) {
      const char c = Peek();
      if (c == '"') {
        ++p_;
        last = out.size();
        have_last = true;
        while (ok() && Peek() != '"') {
          if (p_ >= s_.size()) return Fail("unterminated literal"), out;
          out.push_back(Char(ParseChar()));
        }
        ++p_;
      } else if (c == '[') {
        ++p_;
        CharClass cls;
        if (Peek() == '^') cls.negated = true, ++p_;
        while (ok() && Peek() != ']') {
          if (p_ >= s_.size()) return Fail("unterminated character class"), out;
          const uint32_t a = ParseChar();
          uint32_t b = a;
          if (Peek() == '-' && Peek(1) != ']' && p_ + 1 < s_.size()) {
            ++p_;
            b = ParseChar();
            if (b < a) return Fail("character range out of order"), out;
          }
          cls.ranges.push_back({a, b});
        }
        ++p_;
        last = out.size();
        have_last = true;
        out.push_back(Symbol{Symbol::kChar, AddClass(std::move(cls))});
      } else if (c == '.') {
        ++p_;
        CharClass any;
        any.negated = true;
        last = out.size();
        have_last = true;
        out.push_back(Symbol{Symbol::kChar, AddClass(std::move(any))});
      } else if (NameChar(c)) {
        const size_t start = p_;
        while (NameChar(Peek())) ++p_;
        last = out.size();
        have_last = true;
        out.push_back(Symbol{Symbol::kRule, RuleId(s_.substr(start, p_ - start))});
      } else if (c == '(') {
        ++p_;
        SkipSpace(true);
        auto alts = ParseAlternates(rule, true);
        if (!ok()) return out;
        if (Peek() != ')') return Fail("expected ')'"), out;
        ++p_;
        last = out.size();
        have_last = true;
        out.push_back(Symbol{Symbol::kRule, NewRule(rule, std::move(alts))});
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_last) return Fail(std::string("'") + c + "' with nothing before it"), out;
        ++p_;
        int lo = 0, hi = -1;
        if (c == '+') lo = 1;
        if (c == '?') hi = 1;
        if (c == '{') {
          SkipSpace(nested);
          lo = ParseInt();
          hi = lo;
          SkipSpace(nested);
          if (Peek() == ',') {
            ++p_;
            SkipSpace(nested);
            hi = isdigit(static_cast<unsigned char>(Peek())) ? ParseInt() : -1;
            SkipSpace(nested);
          }
          if (Peek() != '}') return Fail("expected '}'"), out;
          ++p_;
          if (!ok()) return out;
          if (hi >= 0 && hi < lo) return Fail("repetition {m,n} with n < m"), out;
          if (lo > kMaxRepeat || hi > kMaxRepeat) return Fail("repetition count over 4096"), out;
        }
        Repeat(rule, &out, last, lo, hi);
        have_last = false;
      } else {
        break;
      }
      SkipSpace(nested);
    }
    return out;
  }

  int ParseInt() {
    int v = 0;
    const size_t start = p_;
    while (isdigit(static_cast<unsigned char>(Peek())) && v <= kMaxRepeat) v = v * 10 + (s_[p_++] - '0');
    if (p_ == start) Fail("expected a number");
    return v;
  }

  void Repeat(const std::string& rule, Seq* out, size_t last, int lo, int hi) {
    Seq elem(out->begin() + last, out->end());
    out->resize(last);
    unrolled_ += static_cast<size_t>(std::max(lo, hi)) + 1;
    if (unrolled_ > kMaxUnrolled) return Fail("repetitions unroll to more than 2^20 symbols");
    if (elem.size() != 1) elem = {Symbol{Symbol::kRule, NewRule(rule, {elem})}};
    for (int i = 0; i < lo; ++i) out->push_back(elem[0]);
    if (hi < 0) {
      // r ::= x r | ""
      const uint32_t r = NewRule(rule, {});
      alts_[r] = {Seq{elem[0], Symbol{Symbol::kRule, r}}, Seq{}};
      out->push_back(Symbol{Symbol::kRule, r});
      return;
    }
    // Nested optionals, built from the inside out: r_k ::= x r_{k+1} | "".
    Seq inner;
    for (int k = 0; k < hi - lo; ++k) {
      Seq first = {elem[0]};
      first.insert(first.end(), inner.begin(), inner.end());
      inner = {Symbol{Symbol::kRule, NewRule(rule, {first, Seq{}})}};
    }
    out->insert(out->end(), inner.begin(), inner.end());
  }

  Status CheckLeftRecursion() const {
    const size_t n = g_.rules.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (uint32_t a : g_.rules[r]) {
          bool all = true;
          for (uint32_t i = a; g_.symbols[i].kind != Symbol::kEnd && all; ++i)
            all = g_.symbols[i].kind == Symbol::kRule && nullable[g_.symbols[i].arg];
          if (all) {
            nullable[r] = changed = true;
            break;
          }
        }
      }
    }
    std::vector<std::vector<uint32_t>> first(n);  // rules a rule can start with (through nullable prefixes)
    for (size_t r = 0; r < n; ++r)
      for (uint32_t a : g_.rules[r])
        for (uint32_t i = a; g_.symbols[i].kind == Symbol::kRule; ++i) {
          first[r].push_back(g_.symbols[i].arg);
          if (!nullable[g_.symbols[i].arg]) break;
        }
    std::vector<int> color(n, 0);
    std::string cycle_at;
    std::function<bool(uint32_t)> dfs = [&](uint32_t r) {
      color[r] = 1;
      for (uint32_t s : first[r]) {
        if (color[s] == 1) {
          cycle_at = g_.rule_names[s];
          return true;
        }
        if (color[s] == 0 && dfs(s)) return true;
      }
      color[r] = 2;
      return false;
    };
    for (uint32_t r = 0; r < n; ++r)
      if (color[r] == 0 && dfs(r))
        return InvalidArgument("grammar: rule '" + cycle_at + "' is left-recursive (not supported)");
    return Status::Ok();
  }

  const std::string& s_;
  size_t p_ = 0;
  Status err_;
  Grammar g_;
  std::map<std::string, uint32_t> ids_;
  std::vector<std::vector<Seq>> alts_;
  std::vector<bool> defined_;
  int generated_ = 0;
  size_t unrolled_ = 0;
};

}  // namespace

StatusOr<std::shared_ptr<const Grammar>> ParseGbnf(const std::string& text, const std::string& root) {
  return Parser(text).Run(root);
}

}  // namespace deepinfer::grammar
