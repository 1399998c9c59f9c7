// Regular expressions (the common subset of ECMAScript/Python syntax: literals, escapes, classes, groups,
// alternation, greedy or lazy quantifiers) to a GBNF expression. Constructs a grammar cannot express exactly
// (backreferences, lookaround, word boundaries) are rejected rather than approximated.
#include "grammar/regex.h"

#include <cstdio>

#include "grammar/grammar.h"
#include "tokenizer/utf8.h"

namespace deepinfer::grammar {

namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

std::string Hex(uint32_t cp) {
  char b[16];
  std::snprintf(b, sizeof b, "\\U%08X", cp);
  return b;
}

// Removes [a, b] from a range list.
Ranges Subtract(const Ranges& in, uint32_t a, uint32_t b) {
  Ranges out;
  for (auto [x, y] : in) {
    if (y < a || x > b) {
      out.push_back({x, y});
      continue;
    }
    if (x < a) out.push_back({x, a - 1});
    if (y > b) out.push_back({b + 1, y});
  }
  return out;
}

class RegexConverter {
 public:
  RegexConverter(const std::string& re, bool json) : s_(re), json_(json) {}

  StatusOr<std::string> Run() {
    if (Peek() == '^') ++p_;
    std::string e = Alternation();
    if (err_.ok() && p_ < s_.size()) Fail(s_[p_] == ')' ? "unbalanced ')'" : "unexpected character");
    if (!err_.ok()) return err_;
    return e.empty() ? std::string("\"\"") : e;
  }

 private:
  char Peek(size_t k = 0) const { return p_ + k < s_.size() ? s_[p_ + k] : '\0'; }
  void Fail(const std::string& m) {
    if (err_.ok()) err_ = InvalidArgument("regex: " + m + " at offset " + std::to_string(p_));
    p_ = s_.size();
  }
  uint32_t NextCp() {
    size_t n = 0;
    const uint32_t v = utf8::DecodeAt(s_, p_, &n);
    p_ += n;
    return v;
  }

  // A class over code points as GBNF; in JSON-string mode the characters a JSON string cannot hold raw
  // (quote, backslash, controls) are taken out, so every match is also valid string content.
  std::string Class(Ranges r, bool negated) const {
    if (json_) {
      if (negated) {
        r.push_back({0, 0x1F});
        r.push_back({'"', '"'});
        r.push_back({'\\', '\\'});
      } else {
        r = Subtract(r, 0, 0x1F);
        r = Subtract(r, '"', '"');
        r = Subtract(r, '\\', '\\');
      }
    }
    std::string o = negated ? "[^" : "[";
    for (auto [a, b] : r) o += a == b ? Hex(a) : Hex(a) + "-" + Hex(b);
    return o + "]";
  }
  std::string Literal(uint32_t cp) const {
    if (json_ && (cp == '"' || cp == '\\')) return GbnfLiteral(std::string("\\") + static_cast<char>(cp));
    if (json_ && cp < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", cp);
      return GbnfLiteral(b);
    }
    return GbnfLiteral(utf8::Encode(cp));
  }

