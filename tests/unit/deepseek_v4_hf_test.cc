// DeepSeek-V4 HF checkpoints in DeepSeek's own format (the one llama.cpp's converter reads): make-tiny's HF
// directory (FP8 linear weights with E8M0 128x128 block scales, MXFP4 experts packed per expert, the MTP block's
// e_proj / h_proj and own hc head) loads into the weights of the GGUF beside it: the experts bitwise ggml's MXFP4
// blocks, the FP8 weights to the GGUF's f32 values, eh_proj = [e_proj | h_proj]. Checkpoints with a scale missing
// or of the wrong shape are refused with an error naming the tensor.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <unistd.h>

#include "format/safetensors.h"
#include "model/make_tiny.h"
#include "model/model.h"

namespace deepinfer {
namespace {
namespace fs = std::filesystem;

class DeepseekV4Hf : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    base_ = fs::temp_directory_path() / ("deepinfer_dsv4_hf_" + std::to_string(::getpid()));
    fs::remove_all(base_);
    TinySpec s;
    s.arch = Arch::kDeepseekV4;
    s.dtype = DType::kF8E4M3;
    s.expert_dtype = DType::kMXFP4;
    s.mtp = true;
    ASSERT_TRUE(MakeTinyModel(s, TinyFormat::kBoth, (base_ / "plain").string(), true).ok());
  }
  static void TearDownTestSuite() { fs::remove_all(base_); }

  // A copy of the tiny HF directory with its tensors edited by `edit` (return false to drop one).
  static fs::path Variant(const std::string& name, const std::function<bool(SafetensorsEntry&)>& edit) {
    const fs::path plain = base_ / "plain", dir = base_ / name;
    auto st = SafetensorsModel::OpenDir(plain.string());
    EXPECT_TRUE(st.ok());
    fs::create_directories(dir);
    std::vector<SafetensorsEntry> entries;
    for (const auto& [n, v] : (*st)->tensors()) {
      const uint8_t* p = static_cast<const uint8_t*>(v.data);
      SafetensorsEntry e{n, v.dtype, v.shape, std::vector<uint8_t>(p, p + v.nbytes)};
      if (edit(e)) entries.push_back(std::move(e));
    }
    EXPECT_TRUE(WriteSafetensors((dir / "model.safetensors").string(), entries).ok());
    for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"}) fs::copy_file(plain / f, dir / f);
    return dir;
  }

  // Loading `dir` fails with a message holding every one of `needles`.
  static void ExpectRefused(const fs::path& dir, std::initializer_list<const char*> needles) {
    auto m = LoadModelFromPath(dir.string());
    ASSERT_FALSE(m.ok()) << dir;
    for (const char* n : needles) EXPECT_NE(m.status().message().find(n), std::string::npos) << m.status().ToString();
  }

  static std::vector<float> Rows(const TensorView& t) {
    std::vector<float> out(static_cast<size_t>(t.rows() * t.cols()));
    for (int64_t r = 0; r < t.rows(); ++r) t.RowToF32(r, out.data() + r * t.cols());
    return out;
  }

  static fs::path base_;
};
fs::path DeepseekV4Hf::base_;

TEST_F(DeepseekV4Hf, LoadsTheGgufsWeights) {
  auto hf = LoadModelFromPath((base_ / "plain").string());
  auto gg = LoadModelFromPath((base_ / "plain" / "model.gguf").string());
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  ASSERT_TRUE(gg.ok()) << gg.status().ToString();
  const Model &a = **hf, &b = **gg;
  ASSERT_EQ(a.layers.size(), b.layers.size());
  ASSERT_EQ(a.mtp.size(), 1u);
  ASSERT_EQ(b.mtp.size(), 1u);
  auto same_values = [&](const TensorView& x, const TensorView& y, const char* what) {
    ASSERT_EQ(x.shape, y.shape) << what;
    EXPECT_EQ(Rows(x), Rows(y)) << what;
  };
  for (size_t l = 0; l < a.layers.size(); ++l) {
    const LayerWeights &x = a.layers[l], &y = b.layers[l];
    EXPECT_EQ(x.dsv4.wq_a.dtype, DType::kF8E4M3);  // FP8 with its E8M0 scales as f32 block scales
    ASSERT_NE(x.dsv4.wq_a.block_scale, nullptr);
    same_values(x.dsv4.wq_a, y.dsv4.wq_a, "wq_a");
    same_values(x.dsv4.wo_b, y.dsv4.wo_b, "wo_b");
    same_values(x.moe.shared.down, y.moe.shared.down, "shared down");
    EXPECT_EQ(x.moe.tid2eid, y.moe.tid2eid);
    for (size_t e = 0; e < x.moe.gate.size(); ++e)
      for (auto [p, q] : {std::pair{&x.moe.gate[e], &y.moe.gate[e]}, std::pair{&x.moe.up[e], &y.moe.up[e]},
                          std::pair{&x.moe.down[e], &y.moe.down[e]}}) {
        ASSERT_EQ(p->dtype, DType::kMXFP4);
        ASSERT_EQ(p->nbytes, q->nbytes);
        EXPECT_EQ(std::memcmp(p->data, q->data, p->nbytes), 0) << "layer " << l << " expert " << e;  // ggml's blocks
      }
  }
  same_values(a.mtp[0].eh_proj, b.mtp[0].eh_proj, "eh_proj");  // [e_proj | h_proj]
  EXPECT_EQ(a.mtp[0].hc_head.fn, a.hc_head.fn);  // the block's own, written equal to the model's
  EXPECT_EQ(b.mtp[0].hc_head.fn, b.hc_head.fn);  // GGUF: the model's stands in
  EXPECT_EQ(a.mtp[0].embed.data, a.tok_embd.data);  // V4's block has no embedding or head of its own
}

TEST_F(DeepseekV4Hf, BrokenScalesAreRefused) {
  ExpectRefused(Variant("no_fp8_scale", [](SafetensorsEntry& e) { return e.name != "layers.2.attn.wq_a.scale"; }),
                {"layers.2.attn.wq_a.weight", "layers.2.attn.wq_a.scale"});
  ExpectRefused(Variant("fp8_scale_shape", [](SafetensorsEntry& e) {
                  if (e.name == "layers.0.attn.wkv.scale") {  // {1, 2} -> {2, 1}
                    e.shape = {2, 1};
                  }
                  return true;
                }),
                {"layers.0.attn.wkv.scale", "{1, 2}"});
  ExpectRefused(Variant("fp8_scale_f32", [](SafetensorsEntry& e) {
                  if (e.name == "layers.1.ffn.shared_experts.w2.scale") {
                    e.dtype = DType::kF32;
                    e.bytes.resize(e.bytes.size() * 4);
                  }
                  return true;
                }),
                {"layers.1.ffn.shared_experts.w2.scale", "E8M0"});
  ExpectRefused(Variant("no_expert_scale", [](SafetensorsEntry& e) { return e.name != "layers.3.ffn.experts.5.w2.scale"; }),
                {"layers.3.ffn.experts.5.w2.scale"});
  ExpectRefused(Variant("expert_scale_shape", [](SafetensorsEntry& e) {
                  if (e.name == "layers.4.ffn.experts.0.w1.scale") {  // [128, 8] -> [64, 16]
                    e.shape = {64, 16};
                  }
                  return true;
                }),
                {"layers.4.ffn.experts.0.w1.scale", "[128, 8]"});
  ExpectRefused(Variant("no_h_proj", [](SafetensorsEntry& e) { return e.name != "mtp.0.h_proj.weight"; }), {"mtp.0.h_proj.weight"});
}

}  // namespace
}  // namespace deepinfer
