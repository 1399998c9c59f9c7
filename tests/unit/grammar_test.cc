// The grammar engine: GBNF / regex / JSON Schema languages on accept and reject strings (expected answers are
// written by hand or come from an independent matcher: std::regex for full matches, PCRE2 partial matching for
// prefixes), rollback, UTF-8 split across tokens, and token masks on the real DeepSeek-V3, Qwen3 and Llama-3
// vocabularies against a brute-force reference.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <gtest/gtest.h>

#include <random>
#include <regex>

#include "grammar/compile.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"
#include "vocab_test_util.h"

namespace deepinfer::grammar {
namespace {

bool Accepts(const std::shared_ptr<const Grammar>& g, const std::string& s) {
  GrammarMatcher m(g);
  return m.AcceptBytes(s) && m.IsAccepting();
}

std::shared_ptr<const Grammar> Gbnf(const std::string& text) {
  auto g = CompileGbnf(text);
  EXPECT_TRUE(g.ok()) << g.status().ToString() << "\n" << text;
  return g.ok() ? *g : nullptr;
}

TEST(Grammar, GbnfBasics) {
  auto g = Gbnf(R"(root ::= "a" [b-d]+ ("x" | "yz")? tail
tail ::= "!"{1,3}  # comment
)");
  for (const char* s : {"ab!", "abcd!!!", "abx!", "adyz!!"}) EXPECT_TRUE(Accepts(g, s)) << s;
  for (const char* s : {"a!", "ab", "abx!!!!", "abxyz!", "b!", "ab !"}) EXPECT_FALSE(Accepts(g, s)) << s;
  auto any = Gbnf("root ::= [^a]* \"a\"\n");
  EXPECT_TRUE(Accepts(any, "xyz\xC3\xA9\xE4\xB8\xAD" "a"));
  EXPECT_FALSE(Accepts(any, "xyz"));
}

TEST(Grammar, GbnfErrors) {
  for (const char* bad : {"root ::= foo\n", "root ::= \"a\n", "root ::= [a-\n", "x ::= \"a\"\n", "root ::= root \"a\"\n",
                          "root ::= a\na ::= b? root\nb ::= \"x\"\n", "root ::= \"a\"{5,2}\n", "root ::= (\"a\"\n",
                          "root ::= \"\\q\"\n", "root = \"a\"\n"}) {
    auto g = CompileGbnf(bad);
    EXPECT_FALSE(g.ok()) << bad;
  }
  auto g = CompileGbnf("root ::= foo\n");
  EXPECT_NE(g.status().message().find("'foo'"), std::string::npos) << g.status().message();
}

TEST(Grammar, PartialUtf8AndRollback) {
  auto g = Gbnf("root ::= \"\xC3\xA9\" | \"\xE4\xB8\xAD\xE6\x96\x87\"\n");
  GrammarMatcher m(g);
  EXPECT_TRUE(m.AcceptBytes("\xE4"));  // a prefix of U+4E2D
  EXPECT_FALSE(m.IsAccepting());
  EXPECT_FALSE(m.AcceptBytes("\xB9"));  // U+4E39 is not in the grammar: rejected mid-character
  EXPECT_TRUE(m.AcceptBytes("\xB8\xAD\xE6"));
  EXPECT_TRUE(m.AcceptBytes("\x96\x87"));
  EXPECT_TRUE(m.IsTerminated());
  EXPECT_EQ(m.num_steps(), 3);
  m.Rollback(2);
  EXPECT_FALSE(m.IsAccepting());
  EXPECT_FALSE(m.AcceptBytes("\xC3"));  // after E4 only continuation bytes
  m.Rollback(1);
  EXPECT_TRUE(m.AcceptBytes("\xC3\xA9"));
  EXPECT_TRUE(m.IsTerminated());
  EXPECT_FALSE(m.AcceptBytes("\xFF"));
}

// Regexes against std::regex (ECMAScript), an independent full-match implementation, on random strings.
TEST(Grammar, RegexMatchesStdRegex) {
  const std::vector<std::string> patterns = {
      "[a-c]+x?", "(ab|a)*b", "\\d{2,4}-[a-f0-9]{3}", "(foo|bar){1,2}baz", "a(b(c|d)*)?e", "[^abc]{2}",
      "\\w+@\\w+\\.(com|org)", "x{3}|y{0,2}", "(a|b)?(c|d)+", "[.][a-]\\.", "\\s*\\S+"};
  std::mt19937 rng(7);
  const std::string alphabet = "abcdefxyz0123-.@ _";
  for (const auto& pat : patterns) {
    auto g = CompileRegex(pat);
    ASSERT_TRUE(g.ok()) << pat << ": " << g.status().ToString();
    const std::regex ref(pat, std::regex::ECMAScript);
    int accepted = 0;
    for (int i = 0; i < 3000; ++i) {
      std::string s;
      const int len = rng() % 9;
      for (int k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
      const bool want = std::regex_match(s, ref);
      accepted += want;
      ASSERT_EQ(Accepts(*g, s), want) << "pattern " << pat << " on '" << s << "'";
    }
    (void)accepted;
  }
  for (const char* bad : {"(a", "a)", "a{2", "(?=a)", "\\1", "*a", "[a", "a**", "\\b"})
    EXPECT_FALSE(CompileRegex(bad).ok()) << bad;
}

TEST(Grammar, JsonSchema) {
  auto compile = [](const char* s) {
    auto g = CompileJsonSchema(nlohmann::json::parse(s));
    EXPECT_TRUE(g.ok()) << s << ": " << g.status().ToString();
    return g.ok() ? *g : nullptr;
  };
  auto obj = compile(R"({"type":"object","properties":{"a":{"type":"integer","minimum":-5,"maximum":120},
      "b":{"type":"string","maxLength":3},"c":{"enum":["x",1,null]}},"required":["a"]})");
  for (const char* s : {R"({"a":0})", R"({"a":-5,"b":"xyz"})", R"({ "a": 120, "c": null })", R"({"a":7,"b":"","c":"x"})",
                        R"({"a":99,"c":1})"})
    EXPECT_TRUE(Accepts(obj, s)) << s;
  for (const char* s : {R"({})", R"({"a":-6})", R"({"a":121})", R"({"a":1,"b":"abcd"})", R"({"a":01})",
                        R"({"a":1,"d":2})", R"({"a":1,"c":"y"})", R"({"b":"x","a":1})", R"({"a":1.5})"})
    EXPECT_FALSE(Accepts(obj, s)) << s;
  auto arr = compile(R"({"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":2})");
  EXPECT_TRUE(Accepts(arr, "[true]"));
  EXPECT_TRUE(Accepts(arr, "[true, false]"));
  EXPECT_FALSE(Accepts(arr, "[]"));
  EXPECT_FALSE(Accepts(arr, "[true,true,true]"));
  auto ref = compile(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
      "next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"]}},"$ref":"#/$defs/node"})");
  EXPECT_TRUE(Accepts(ref, R"({"next":{"next":null,"v":2},"v":1})"));
  EXPECT_FALSE(Accepts(ref, R"({"next":{"next":3,"v":2},"v":1})"));
  auto fmt = compile(R"({"type":"object","properties":{"d":{"type":"string","format":"date"},
      "u":{"type":"string","format":"uuid"},"p":{"type":"string","pattern":"^[A-Z]{2}\"?$"}},"required":["d","u","p"]})");
  EXPECT_TRUE(Accepts(fmt, R"({"d":"2024-02-28","p":"AB\"","u":"0a1b2c3d-0000-4000-8000-00000000abcd"})"));
  EXPECT_FALSE(Accepts(fmt, R"({"d":"2024-02-30","p":"AB","u":"0a1b2c3d-0000-4000-8000-00000000abcd"})"));
  EXPECT_FALSE(Accepts(fmt, R"({"d":"2024-02-01","p":"AB"","u":"0a1b2c3d-0000-4000-8000-00000000abcd"})"));
  auto nullable = compile(R"({"type":"number","nullable":true})");
  EXPECT_TRUE(Accepts(nullable, "null"));
  EXPECT_TRUE(Accepts(nullable, "-1.5e3"));
  EXPECT_FALSE(Accepts(nullable, "1."));
  auto any = CompileJsonObject();
  ASSERT_TRUE(any.ok());
  EXPECT_TRUE(Accepts(*any, R"({"k": [1, {"x": "\u00e9\n"}, true, null]})"));
  EXPECT_FALSE(Accepts(*any, R"([1])"));
  EXPECT_FALSE(Accepts(*any, R"({"k": tru})"));
  for (const char* bad : {R"({"type":"strin"})", R"({"not":{}})", R"({"$ref":"#/$defs/missing"})",
                          R"({"type":"integer","minimum":5,"maximum":4})", R"({"type":"object","required":["x"]})",
                          R"({"type":"string","pattern":"(a"})", R"({"type":"string","format":"hostname"})"}) {
    auto g = CompileJsonSchema(nlohmann::json::parse(bad));
    EXPECT_FALSE(g.ok()) << bad;
  }
}

