#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "format/safetensors.h"

namespace deepinfer {
namespace {

std::vector<uint8_t> Make(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> b(8 + header.size() + data_bytes, 0);
  uint64_t n = header.size();
  std::memcpy(b.data(), &n, 8);
  std::memcpy(b.data() + 8, header.data(), header.size());
  return b;
}

Status Parse(const std::vector<uint8_t>& b) { return SafetensorsFile::Parse(b.data(), b.size(), "m.safetensors").status(); }

TEST(SafetensorsTest, ParsesValidHeader) {
  auto b = Make(R"({"__metadata__":{"format":"pt"},"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]}})", 12);
  auto st = SafetensorsFile::Parse(b.data(), b.size(), "m.safetensors");
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  const auto& t = (*st)->tensors().at("w");
  EXPECT_EQ(t.dtype, DType::kBF16);
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
}

TEST(SafetensorsTest, RejectsMalformedFiles) {
  EXPECT_NE(Parse({1, 2, 3}).message().find("too small"), std::string::npos);
  auto big = Make("{}", 0);
  big[5] = 1;  // header length 2^40
  EXPECT_NE(Parse(big).message().find("exceeds the file"), std::string::npos);
  EXPECT_NE(Parse(Make("{not json", 0)).message().find("not a JSON object"), std::string::npos);
  EXPECT_NE(Parse(Make(R"({"w":{"dtype":"F8_E5M2","shape":[2],"data_offsets":[0,2]}})", 2)).message().find("unsupported dtype F8_E5M2"),
            std::string::npos);
  EXPECT_NE(Parse(Make(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", 8)).message().find("past the end"),
            std::string::npos);
  EXPECT_NE(Parse(Make(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8)).message().find("does not match shape"),
            std::string::npos);
  EXPECT_NE(Parse(Make(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,8]}})", 8)).message().find("bad shape"),
            std::string::npos);
  EXPECT_NE(Parse(Make(R"({"w":{"dtype":"F32"}})", 0)).message().find("needs dtype, shape and data_offsets"), std::string::npos);
  EXPECT_NE(Parse(Make(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8)).message().find("past the end"),
            std::string::npos);
}

TEST(SafetensorsTest, ShardedIndexLoadsAllShards) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("deepinfer_st_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<uint8_t> four(16, 0);
  ASSERT_TRUE(WriteSafetensors((dir / "a.safetensors").string(), {{"x", DType::kF32, {4}, four}}).ok());
  ASSERT_TRUE(WriteSafetensors((dir / "b.safetensors").string(), {{"y", DType::kF32, {2, 2}, four}}).ok());
  std::ofstream(dir / "model.safetensors.index.json") << R"({"weight_map":{"x":"a.safetensors","y":"b.safetensors"}})";
  auto m = SafetensorsModel::OpenDir(dir.string());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_NE((*m)->Find("x"), nullptr);
  EXPECT_NE((*m)->Find("y"), nullptr);
  std::ofstream(dir / "model.safetensors.index.json") << R"({"weight_map":{"x":"../../etc/passwd"}})";
  EXPECT_NE(SafetensorsModel::OpenDir(dir.string()).status().message().find("escapes"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace deepinfer
