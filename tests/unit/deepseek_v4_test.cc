// DeepSeek-V4 configuration: the published V4-Flash shape parses into the numbers its config states, its KV
// layout has the planes this engine stores per position (written out by hand below, not recomputed by the code
// under test), and the configurations llama.cpp's loader refuses are refused with an error naming the problem,
// from config.json and from GGUF metadata alike.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "format/gguf.h"
#include "kv/kv_groups.h"
#include "kv/paged_kv_cache.h"
#include "model/model.h"

namespace deepinfer {
namespace {

// V4-Flash as ../shared/research/deepseek_v4.md section 2 gives it (layers 0-1 window only, even layers 2..42
// CSA, odd layers 3..41 HCA).
nlohmann::json FlashConfig() {
  std::vector<int> ratios = {0, 0};
  for (int l = 2; l < 43; ++l) ratios.push_back(l % 2 == 0 ? 4 : 128);
  return {{"architectures", {"DeepseekV4ForCausalLM"}}, {"model_type", "deepseek_v4"}, {"vocab_size", 129280},
          {"hidden_size", 4096}, {"num_hidden_layers", 43}, {"num_attention_heads", 64}, {"num_key_value_heads", 1},
          {"head_dim", 512}, {"qk_rope_head_dim", 64}, {"q_lora_rank", 1024}, {"o_groups", 8}, {"o_lora_rank", 1024},
          {"sliding_window", 128}, {"compress_ratios", ratios}, {"compress_rope_theta", 160000.0},
          {"index_n_heads", 64}, {"index_head_dim", 128}, {"index_topk", 512}, {"n_routed_experts", 256},
          {"num_experts_per_tok", 6}, {"n_shared_experts", 1}, {"moe_intermediate_size", 2048},
          {"intermediate_size", 2048}, {"routed_scaling_factor", 1.5}, {"norm_topk_prob", true},
          {"scoring_func", "sqrtsoftplus"}, {"swiglu_limit", 10.0}, {"hc_mult", 4}, {"hc_sinkhorn_iters", 20},
          {"hc_eps", 1e-6}, {"num_hash_layers", 3}, {"max_position_embeddings", 1048576}, {"rms_norm_eps", 1e-6},
          {"rope_theta", 10000.0},
          {"rope_scaling", {{"type", "yarn"}, {"factor", 16.0}, {"original_max_position_embeddings", 65536}}}};
}

TEST(DeepseekV4Config, FlashShapeAndKvPlanes) {
  auto c = ParseHfConfig(FlashConfig().dump(), "V4-Flash/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, Arch::kDeepseekV4);
  EXPECT_TRUE(c->is_dsv4());
  EXPECT_EQ(c->dsv4.hc, 4);
  EXPECT_EQ(c->shared_ffn, 2048);
  EXPECT_EQ(c->dsv4.swiglu_limit.size(), 43u);
  // Per position: 43 raw rows; a CSA layer's compressor inputs (4 x 512 + 4 x 128 floats = 5 planes of 512), its
  // compressed row and indexer key; an HCA layer's inputs (2 x 512 = 2 planes) and compressed row.
  const KvLayout layout = c->kv_layout();
  EXPECT_EQ(layout.num_layers, 43 + 21 * (5 + 2) + 20 * (2 + 1));
  EXPECT_EQ(layout.k_elems, 512);
  EXPECT_EQ(layout.v_elems, 0);
  const std::vector<int> windows = c->kv_layer_windows();
  int full = 0, w128 = 0, w8 = 0;
  for (int w : windows) full += w == 0, w128 += w == 128, w8 += w == 8;
  EXPECT_EQ(full, 21 * 2 + 20);         // what grows with the context: 62 planes of 512 bf16 = 63488 B per token
  EXPECT_EQ(w8, 21 * 5);                // CSA compressor inputs: the block and the previous one
  EXPECT_EQ(w128, 43 + 20 * 2);         // raw windows (W = 128) and HCA compressor inputs
  EXPECT_EQ(PagedKvCache::BytesPerToken(layout, DType::kBF16), size_t{250} * 512 * 2);

  // The engine's layout packs the sparse layers. Blocks of 16: a CSA compressed row takes 4 rows of 512 per block
  // (4 to a plane of 16 x 512), an indexer key 4 of 128 and an HCA row 1 of 512 (16 to a plane each): 21 x 2048 +
  // 41 x 512 = 64000 elements, 8 planes. The windowed kinds keep a plane per layer: 105 (W = 8) and 83 (W = 128)
  // planes, so P = 8 and the groups are 1 + 14 + 11. What grows with the context is the full group's page per 16
  // tokens: 8 planes of 512 bf16 = 8192 B per token (63488 unpacked; ~6880 in llama.cpp's layout at f16).
  const KvLayout packed = GroupKvLayout(layout, windows, 16);
  EXPECT_TRUE(packed.packed());
  EXPECT_EQ(packed.num_planes(), 8);
  EXPECT_EQ(packed.num_groups(), 26);
  EXPECT_EQ(packed.window(0), 0);
  EXPECT_EQ(packed.window(1), 8);
  EXPECT_EQ(packed.window(25), 128);
  EXPECT_EQ(PaddingPlanes(packed), 7 + 5);
  EXPECT_EQ(PagedKvCache::BytesPerToken(packed, DType::kBF16), size_t{8192});
  // --swa-full packs the same sparse layers into one group: 43 + 105 + 40 planes of every position, plus 8.
  const KvLayout one = GroupKvLayout(layout, std::vector<int>(windows.size(), 0), 16);
  EXPECT_EQ(one.num_groups(), 1);
  EXPECT_EQ(one.num_planes(), 43 + 105 + 40 + 8);

  // --speculative mtp (one MTP block): its K=V rows are one more W = 128 plane (Dsv4Layout(true)), the 84th of
  // that kind, which takes one of its padding planes: still 26 groups of 8, the same bytes per token, and the
  // layout without MTP is unchanged.
  ModelConfig m = *c;
  m.n_mtp = 1;
  const std::vector<int> mtp_windows = m.kv_layer_windows(true);
  EXPECT_EQ(mtp_windows.size(), windows.size() + 1);
  EXPECT_EQ(mtp_windows.back(), 128);
  EXPECT_EQ(m.kv_layout().num_layers, layout.num_layers);
  EXPECT_EQ(m.kv_layer_windows().size(), windows.size());
  const KvLayout with_mtp = GroupKvLayout(m.Dsv4Layout(true), mtp_windows, 16);
  EXPECT_EQ(with_mtp.num_layers, layout.num_layers + 1);
  EXPECT_EQ(with_mtp.num_planes(), 8);
  EXPECT_EQ(with_mtp.num_groups(), 26);
  EXPECT_EQ(with_mtp.window(with_mtp.group_of(with_mtp.num_layers - 1)), 128);
  EXPECT_EQ(PaddingPlanes(with_mtp), 7 + 4);
  EXPECT_EQ(PagedKvCache::BytesPerToken(with_mtp, DType::kBF16), size_t{8192});
}

// Every packed layer's rows stay inside their block's region of their plane and never share bytes with another
// layer's: each layer writes a distinct row at every position that stores one, over several blocks, and every
// row reads back as written. Blocks of 6 (not a multiple of 4: a block holds one or two CSA rows) and of 16.
TEST(DeepseekV4Config, PackedRowsNeverAlias) {
  auto c = ParseHfConfig(FlashConfig().dump(), "V4-Flash/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const KvLayout base = c->kv_layout();
  for (const int bs : {6, 16}) {
    const KvLayout layout = GroupKvLayout(base, c->kv_layer_windows(), bs);
    ASSERT_TRUE(layout.packed());
    // 128 positions (one HCA row); each group its own blocks, position p of group g in block g x per + (per - 1 -
    // p / bs) (reversed, so a slot is not its position).
    const int positions = 128, per = (positions + bs - 1) / bs;
    auto kv = PagedKvCache::Create(layout, per * layout.num_groups(), bs, DType::kF32);
    ASSERT_TRUE(kv.ok()) << kv.status().ToString();
    auto slot = [&](int l, int p) { return (layout.group_of(l) * per + per - 1 - p / bs) * bs + p % bs; };
    auto stores = [&](int l, int p) { return (p + 1) % layout.ratio_of(l) == 0; };
    // A distinct f32 bit pattern per (layer < 256, position < 128, element < 512), finite (exponent >= 128).
    auto value = [](int l, int p, int e) {
      const uint32_t bits = 0x40000000u | static_cast<uint32_t>(l) << 16 | static_cast<uint32_t>(p) << 9 | static_cast<uint32_t>(e);
      float f;
      std::memcpy(&f, &bits, sizeof f);
      return f;
    };
    std::vector<float> row(512);
    for (int l = 0; l < layout.num_layers; ++l)
      for (int p = 0; p < positions; ++p) {
        if (!stores(l, p)) continue;
        for (int e = 0; e < layout.elems_of(l); ++e) row[e] = value(l, p, e);
        const int32_t s = slot(l, p);
        (*kv)->Write(l, row.data(), nullptr, &s, 1);
      }
    int64_t checked = 0, bad = 0;
    for (int l = 0; l < layout.num_layers; ++l)
      for (int p = 0; p < positions; ++p) {
        if (!stores(l, p)) continue;
        const float* got = reinterpret_cast<const float*>((*kv)->KRow(l, slot(l, p)));
        for (int e = 0; e < layout.elems_of(l); ++e, ++checked) {
          const float want = value(l, p, e);
          bad += std::memcmp(&got[e], &want, sizeof want) != 0;
        }
      }
    EXPECT_EQ(bad, 0) << "block size " << bs << ": " << bad << " of " << checked << " elements overwritten";
    EXPECT_EQ(checked, int64_t{43 + 21 * 5 + 20 * 2} * 128 * 512 + 21 * 32 * (512 + 128) + 20 * 512);
  }
}

StatusOr<ModelConfig> Parse(const nlohmann::json& j) { return ParseHfConfig(j.dump(), "config.json"); }

TEST(DeepseekV4Config, RefusesWhatLlamaCppRefuses) {
  auto expect_error = [](nlohmann::json j, const std::string& needle) {
    auto c = Parse(j);
    ASSERT_FALSE(c.ok()) << "accepted: " << needle;
    EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status().ToString();
  };
  nlohmann::json j = FlashConfig();
  j["compress_ratios"][5] = 64;
  expect_error(j, "compress ratio 64");
  j = FlashConfig();
  j["hc_mult"] = 2;
  expect_error(j, "2 hyper-connection streams");
  j = FlashConfig();
  j["o_groups"] = 6;
  expect_error(j, "output groups");
  j = FlashConfig();
  j["compress_ratios"] = {0, 4, 128};
  expect_error(j, "fewer entries than layers");
  j = FlashConfig();
  j["num_key_value_heads"] = 2;
  expect_error(j, "head_count_kv must be 1");
  j = FlashConfig();
  j["scoring_func"] = "softmax";
  expect_error(j, "scoring_func 'softmax'");
  j = FlashConfig();
  j["index_head_dim"] = 32;  // below the rope dimension
  expect_error(j, "indexer");
  j = FlashConfig();
  j.erase("sliding_window");
  expect_error(j, "sliding_window");
}

// GGUF: the same checks, and the keys llama.cpp requires.
TEST(DeepseekV4Config, GgufMetadataRefusals) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("deepinfer_dsv4_" + std::to_string(::getpid()) + ".gguf")).string();
  auto write = [&](const std::string& drop, const std::function<void(GgufWriter&)>& extra) {
    GgufWriter w;
    const std::string p = "deepseek4.";
    w.SetString("general.architecture", "deepseek4");
    auto u32 = [&](const std::string& k, uint32_t v) {
      if (k != drop) w.SetU32(p + k, v);
    };
    auto f32 = [&](const std::string& k, float v) {
      if (k != drop) w.SetF32(p + k, v);
    };
    u32("embedding_length", 256); u32("block_count", 6); u32("attention.head_count", 4);
    u32("attention.head_count_kv", 1); u32("attention.key_length", 128); u32("attention.value_length", 128);
    u32("rope.dimension_count", 32); u32("attention.q_lora_rank", 64); u32("attention.sliding_window", 16);
    u32("attention.output_group_count", 2); u32("attention.output_lora_rank", 32); u32("expert_count", 8);
    u32("expert_used_count", 2); u32("expert_feed_forward_length", 128); u32("expert_shared_count", 1);
    u32("hyper_connection.count", 4); u32("hyper_connection.sinkhorn_iterations", 20); u32("hash_layer_count", 3);
    u32("attention.indexer.head_count", 4); u32("attention.indexer.key_length", 64); u32("attention.indexer.top_k", 4);
    f32("hyper_connection.epsilon", 1e-6f); f32("expert_weights_scale", 1.5f); f32("swiglu_clamp_exp", 10.f);
    f32("attention.compress_rope_freq_base", 160000.f); f32("attention.layer_norm_rms_epsilon", 1e-6f);
    if (drop != "expert_gating_func") w.SetU32(p + "expert_gating_func", 4);
    if (drop != "expert_weights_norm") w.SetBool(p + "expert_weights_norm", true);
    if (drop != "attention.compress_ratios") w.SetI32Array(p + "attention.compress_ratios", {0, 0, 4, 128, 4, 128});
    if (extra) extra(w);
    EXPECT_TRUE(w.Write(path).ok());
    auto g = GgufFile::Open(path);
    EXPECT_TRUE(g.ok());
    return ParseGgufConfig(**g);
  };
  // The metadata alone is fine: parsing gets as far as the missing embedding tensor.
  auto ok = write("", nullptr);
  ASSERT_FALSE(ok.ok());
  EXPECT_NE(ok.status().message().find("token_embd"), std::string::npos) << ok.status().ToString();
  for (const char* key : {"attention.output_group_count", "hyper_connection.count", "hash_layer_count",
                          "attention.compress_ratios", "expert_gating_func", "swiglu_clamp_exp",
                          "attention.compress_rope_freq_base", "expert_weights_norm"}) {
    auto c = write(key, nullptr);
    ASSERT_FALSE(c.ok()) << key;
    EXPECT_NE(c.status().message().find(key), std::string::npos) << key << ": " << c.status().ToString();
  }
  auto gating = write("expert_gating_func", [](GgufWriter& w) { w.SetU32("deepseek4.expert_gating_func", 2); });
  EXPECT_NE(gating.status().message().find("expert_gating_func 2"), std::string::npos) << gating.status().ToString();
  auto ratio = write("attention.compress_ratios",
                     [](GgufWriter& w) { w.SetI32Array("deepseek4.attention.compress_ratios", {0, 0, 4, 16, 4, 128}); });
  EXPECT_NE(ratio.status().message().find("compress ratio 16"), std::string::npos) << ratio.status().ToString();
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace deepinfer