// Integer ranges are digit-range rules: check every value near the bounds exactly.
TEST(Grammar, IntegerRangesExact) {
  const std::vector<std::pair<int, int>> ranges = {{0, 9}, {7, 123}, {-37, 45}, {-1000, -999}, {19, 1001}, {-5, 0}};
  for (auto [lo, hi] : ranges) {
    nlohmann::json s = {{"type", "integer"}, {"minimum", lo}, {"maximum", hi}};
    auto g = CompileJsonSchema(s);
    ASSERT_TRUE(g.ok()) << s.dump() << g.status().ToString();
    for (int v = lo - 50; v <= hi + 50; ++v) ASSERT_EQ(Accepts(*g, std::to_string(v)), v >= lo && v <= hi) << s.dump() << " " << v;
  }
  auto ex = CompileJsonSchema(nlohmann::json::parse(R"({"type":"integer","exclusiveMinimum":3,"exclusiveMaximum":6.5})"));
  ASSERT_TRUE(ex.ok());
  for (int v = 0; v < 10; ++v) EXPECT_EQ(Accepts(*ex, std::to_string(v)), v >= 4 && v <= 6) << v;
}

// PCRE2 partial matching as the independent prefix oracle: a string is a viable prefix iff it matches fully
// or partially (PCRE2_PARTIAL_HARD).
class PcrePrefix {
 public:
  explicit PcrePrefix(const std::string& pat) {
    int err;
    PCRE2_SIZE off;
    const std::string anchored = "(?:" + pat + ")\\z";
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(anchored.c_str()), anchored.size(), PCRE2_ANCHORED, &err, &off, nullptr);
    md_ = pcre2_match_data_create_from_pattern(code_, nullptr);
  }
  ~PcrePrefix() {
    pcre2_match_data_free(md_);
    pcre2_code_free(code_);
  }
  bool Viable(const std::string& s) const {
    const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, PCRE2_PARTIAL_HARD, md_, nullptr);
    return rc >= 0 || rc == PCRE2_ERROR_PARTIAL;
  }
  bool Full(const std::string& s) const {
    return pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, md_, nullptr) >= 0;
  }
  bool ok() const { return code_ != nullptr; }

 private:
  pcre2_code* code_ = nullptr;
  pcre2_match_data* md_ = nullptr;
};

// A vocabulary that does not load fails the test, naming it (vocab_test_util.h); never a skip.
std::unique_ptr<Tokenizer> LoadVocab(const std::string& name) { return deepinfer::testing::LoadReferenceVocab(name); }

// Mask exactness on the real vocabularies: at random reachable states of a regex grammar (a random walk over
// allowed tokens), the mask equals, token by token, whether PCRE2 finds prefix + token viable.
TEST(Grammar, MaskMatchesBruteForceOnRealVocabularies) {
  // Positive ASCII classes only, so PCRE2's byte semantics and the grammar's code point semantics agree.
  const std::vector<std::string> patterns = {R"(\{"name": "[a-z ]{1,12}", "age": [1-9][0-9]?\})",
                                             R"((yes|no|maybe)( [0-9]+)*)", R"([A-Za-z]+(, [A-Za-z]+)*\.)"};
  for (const char* vocab : {"deepseek_v3", "qwen3", "llama3"}) {
    auto tok = LoadVocab(vocab);
    if (!tok) continue;  // failed (LoadVocab); the other vocabularies are still checked
    auto trie = TokenTrie::FromTokenizer(*tok);
    std::mt19937 rng(11);
    uint64_t table_stacks = 0;
    for (const auto& pat : patterns) for (bool use_sets : {false, true}) {
      auto g = CompileRegex(pat);
      ASSERT_TRUE(g.ok()) << g.status().ToString();
      PcrePrefix ref(pat);
      ASSERT_TRUE(ref.ok());
      // Both mask paths: the trie walk, and the precomputed per-position token sets.
      GrammarMatcher m = use_sets ? GrammarMatcher(TokenSets::Build(*g, trie)) : GrammarMatcher(*g, trie);
      std::vector<uint32_t> bits((trie->vocab_size() + 31) / 32);
      std::string prefix;
      for (int step = 0; step < 4; ++step) {
        m.FillMask(bits.data());
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < trie->vocab_size(); ++id) {
          const bool got = (bits[id >> 5] >> (id & 31)) & 1;
          const std::string& b = trie->bytes(id);
          bool want;
          if (tok->IsEog(id)) want = ref.Full(prefix);
          else want = !b.empty() && ref.Viable(prefix + b);
          ASSERT_EQ(got, want) << vocab << " pattern " << pat << (use_sets ? " (token sets)" : " (walk)") << " after '"
                               << prefix << "' token " << id << " '" << b << "'";
          if (got && !tok->IsEog(id)) allowed.push_back(id);
        }
        if (allowed.empty()) break;
        const int32_t pick = allowed[rng() % allowed.size()];
        ASSERT_TRUE(m.AcceptToken(pick));
        prefix += trie->bytes(pick);
      }
      if (use_sets) table_stacks += m.stats().table_stacks;
    }
    EXPECT_GT(table_stacks, 0u) << vocab << ": no mask used the token sets";
  }
}