  static bool Shorthand(char c, Ranges* r, bool* negated) {
    *negated = c == 'D' || c == 'W' || c == 'S';
    switch (c) {
      case 'd': case 'D': *r = {{'0', '9'}}; return true;
      case 'w': case 'W': *r = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; return true;
      case 's': case 'S': *r = {{'\t', '\r'}, {' ', ' '}}; return true;
      default: return false;
    }
  }
  // An escaped single character (after the backslash), or Fail.
  uint32_t EscapedChar(char e) {
    switch (e) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case 'f': return '\f';
      case 'v': return '\v';
      case '0': return 0;
      case 'x': case 'u': {
        const int digits = e == 'x' ? 2 : 4;
        uint32_t v = 0;
        for (int i = 0; i < digits; ++i) {
          const char h = Peek();
          const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
          if (d < 0) return Fail("bad hex escape"), 0;
          v = v * 16 + d;
          ++p_;
        }
        return v;
      }
      default:
        if ((e >= '1' && e <= '9') || e == 'b' || e == 'B' || e == 'k')
          return Fail(std::string("unsupported escape \\") + e + " (backreferences and word boundaries)"), 0;
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) return Fail(std::string("unknown escape \\") + e), 0;
        return static_cast<uint8_t>(e);
    }
  }

  std::string Alternation() {
    std::vector<std::string> alts = {Sequence()};
    while (err_.ok() && Peek() == '|') {
      ++p_;
      alts.push_back(Sequence());
    }
    if (alts.size() == 1) return alts[0];
    std::string o = "(";
    for (size_t i = 0; i < alts.size(); ++i) o += (i ? " | " : "") + (alts[i].empty() ? std::string("\"\"") : alts[i]);
    return o + ")";
  }

  std::string Sequence() {
    std::string o;
    while (err_.ok() && p_ < s_.size() && Peek() != '|' && Peek() != ')') {
      if (Peek() == '$' && p_ + 1 == s_.size()) {
        ++p_;
        break;
      }
      std::string atom = Atom();
      if (!err_.ok()) break;
      atom += Quantifier();
      o += (o.empty() ? "" : " ") + atom;
    }
    return o;
  }

  std::string Quantifier() {
    std::string q;
    const char c = Peek();
    if (c == '*' || c == '+' || c == '?') {
      ++p_;
      q = c;
    } else if (c == '{') {
      size_t j = p_ + 1;
      std::string body;
      while (j < s_.size() && (isdigit(static_cast<unsigned char>(s_[j])) || s_[j] == ',')) body += s_[j++];
      if (j >= s_.size() || s_[j] != '}' || body.empty() || body[0] == ',')
        return Fail("bad {m,n} quantifier"), "";
      p_ = j + 1;
      q = "{" + body + "}";
    } else {
      return "";
    }
    if (Peek() == '?' || Peek() == '+') ++p_;  // lazy / possessive: the same language
    if (Peek() == '*' || Peek() == '+' || Peek() == '?' || Peek() == '{') return Fail("nested quantifier"), "";
    return q;
  }

  std::string Atom() {
    const char c = Peek();
    if (c == '(') {
      ++p_;
      if (Peek() == '?') {
        if (Peek(1) == ':') {
          p_ += 2;
        } else if (Peek(1) == '<' && Peek(2) != '=' && Peek(2) != '!') {  // named group (?<name>...)
          while (p_ < s_.size() && s_[p_] != '>') ++p_;
          ++p_;
        } else if (Peek(1) == 'P' && Peek(2) == '<') {
          while (p_ < s_.size() && s_[p_] != '>') ++p_;
          ++p_;
        } else {
          return Fail("lookaround and inline flags are not supported"), "";
        }
      }
      std::string inner = Alternation();
      if (Peek() != ')') return Fail("missing ')'"), "";
      ++p_;
      return "(" + (inner.empty() ? std::string("\"\"") : inner) + ")";
    }
    if (c == '[') return ParseClass();
    if (c == '.') {
      ++p_;
      return Class({{'\n', '\n'}}, true);
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') return Fail("quantifier with nothing before it"), "";
    if (c == '^' || c == '$') return Fail("anchors are only supported at the ends"), "";
    if (c == '\\') {
      ++p_;
      if (p_ >= s_.size()) return Fail("trailing backslash"), "";
      const char e = s_[p_++];
      Ranges r;
      bool neg;
      if (Shorthand(e, &r, &neg)) return Class(r, neg);
      const uint32_t cp = EscapedChar(e);
      return err_.ok() ? Literal(cp) : "";
    }
    return Literal(NextCp());
  }

  std::string ParseClass() {
    ++p_;
    bool negated = false;
    if (Peek() == '^') negated = true, ++p_;
    Ranges r;
    bool first = true;
    while (err_.ok()) {
      if (p_ >= s_.size()) return Fail("unterminated character class"), "";
      if (Peek() == ']' && !first) break;
      first = false;
      uint32_t a;
      if (Peek() == '\\') {
        ++p_;
        const char e = Peek();
        ++p_;
        Ranges sr;
        bool neg;
        if (Shorthand(e, &sr, &neg)) {
          if (neg) return Fail("negated shorthand inside a class is not supported"), "";
          r.insert(r.end(), sr.begin(), sr.end());
          continue;
        }
        if (e == 'b') {
          a = '\b';
        } else {
          a = EscapedChar(e);
        }
      } else {
        a = NextCp();
      }
      uint32_t b = a;
      if (Peek() == '-' && Peek(1) != ']' && p_ + 1 < s_.size()) {
        ++p_;
        if (Peek() == '\\') {
          ++p_;
          const char e = s_[p_++];
          b = EscapedChar(e);
        } else {
          b = NextCp();
        }
        if (b < a) return Fail("class range out of order"), "";
      }
      r.push_back({a, b});
    }
    ++p_;
    return Class(r, negated);
  }

  const std::string& s_;
  const bool json_;
  size_t p_ = 0;
  Status err_;
};

}  // namespace

StatusOr<std::string> RegexToGbnf(const std::string& pattern, bool json_string_content) {
  return RegexConverter(pattern, json_string_content).Run();
}

}  // namespace deepinfer::grammar
