// A context-free grammar over Unicode code points, in the shape the matcher walks: rules, each a list of
// alternatives, each a run of symbols (a character class or a reference to a rule) ended by an END marker, all
// in one flat array so a parse position is a single index. GBNF text (llama.cpp's syntax) is the one source
// language: JSON Schema, regular expressions and choice lists are translated to GBNF first (json_schema.h,
// regex.h), so every constraint a user sends can also be printed as the grammar it became.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer::grammar {

struct CharClass {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // inclusive, sorted, merged
  bool negated = false;
  uint64_t ascii[2] = {0, 0};  // membership of code points 0..127 (negation applied), the fast path

  bool Matches(uint32_t cp) const;
  // Whether some code point in [lo, hi] matches (used while a multi-byte UTF-8 sequence is incomplete).
  bool Intersects(uint32_t lo, uint32_t hi) const;
  void Finish();  // sorts and merges ranges, fills ascii
};

struct Symbol {
  enum Kind : uint8_t { kEnd, kChar, kRule };
  Kind kind = kEnd;
  uint32_t arg = 0;  // class index (kChar) or rule index (kRule)
};

struct Grammar {
  std::vector<Symbol> symbols;                 // every alternative's symbols, each run ended by kEnd
  std::vector<CharClass> classes;
  std::vector<std::vector<uint32_t>> rules;    // rule -> start index of each alternative in symbols
  std::vector<std::string> rule_names;
  uint32_t root = 0;
};

// Parses GBNF. Errors name the line and column. Rejects undefined rules, a missing root and left recursion
// (which a top-down matcher cannot run).
StatusOr<std::shared_ptr<const Grammar>> ParseGbnf(const std::string& text, const std::string& root = "root");

// A GBNF string literal (quoted, escaped) for arbitrary UTF-8 text.
std::string GbnfLiteral(const std::string& text);

}  // namespace deepinfer::grammar