// The mask walk (trie, subtree skips, per-state cache) against feeding every token to a copy of the matcher,
// on a JSON Schema grammar with non-ASCII strings, through the Qwen3 vocabulary.
TEST(Grammar, JsonMaskMatchesPerTokenFeed) {
  auto tok = LoadVocab("qwen3");
  ASSERT_NE(tok, nullptr);  // LoadVocab said why
  auto trie = TokenTrie::FromTokenizer(*tok);
  auto g = CompileJsonSchema(nlohmann::json::parse(
      R"({"type":"object","properties":{"name":{"type":"string"},"tags":{"type":"array","items":{"enum":["α","βeta"]}}},"required":["name","tags"]})"));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const std::string text = "{\"name\": \"中文 ok\\n\", \"tags\": [\"α\", \"βeta\"]}";
  GrammarMatcher m(*g, trie);
  std::vector<uint32_t> bits((trie->vocab_size() + 31) / 32);
  auto sets = TokenSets::Build(*g, trie);
  for (size_t cut : {size_t{0}, size_t{1}, size_t{10}, size_t{11}, size_t{12}, size_t{20}, size_t{30}}) for (bool use_sets : {false, true}) {
    GrammarMatcher at = use_sets ? GrammarMatcher(sets) : GrammarMatcher(*g, trie);
    ASSERT_TRUE(at.AcceptBytes(text.substr(0, cut))) << cut;
    at.FillMask(bits.data());
    for (int32_t id = 0; id < trie->vocab_size(); id += 1) {
      const std::string& b = trie->bytes(id);
      bool want = tok->IsEog(id) ? at.IsAccepting() : !b.empty() && at.AcceptBytes(b);
      if (want && !tok->IsEog(id)) at.Rollback(1);
      ASSERT_EQ(((bits[id >> 5] >> (id & 31)) & 1) != 0, want)
          << "cut " << cut << (use_sets ? " (token sets)" : " (walk)") << " token " << id << " '" << b << "'";
    }
  }
  EXPECT_TRUE(m.AcceptBytes(text));
  EXPECT_TRUE(m.IsTerminated() || m.IsAccepting());
}

// The token-set path against the trie walk (itself checked against brute force above) on random walks over JSON
// Schemas with the shapes that make masks expensive: long strings, patterns, nested arrays and objects, anyOf,
// recursion. Every mask must be equal bit for bit, and the sets must actually be used.
TEST(Grammar, TokenSetMasksEqualTrieWalk) {
  const std::vector<std::string> schemas = {
      R"({"type":"object","properties":{"title":{"type":"string"},"body":{"type":"string","maxLength":40},"n":{"type":"integer"}},"required":["title","body"]})",
      R"({"type":"array","items":{"type":"object","properties":{"id":{"type":"string","pattern":"^[a-z ]{2,30}$"},"tags":{"type":"array","items":{"type":"string"},"maxItems":3}},"required":["id"]},"minItems":1,"maxItems":4})",
      R"({"anyOf":[{"type":"string","format":"date"},{"type":"object","additionalProperties":{"type":"string"}},{"type":"null"}]})",
      R"({"$defs":{"node":{"type":"object","properties":{"name":{"type":"string"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["name"]}},"$ref":"#/$defs/node"})",
      R"({"type":"object","properties":{"e":{"enum":["alpha","beta gamma","δ"]},"x":{"type":"number","minimum":-5}},"additionalProperties":true})"};
  for (const char* vocab : {"qwen3", "llama3"}) {
    auto tok = LoadVocab(vocab);
    if (!tok) continue;  // failed (LoadVocab); the other vocabularies are still checked
    auto trie = TokenTrie::FromTokenizer(*tok);
    const size_t words = (trie->vocab_size() + 31) / 32;
    uint64_t table_stacks = 0;
    for (size_t si = 0; si < schemas.size(); ++si) {
      auto g = CompileJsonSchema(nlohmann::json::parse(schemas[si]));
      ASSERT_TRUE(g.ok()) << g.status().ToString();
      auto sets = TokenSets::Build(*g, trie);
      auto every = TokenSets::Build(*g, trie, /*every_position=*/true);
      for (uint32_t seed = 1; seed <= 4; ++seed) {
        // Seeds 1-3: the sets the engine builds; seed 4: sets at every position, the walk never used.
        GrammarMatcher fast(seed == 4 ? every : sets), ref(*g, trie);
        std::mt19937 rng(seed * 7919 + si);
        std::vector<uint32_t> a(words), b(words);
        for (int step = 0; step < 48; ++step) {
          fast.FillMask(a.data());
          ref.FillMask(b.data());
          for (size_t w = 0; w < words; ++w)
            if (a[w] != b[w]) {
              const uint32_t diff = a[w] ^ b[w];
              const int32_t id = static_cast<int32_t>(w * 32 + __builtin_ctz(diff));
              FAIL() << vocab << " schema " << si << " seed " << seed << " step " << step << ": token " << id << " '"
                     << trie->bytes(id) << "' is " << (((a[w] >> (id & 31)) & 1) ? "allowed" : "refused")
                     << " by the token sets but not by the walk";
            }
          std::vector<int32_t> allowed;
          for (int32_t id = 0; id < trie->vocab_size(); ++id)
            if (((a[id >> 5] >> (id & 31)) & 1) && !tok->IsEog(id)) allowed.push_back(id);
          if (allowed.empty()) break;
          // Prefer long tokens half the time, so walks reach deep inside strings and past their ends.
          int32_t pick = allowed[rng() % allowed.size()];
          if (rng() % 2)
            for (int k = 0; k < 8; ++k) {
              const int32_t c = allowed[rng() % allowed.size()];
              if (trie->bytes(c).size() > trie->bytes(pick).size()) pick = c;
            }
          ASSERT_TRUE(fast.AcceptToken(pick));
          ASSERT_TRUE(ref.AcceptToken(pick));
        }
        table_stacks += fast.stats().table_stacks;
      }
    }
    EXPECT_GT(table_stacks, 30u) << vocab << ": the token sets were hardly used, so this test checked little";
  }
}

}  // namespace
}  // namespace deepinfer::grammar
