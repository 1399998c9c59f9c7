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
// Quantized tensors: any per-tensor mix of block types loads; a truncated one, one of a type deepinfer does not
// read and one whose rows split a block fail with errors naming the tensor.
TEST(GgufTest, QuantizedTensorsAndTheirErrors) {
  auto write = [](DType second, int64_t cols, int cut) {
    GgufWriter w;
    w.SetString("general.architecture", "llama");
    w.AddTensor("token_embd.weight", DType::kQ6_K, {2, 256}, std::vector<uint8_t>(2 * 210, 7));
    const size_t bytes = static_cast<size_t>(3 * cols / GetDTypeInfo(second).block_elems * GetDTypeInfo(second).block_bytes);
    w.AddTensor("blk.0.ffn_down.weight", second, {3, cols}, std::vector<uint8_t>(bytes, 9));
    const std::string path = TmpPath("quant.gguf");
    EXPECT_TRUE(w.Write(path).ok());
    auto b = ReadAll(path);
    std::filesystem::remove(path);
    b.resize(b.size() - cut);
    return b;
  };
  auto parse = [](const std::vector<uint8_t>& b) { return GgufFile::Parse(b.data(), b.size(), "q.gguf"); };
  for (DType t : {DType::kQ4_K, DType::kQ5_K, DType::kQ2_K, DType::kQ3_K, DType::kIQ4_XS, DType::kQ4_1, DType::kQ5_0,
                  DType::kQ5_1, DType::kIQ4_NL, DType::kMXFP4}) {
    auto ok = write(t, 512, 0);
    auto g = parse(ok);
    ASSERT_TRUE(g.ok()) << DTypeName(t) << ": " << g.status().ToString();
    const TensorView* e = (*g)->FindTensor("token_embd.weight");
    const TensorView* d = (*g)->FindTensor("blk.0.ffn_down.weight");
    ASSERT_TRUE(e && d);
    EXPECT_EQ(e->dtype, DType::kQ6_K);
    EXPECT_EQ(d->dtype, t);
    EXPECT_EQ(d->nbytes, DTypeBytes(t, 3 * 512));
    EXPECT_EQ(d->row_bytes(), DTypeBytes(t, 512));
  }
  const std::string trunc = parse(write(DType::kQ4_K, 512, 100)).status().message();
  EXPECT_NE(trunc.find("'blk.0.ffn_down.weight'"), std::string::npos) << trunc;
  EXPECT_NE(trunc.find("truncated"), std::string::npos) << trunc;
  // A q4_K tensor header claiming rows of 128 elements: half a super-block.
  auto split = write(DType::kQ4_0, 128, 0);
  const uint8_t dims[16] = {128, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0};
  auto it = std::search(split.begin(), split.end(), dims, dims + 16);
  ASSERT_NE(it, split.end());
  it[16] = 12;  // ggml type q4_K
  const std::string msg = parse(split).status().message();
  EXPECT_NE(msg.find("'blk.0.ffn_down.weight' row size 128 is not a multiple of q4_K's block size 256"), std::string::npos) << msg;
  it[16] = 16;  // iq2_xxs: not read by deepinfer
  const std::string unsup = parse(split).status().message();
  EXPECT_NE(unsup.find("'blk.0.ffn_down.weight' has unsupported ggml type 16 (iq2_xxs)"), std::string::npos) << unsup;
}

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
