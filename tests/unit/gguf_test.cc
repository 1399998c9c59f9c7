#include <gtest/gtest.h>

#include "test_util.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "format/gguf.h"

namespace deepinfer {
namespace {

std::vector<uint8_t> ReadAll(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

std::string TmpPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("deepinfer_gguf_" + std::to_string(::getpid()) + "_" + name)).string();
}

TEST(GgufTest, WriterReaderRoundTrip) {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetU32("llama.block_count", 3);
  w.SetF32("llama.rope.freq_base", 500000.f);
  w.SetBool("flag", true);
  w.SetStringArray("tokenizer.ggml.tokens", {"a", "bc", ""});
  w.SetI32Array("ints", {-1, 7});
  std::vector<float> v = {1, 2, 3, 4, 5, 6};
  std::vector<uint8_t> bytes(24);
  std::memcpy(bytes.data(), v.data(), 24);
  w.AddTensor("t", DType::kF32, {2, 3}, bytes);
  const std::string path = TmpPath("rt.gguf");
  ASSERT_TRUE(w.Write(path).ok());
  auto g = GgufFile::Open(path);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ((*g)->version(), 3u);
  EXPECT_EQ(*(*g)->GetString("general.architecture"), "llama");
  EXPECT_EQ(*(*g)->GetInt("llama.block_count"), 3);
  EXPECT_FLOAT_EQ(static_cast<float>(*(*g)->GetFloat("llama.rope.freq_base")), 500000.f);
  EXPECT_EQ((*g)->Find("tokenizer.ggml.tokens")->strings, (std::vector<std::string>{"a", "bc", ""}));
  EXPECT_EQ((*g)->Find("ints")->numbers, (std::vector<double>{-1, 7}));
  const TensorView* t = (*g)->FindTensor("t");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(t->data, v.data(), 24), 0);
  EXPECT_FALSE((*g)->GetInt("general.architecture").ok());  // wrong type is an error, not a crash
  std::filesystem::remove(path);
}

TEST(GgufTest, ReadsTheSharedStoriesModel) {
  auto g = GgufFile::Open(testing::SharedModels() + "/stories260K.gguf");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(*(*g)->GetString("general.architecture"), "llama");
  EXPECT_EQ(*(*g)->GetInt("llama.block_count"), 5);
  EXPECT_EQ((*g)->FindTensor("token_embd.weight")->shape, (std::vector<int64_t>{512, 64}));
}

// Every malformation gets a Status naming the file and the problem.
TEST(GgufTest, RejectsCorruptFiles) {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  std::vector<uint8_t> bytes(64 * 4, 1);
  w.AddTensor("t", DType::kF32, {4, 16}, bytes);
  const std::string path = TmpPath("ok.gguf");
  ASSERT_TRUE(w.Write(path).ok());
  const auto good = ReadAll(path);
  std::filesystem::remove(path);
  auto parse = [](std::vector<uint8_t> b) { return GgufFile::Parse(b.data(), b.size(), "x.gguf").status(); };
  ASSERT_TRUE(parse(good).ok());

  auto bad_magic = good;
  bad_magic[0] = 'X';
  EXPECT_NE(parse(bad_magic).message().find("bad magic"), std::string::npos);
  EXPECT_NE(parse(bad_magic).message().find("x.gguf"), std::string::npos);

  for (size_t cut : {size_t{3}, size_t{10}, size_t{30}, good.size() - 1}) {
    auto trunc = std::vector<uint8_t>(good.begin(), good.begin() + cut);
    Status s = parse(trunc);
    EXPECT_FALSE(s.ok()) << cut;
  }
  auto trunc = std::vector<uint8_t>(good.begin(), good.end() - 8);
  EXPECT_NE(parse(trunc).message().find("past the end"), std::string::npos);

  auto version = good;
  version[4] = 9;
  EXPECT_NE(parse(version).message().find("version 9"), std::string::npos);

  // The tensor's ggml type id sits 12 bytes before the end of the tensor-info block; find it by its value 0 (f32)
  // right after the dims (16 and 4 as u64).
  auto unknown_type = good;
  const uint8_t dims[16] = {16, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0};
  auto it = std::search(unknown_type.begin(), unknown_type.end(), dims, dims + 16);
  ASSERT_NE(it, unknown_type.end());
  it[16] = 99;  // ggml type 99
  EXPECT_NE(parse(unknown_type).message().find("unsupported ggml type 99"), std::string::npos);

  auto huge_dim = good;
  it = std::search(huge_dim.begin(), huge_dim.end(), dims, dims + 16);
  it[7] = 0x7f;  // first dim ~ 2^62
  EXPECT_FALSE(parse(huge_dim).ok());

  auto far_offset = good;
  it = std::search(far_offset.begin(), far_offset.end(), dims, dims + 16);
  it[16 + 4 + 5] = 1;  // offset += 2^40
  EXPECT_NE(parse(far_offset).message().find("past the end"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer
