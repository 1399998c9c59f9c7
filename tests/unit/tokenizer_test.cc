#include <gtest/gtest.h>

#include "test_util.h"

#include "format/gguf.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

std::unique_ptr<Tokenizer> Stories() {
  auto g = GgufFile::Open(testing::SharedModels() + "/stories260K.gguf");
  EXPECT_TRUE(g.ok());
  auto t = TokenizerFromGguf(**g);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

TEST(TokenizerTest, StoriesRoundTripsText) {
  auto t = Stories();
  for (const std::string s : {"Once upon a time, there was a little girl named Lily.", "Hello  world!\nNew line", "ümlaut 日本"}) {
    auto ids = t->Encode(s, true);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids[0], t->bos_id());
    EXPECT_EQ(t->Decode(ids), s);
  }
}

TEST(TokenizerTest, StreamDecoderNeverSplitsUtf8AndConcatenatesToDecode) {
  auto t = Stories();
  const std::string s = "Lily saw 🐶 and 日本語 and é.";
  auto ids = t->Encode(s, false);
  StreamDecoder d(*t);
  std::string streamed;
  for (int32_t id : ids) {
    std::string piece = d.Push(id);
    // Every emitted piece is valid UTF-8 on its own: no dangling lead or continuation bytes.
    size_t i = 0;
    while (i < piece.size()) {
      unsigned char c = piece[i];
      size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
      ASSERT_NE(n, 0u) << "piece starts with a continuation byte";
      ASSERT_LE(i + n, piece.size()) << "piece ends inside a character";
      i += n;
    }
    streamed += piece;
  }
  streamed += d.Flush();
  EXPECT_EQ(streamed, t->Decode(ids));
  EXPECT_EQ(streamed, s);
}

TEST(TokenizerTest, RejectsMissingVocabulary) {
  GgufWriter w;
  w.SetString("tokenizer.ggml.model", "llama");
  const std::string path = ::testing::TempDir() + "/novocab.gguf";
  ASSERT_TRUE(w.Write(path).ok());
  auto g = GgufFile::Open(path);
  ASSERT_TRUE(g.ok());
  auto t = TokenizerFromGguf(**g);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("tokenizer.ggml.tokens"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer
