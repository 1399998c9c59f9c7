// HF gpt-oss checkpoints (GptOssForCausalLM): the MXFP4 repack from HF's packing (transformers'
// integrations/mxfp4.py) into ggml's block_mxfp4, against references written from each side's definition; and a
// tiny model written both ways by make-tiny (fused, interleaved gate_up_proj; MXFP4 `_blocks` / `_scales` or float
// x @ W tensors) loads into the same tensors and gives bitwise the same logits, and `convert` of the HF directory
// writes the GGUF make-tiny wrote.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <functional>
#include <ostream>

#include "format/gguf.h"
#include "format/safetensors.h"
#include "model/convert.h"
#include "model/make_tiny.h"
#include "model/model.h"
#include "model/transformer.h"
#include "tensor/mxfp4_hf.h"
#include "quant_test_util.h"

namespace deepinfer {
namespace {
namespace fs = std::filesystem;

// transformers' FP4_VALUES (integrations/mxfp4.py): the e2m1 code -> value table, sign in bit 3.
constexpr double kHfLut[16] = {+0.0, +0.5, +1.0, +1.5, +2.0, +3.0, +4.0, +6.0,
                               -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0};

// convert_moe_packed_tensors for one block, in double: sub[0::2] = lut[byte & 0xF], sub[1::2] = lut[byte >> 4],
// times 2^(scale - 127) (torch.ldexp with exp = scales - 127).
void HfDequantRef(const uint8_t* blk, uint8_t scale, double* out) {
  for (int j = 0; j < 16; ++j) {
    out[2 * j] = std::ldexp(kHfLut[blk[j] & 0xF], scale - 127);
    out[2 * j + 1] = std::ldexp(kHfLut[blk[j] >> 4], scale - 127);
  }
}

// Random HF blocks from the shared generator: each 17-byte mxfp4 draw read as [scale, 16 HF bytes] (the
// generator keeps the exponent below 0xFF, OCP's NaN; `moderate` keeps values finite in f32).
void RandomHfBlocks(size_t nb, uint32_t seed, bool moderate, std::vector<uint8_t>* blocks, std::vector<uint8_t>* scales) {
  const std::vector<uint8_t> raw = testing::RandomBlocks(DType::kMXFP4, nb, seed, moderate);
  blocks->resize(nb * 16);
  scales->resize(nb);
  for (size_t b = 0; b < nb; ++b) {
    (*scales)[b] = raw[b * 17];
    std::memcpy(blocks->data() + b * 16, raw.data() + b * 17 + 1, 16);
  }
}

TEST(GptOssHfMxfp4, RepackedBlocksDequantizeToHfValues) {
  for (const bool moderate : {true, false}) {
    constexpr size_t kBlocks = 4096;
    std::vector<uint8_t> hb, hs;
    RandomHfBlocks(kBlocks, moderate ? 11 : 12, moderate, &hb, &hs);
    std::vector<BlockMXFP4> ours(kBlocks);
    HfMxfp4ToBlocks(hb.data(), hs.data(), ours.data(), kBlocks);
    std::vector<float> got(kBlocks * 32);
    DequantizeRow(DType::kMXFP4, ours.data(), got.data(), got.size());
    double want[32];
    for (size_t b = 0; b < kBlocks; ++b) {
      HfDequantRef(hb.data() + b * 16, hs[b], want);
      for (int k = 0; k < 32; ++k)  // f32 of HF's exact value (inf where f32 overflows, as ggml's); -0 == +0
        ASSERT_EQ(got[b * 32 + k], static_cast<float>(want[k])) << "block " << b << " element " << k << " scale " << int(hs[b]);
    }
    // The exponent byte is carried over as it is.
    for (size_t b = 0; b < kBlocks; ++b) ASSERT_EQ(ours[b].e, hs[b]);
  }
}

// llama.cpp's converter (GptOssModel.transform_nibble_layout), step by step as written there on a 16-byte block.
void LlamaCppTransformNibbleLayout(const uint8_t* in, uint8_t* out) {
  uint8_t t[16];
  for (int j = 0; j < 16; ++j) t[j] = static_cast<uint8_t>(((in[j] & 0x0F) << 4) | ((in[j] & 0xF0) >> 4));  // swap nibbles
  uint8_t a[16], b[16];  // blk_a, blk_b = chunk(2): a from t[0..7], b from t[8..15], each element split in two
  for (int j = 0; j < 8; ++j) {
    a[2 * j] = t[j] & 0xF0;
    a[2 * j + 1] = static_cast<uint8_t>(t[j] << 4);
    b[2 * j] = t[8 + j] >> 4;
    b[2 * j + 1] = t[8 + j] & 0x0F;
  }
  for (int j = 0; j < 16; ++j) {
    const uint8_t o = a[j] | b[j];
    out[j] = static_cast<uint8_t>(((o & 0xF0) >> 4) | ((o & 0x0F) << 4));  // swap once more
  }
}

TEST(GptOssHfMxfp4, RepackIsLlamaCppsConverterBitForBit) {
  constexpr size_t kBlocks = 4096;
  std::vector<uint8_t> hb, hs;
  RandomHfBlocks(kBlocks, 21, false, &hb, &hs);
  std::vector<BlockMXFP4> ours(kBlocks);
  HfMxfp4ToBlocks(hb.data(), hs.data(), ours.data(), kBlocks);
  for (size_t b = 0; b < kBlocks; ++b) {
    uint8_t want[17];  // repack_mxfp4: concat(scale, transformed blocks)
    want[0] = hs[b];
    LlamaCppTransformNibbleLayout(hb.data() + b * 16, want + 1);
    ASSERT_EQ(std::memcmp(&ours[b], want, 17), 0) << "block " << b;
  }
  // And the inverse (make-tiny's HF writer) undoes it.
  std::vector<uint8_t> back_b(kBlocks * 16), back_s(kBlocks);
  BlocksToHfMxfp4(ours.data(), back_b.data(), back_s.data(), kBlocks);
  EXPECT_EQ(back_b, hb);
  EXPECT_EQ(back_s, hs);
}

// A tiny gpt-oss written both ways (make-tiny --format both).
struct TinyCase {
  const char* name;
  DType dtype, expert_dtype;
};
// Test names (ctest's too) show the case's name, not its bytes.
void PrintTo(const TinyCase& c, std::ostream* os) { *os << c.name; }

class GptOssHfModel : public ::testing::TestWithParam<TinyCase> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("deepinfer_gptoss_hf_" + std::to_string(::getpid()) + "_" + GetParam().name);
    fs::remove_all(dir_);
    TinySpec s;
    s.arch = Arch::kGptOss;
    s.vocab = 300;
    s.hidden = 64;
    s.layers = 3;
    s.heads = 8;
    s.kv_heads = 2;
    s.head_dim = 16;
    s.experts = 8;
    s.experts_used = 4;
    s.moe_intermediate = 64;
    s.window = 5;
    s.rope_theta = 150000;
    s.dtype = GetParam().dtype;
    s.expert_dtype = GetParam().expert_dtype;
    Status st = MakeTinyModel(s, TinyFormat::kBoth, dir_.string(), true);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_P(GptOssHfModel, HfAndGgufHoldTheSameExpertsAndGiveBitwiseTheSameLogits) {
  auto hf = LoadModelFromPath(dir_.string());
  auto gg = LoadModelFromPath((dir_ / "model.gguf").string());
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  ASSERT_TRUE(gg.ok()) << gg.status().ToString();
  EXPECT_EQ((*hf)->config.Summary(), (*gg)->config.Summary());
  const DType want_type = GetParam().expert_dtype == DType::kInvalid ? GetParam().dtype : GetParam().expert_dtype;
  for (int l = 0; l < (*hf)->config.n_layers; ++l) {
    const MoeWeights& a = (*hf)->layers[l].moe;
    const MoeWeights& b = (*gg)->layers[l].moe;
    for (auto [x, y] : {std::pair{&a.gate, &b.gate}, std::pair{&a.up, &b.up}, std::pair{&a.down, &b.down}}) {
      ASSERT_EQ(x->size(), y->size());
      for (size_t e = 0; e < x->size(); ++e) {
        const TensorView &u = (*x)[e], &v = (*y)[e];
        ASSERT_EQ(u.dtype, want_type);
        ASSERT_EQ(u.dtype, v.dtype);
        ASSERT_EQ(u.shape, v.shape);
        ASSERT_EQ(u.nbytes, v.nbytes);
        ASSERT_EQ(std::memcmp(u.data, v.data, u.nbytes), 0) << "layer " << l << " expert " << e;
      }
    }
    EXPECT_EQ(a.gate_bias, b.gate_bias);
    EXPECT_EQ(a.up_bias, b.up_bias);
    EXPECT_EQ(a.down_bias, b.down_bias);
    EXPECT_EQ(a.router_bias, b.router_bias);
  }
  // Logits at every position of a prompt longer than the window (so windowed and full layers differ).
  std::vector<int32_t> toks;
  for (int i = 0; i < 24; ++i) toks.push_back((i * 37 + 5) % 290);
  const int n = static_cast<int>(toks.size()), V = (*hf)->config.vocab_size;
  auto logits = [&](const Model& m) {
    std::vector<float> out(static_cast<size_t>(n) * V);
    Transformer t(m, 64, nullptr);
    SequenceKvCache kv(m.config.kv_layout(), 32);
    EXPECT_TRUE(t.Forward(toks.data(), n, 0, kv, out.data(), true).ok());
    return out;
  };
  const std::vector<float> a = logits(**hf), b = logits(**gg);
  ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  bool finite = true;
  for (float x : a) finite = finite && std::isfinite(x);
  EXPECT_TRUE(finite);
}

// `convert` of the HF directory writes make-tiny's GGUF: every tensor the same type, shape and bytes (MXFP4
// experts passed through as llama.cpp's converter does, float experts de-interleaved and transposed).
TEST_P(GptOssHfModel, ConvertedHfDirIsTheTinyGguf) {
  const std::string out = (dir_ / "converted.gguf").string();
  ConvertOptions opts;
  opts.progress = false;
  Status st = ConvertHfToGguf(dir_.string(), out, opts);
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto want = GgufFile::Open((dir_ / "model.gguf").string());
  auto got = GgufFile::Open(out);
  ASSERT_TRUE(want.ok() && got.ok());
  int experts = 0;
  for (const auto& [name, t] : (*want)->tensors()) {
    const TensorView* g = (*got)->FindTensor(name);
    ASSERT_NE(g, nullptr) << name;
    EXPECT_EQ(DTypeName(g->dtype), std::string(DTypeName(t.dtype))) << name;
    EXPECT_EQ(g->shape, t.shape) << name;
    ASSERT_EQ(g->nbytes, t.nbytes) << name;
    EXPECT_EQ(std::memcmp(g->data, t.data, t.nbytes), 0) << name;
    experts += name.find("_exps.weight") != std::string::npos;
  }
  EXPECT_EQ(experts, 3 * 3);
  // The released configs' rope_scaling.truncate: false (which GGUF cannot express; llama.cpp rounds) converts as
  // llama.cpp's converter converts it: the same tensors.
  {
    std::ifstream in(dir_ / "config.json");
    nlohmann::json cfg = nlohmann::json::parse(in);
    cfg["rope_scaling"]["truncate"] = false;
    std::ofstream(dir_ / "config.json") << cfg.dump();
  }
  const std::string out2 = (dir_ / "converted_untruncated.gguf").string();
  st = ConvertHfToGguf(dir_.string(), out2, opts);
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto got2 = GgufFile::Open(out2);
  ASSERT_TRUE(got2.ok());
  for (const auto& [name, t] : (*want)->tensors()) {
    const TensorView* g = (*got2)->FindTensor(name);
    ASSERT_NE(g, nullptr) << name;
    ASSERT_EQ(g->nbytes, t.nbytes) << name;
    EXPECT_EQ(std::memcmp(g->data, t.data, t.nbytes), 0) << name;
  }
}

// Re-saves that flatten the blocks to [E, rows, cols / 2] load the same bytes; a `_blocks` without its `_scales`,
// or blocks of the wrong width, are refused naming the tensor.
TEST(GptOssHfMxfp4, FlattenedBlocksLoadAndBrokenOnesAreRefused) {
  const fs::path base = fs::temp_directory_path() / ("deepinfer_gptoss_hf_edit_" + std::to_string(::getpid()));
  fs::remove_all(base);
  TinySpec s;
  s.arch = Arch::kGptOss;
  s.vocab = 300;
  s.hidden = 64;
  s.layers = 2;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 16;
  s.experts = 4;
  s.experts_used = 2;
  s.moe_intermediate = 64;
  s.expert_dtype = DType::kMXFP4;
  const fs::path plain = base / "plain";
  ASSERT_TRUE(MakeTinyModel(s, TinyFormat::kBoth, plain.string(), true).ok());
  auto st = SafetensorsModel::OpenDir(plain.string());
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  // A copy of the directory with its tensors edited by `edit` (return false to drop one).
  auto variant = [&](const std::string& name, const std::function<bool(SafetensorsEntry&)>& edit) {
    const fs::path dir = base / name;
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
  };
  auto ends = [](const std::string& n, const std::string& suffix) {
    return n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  const fs::path flat = variant("flat", [&](SafetensorsEntry& e) {
    if (ends(e.name, "_blocks")) e.shape = {e.shape[0], e.shape[1], e.shape[2] * 16};
    return true;
  });
  auto a = LoadModelFromPath(plain.string());
  auto b = LoadModelFromPath(flat.string());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  for (int l = 0; l < s.layers; ++l)
    for (int e = 0; e < s.experts; ++e)
      for (auto [x, y] : {std::pair{&(*a)->layers[l].moe.up[e], &(*b)->layers[l].moe.up[e]},
                          std::pair{&(*a)->layers[l].moe.down[e], &(*b)->layers[l].moe.down[e]}}) {
        ASSERT_EQ(x->nbytes, y->nbytes);
        ASSERT_EQ(std::memcmp(x->data, y->data, x->nbytes), 0);
      }
  const fs::path no_scales = variant("no_scales", [&](SafetensorsEntry& e) { return e.name != "model.layers.1.mlp.experts.down_proj_scales"; });
  auto c = LoadModelFromPath(no_scales.string());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("model.layers.1.mlp.experts.down_proj_scales"), std::string::npos) << c.status().ToString();
  const fs::path narrow = variant("narrow", [&](SafetensorsEntry& e) {
    if (e.name == "model.layers.0.mlp.experts.gate_up_proj_blocks") {
      e.shape[2] = 1;  // half the row's blocks
      e.bytes.resize(e.bytes.size() / 2);
    }
    return true;
  });
  auto d = LoadModelFromPath(narrow.string());
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("gate_up_proj_blocks"), std::string::npos) << d.status().ToString();
  fs::remove_all(base);
}

// The process's resident-set peak (VmHWM) and current size (VmRSS), in bytes.
int64_t ProcStatusBytes(const char* field) {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(std::strlen(field))) * 1024;
  return -1;
}

// HF experts are repacked straight into the weights buffer (Model::pending_weights), so loading holds them once
// beside the file's pages, not twice (a repacked copy, then the copy of it): the resident peak while loading stays
// under file + 1.5 x the experts (the old path reached file + 2 x). The mmap placement and sharding build them into
// a buffer of their own; that path gives the same bytes.
TEST(GptOssHfMxfp4, ExpertsAreBuiltOnceWhileLoading) {
  const fs::path dir = fs::temp_directory_path() / ("deepinfer_gptoss_peak_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  TinySpec s;
  s.arch = Arch::kGptOss;
  s.vocab = 300;
  s.hidden = 512;
  s.layers = 4;
  s.heads = 8;
  s.kv_heads = 2;
  s.head_dim = 64;
  s.experts = 32;
  s.experts_used = 4;
  s.moe_intermediate = 1024;
  s.window = 5;
  s.dtype = DType::kBF16;
  s.expert_dtype = DType::kMXFP4;
  ASSERT_TRUE(MakeTinyModel(s, TinyFormat::kHf, dir.string(), true).ok());
  // gate, up (hidden -> moe_intermediate each) and down per expert and layer, 17 bytes per 32 weights
  const int64_t expert_bytes = int64_t{s.layers} * s.experts * 3 * s.hidden * s.moe_intermediate / 32 * 17;
  int64_t file_bytes = 0;
  for (const auto& e : fs::directory_iterator(dir)) file_bytes += static_cast<int64_t>(e.file_size());
  {
    std::ofstream reset("/proc/self/clear_refs");  // "5": the peak restarts from the current resident set
    reset << "5";
    reset.close();
    ASSERT_TRUE(reset.good()) << "cannot reset the resident-set peak (/proc/self/clear_refs)";
  }
  const int64_t rss_before = ProcStatusBytes("VmRSS:");
  ASSERT_LE(ProcStatusBytes("VmHWM:"), rss_before + (int64_t{8} << 20)) << "the peak was not reset";
  LoadOptions copy;
  copy.placement = WeightPlacement::kCopy;
  copy.progress = false;
  auto m = LoadModelFromPath(dir.string(), copy);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const int64_t peak = ProcStatusBytes("VmHWM:") - rss_before;
  std::printf("loading peaked %.1f MB over the resident set before (file %.1f MB, experts %.1f MB)\n", peak / 1e6,
              file_bytes / 1e6, expert_bytes / 1e6);
  EXPECT_LT(peak, file_bytes + expert_bytes * 3 / 2)
      << "loading peaked " << peak / 1e6 << " MB over " << rss_before / 1e6 << " MB (file " << file_bytes / 1e6
      << " MB, experts " << expert_bytes / 1e6 << " MB)";
  EXPECT_TRUE((*m)->pending_weights.empty());
  EXPECT_TRUE((*m)->shard_buffers.empty());
  LoadOptions mapped;
  mapped.placement = WeightPlacement::kMmap;
  mapped.progress = false;
  auto mm = LoadModelFromPath(dir.string(), mapped);
  ASSERT_TRUE(mm.ok()) << mm.status().ToString();
  EXPECT_TRUE((*mm)->pending_weights.empty());
  int compared = 0;
  for (int l = 0; l < s.layers; ++l) {
    const MoeWeights& a = (*m)->layers[l].moe;
    const MoeWeights& b = (*mm)->layers[l].moe;
    for (auto [x, y] : {std::pair{&a.gate, &b.gate}, std::pair{&a.up, &b.up}, std::pair{&a.down, &b.down}}) {
      ASSERT_EQ(x->size(), y->size());
      for (size_t e = 0; e < x->size(); ++e, ++compared) {
        ASSERT_TRUE((*x)[e].data && (*y)[e].data);
        ASSERT_EQ((*x)[e].nbytes, (*y)[e].nbytes);
        ASSERT_EQ(std::memcmp((*x)[e].data, (*y)[e].data, (*x)[e].nbytes), 0) << "layer " << l << " expert " << e;
      }
    }
  }
  EXPECT_EQ(compared, s.layers * s.experts * 3);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Experts, GptOssHfModel,
                         ::testing::Values(TinyCase{"f32", DType::kF32, DType::kInvalid},
                                           TinyCase{"mxfp4_experts", DType::kF32, DType::kMXFP4},
                                           TinyCase{"bf16", DType::kBF16, DType::kInvalid}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace deepinfer
