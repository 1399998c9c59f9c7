// HF config.json parsing on the configurations the model authors publish (the texts below are the files from
// deepseek-ai/DeepSeek-V3, deepseek-ai/DeepSeek-V2-Lite and Qwen/Qwen3-30B-A3B on the Hugging Face hub, trimmed of
// fields no loader reads). Full-size weights do not fit this machine, so this is where the real shapes are
// checked: every derived number below is written out from the papers/model cards, not recomputed by our code.
#include <gtest/gtest.h>

#include "kv/paged_kv_cache.h"
#include "model/model.h"

namespace deepinfer {
namespace {

constexpr const char* kDeepSeekV3 = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": false, "bos_token_id": 0, "eos_token_id": 1,
  "ep_size": 1, "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168, "intermediate_size": 18432,
  "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v3", "moe_intermediate_size": 2048,
  "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": true,
  "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128,
  "num_nextn_predict_layers": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
  "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]},
  "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                   "original_max_position_embeddings": 4096, "type": "yarn"},
  "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "tie_word_embeddings": false,
  "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16", "v_head_dim": 128, "vocab_size": 129280
})";

constexpr const char* kDeepSeekV2Lite = R"({
  "architectures": ["DeepseekV2ForCausalLM"], "attention_bias": false, "aux_loss_alpha": 0.001, "bos_token_id": 100000,
  "eos_token_id": 100001, "first_k_dense_replace": 1, "hidden_act": "silu", "hidden_size": 2048,
  "intermediate_size": 10944, "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v2",
  "moe_intermediate_size": 1408, "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 64, "n_shared_experts": 2,
  "norm_topk_prob": false, "num_attention_heads": 16, "num_experts_per_tok": 6, "num_hidden_layers": 27,
  "num_key_value_heads": 16, "pretraining_tp": 1, "q_lora_rank": null, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
  "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
                   "original_max_position_embeddings": 4096, "type": "yarn"},
  "rope_theta": 10000, "routed_scaling_factor": 1.0, "scoring_func": "softmax", "seq_aux": true,
  "tie_word_embeddings": false, "topk_group": 1, "topk_method": "greedy", "torch_dtype": "bfloat16",
  "v_head_dim": 128, "vocab_size": 102400
})";

constexpr const char* kQwen3_30B_A3B = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "bos_token_id": 151643, "decoder_sparse_step": 1,
  "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 6144,
  "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe",
  "moe_intermediate_size": 768, "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128,
  "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
  "rope_scaling": null, "rope_theta": 1000000.0, "sliding_window": null, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "use_sliding_window": false, "vocab_size": 151936
})";

TEST(HfConfigTest, DeepSeekV3) {
  auto c = ParseHfConfig(kDeepSeekV3, "DeepSeek-V3/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, Arch::kDeepseekV3);
  EXPECT_EQ(c->vocab_size, 129280);
  EXPECT_EQ(c->hidden, 7168);
  EXPECT_EQ(c->n_layers, 61);
  EXPECT_EQ(c->n_heads, 128);
  EXPECT_TRUE(c->mla);
  EXPECT_EQ(c->q_lora_rank, 1536);
  EXPECT_EQ(c->kv_lora_rank, 512);
  EXPECT_EQ(c->head_dim, 192);  // qk_nope 128 + qk_rope 64
  EXPECT_EQ(c->v_head_dim, 128);
  EXPECT_EQ(c->rope_style, RopeStyle::kAdjacentPairs);
  // The cache holds the 512-wide latent and the 64-wide rope key per token per layer, nothing else:
  // 576 x 2 bytes x 61 layers = 70,272 bytes per token in bf16 (vs 128 heads x (192 + 128) x 2 x 61 = 4.99 MB
  // for the decompressed K/V).
  EXPECT_EQ(c->kv_k_elems(), 576);
  EXPECT_EQ(c->kv_v_elems(), 0);
  EXPECT_EQ(PagedKvCache::BytesPerToken(c->kv_layout(), DType::kBF16), 70272u);
  // DeepSeekMoE: 256 routed (8 per token) + 1 shared, first 3 layers dense, 8 groups keep 4, sigmoid scores with
  // the noaux_tc correction bias, renormalized, scaled by 2.5.
  EXPECT_EQ(c->n_experts, 256);
  EXPECT_EQ(c->n_experts_used, 8);
  EXPECT_EQ(c->moe_intermediate, 2048);
  EXPECT_EQ(c->intermediate, 18432);
  EXPECT_EQ(c->n_shared_experts, 1);
  EXPECT_EQ(c->first_k_dense, 3);
  EXPECT_FALSE(c->IsMoeLayer(2));
  EXPECT_TRUE(c->IsMoeLayer(3));
  EXPECT_TRUE(c->IsMoeLayer(60));
  EXPECT_EQ(c->n_group, 8);
  EXPECT_EQ(c->topk_group, 4);
  EXPECT_TRUE(c->router_sigmoid);
  EXPECT_TRUE(c->router_bias);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_FLOAT_EQ(c->routed_scaling_factor, 2.5f);
  EXPECT_EQ(c->n_mtp, 1);
  // YaRN x40 from a 4096 context: mscale == mscale_all_dim, so cos/sin are unscaled, and the softmax scale is
  // multiplied by (0.1 * ln 40 + 1)^2 = 1.87385...
  EXPECT_DOUBLE_EQ(c->yarn.factor, 40.0);
  EXPECT_DOUBLE_EQ(c->yarn.original_ctx, 4096.0);
  EXPECT_FLOAT_EQ(c->yarn.mscale, 1.0f);
  EXPECT_NEAR(c->attn_scale_mult, 1.8738542, 1e-6);
  EXPECT_EQ(c->max_ctx, 163840);
}

TEST(HfConfigTest, DeepSeekV2Lite) {
  auto c = ParseHfConfig(kDeepSeekV2Lite, "DeepSeek-V2-Lite/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, Arch::kDeepseekV3);  // one implementation for V2 and V3
  EXPECT_EQ(c->q_lora_rank, 0);           // null: a plain q projection
  EXPECT_EQ(c->kv_k_elems(), 576);
  EXPECT_EQ(c->n_experts, 64);
  EXPECT_EQ(c->n_experts_used, 6);
  EXPECT_EQ(c->n_shared_experts, 2);
  EXPECT_EQ(c->first_k_dense, 1);
  EXPECT_EQ(c->n_group, 1);
  EXPECT_FALSE(c->router_sigmoid);  // softmax, greedy top-6, not renormalized
  EXPECT_FALSE(c->router_bias);
  EXPECT_FALSE(c->norm_topk_prob);
  EXPECT_FLOAT_EQ(c->routed_scaling_factor, 1.0f);
  EXPECT_EQ(c->n_mtp, 0);
  EXPECT_NEAR(c->attn_scale_mult, 1.5896262, 1e-6);  // (0.1 * 0.707 * ln 40 + 1)^2
}

TEST(HfConfigTest, Qwen3MoE30BA3B) {
  auto c = ParseHfConfig(kQwen3_30B_A3B, "Qwen3-30B-A3B/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, Arch::kQwen3Moe);
  EXPECT_FALSE(c->mla);
  EXPECT_EQ(c->qk_norm, QkNorm::kPerHead);
  EXPECT_EQ(c->head_dim, 128);  // explicit, not hidden / heads (= 64)
  EXPECT_EQ(c->n_kv_heads, 4);
  EXPECT_EQ(c->kv_k_elems(), 512);
  EXPECT_EQ(c->kv_v_elems(), 512);
  EXPECT_EQ(c->n_experts, 128);
  EXPECT_EQ(c->n_experts_used, 8);
  EXPECT_EQ(c->moe_intermediate, 768);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_TRUE(c->IsMoeLayer(0));
  EXPECT_TRUE(c->IsMoeLayer(47));
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->rope_style, RopeStyle::kHalves);
}

TEST(HfConfigTest, RejectsBrokenDeepSeekSettingsWithTheReason) {
  auto edit = [](const std::string& from, const std::string& to) {
    std::string s = kDeepSeekV3;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  auto expect_error = [](const std::string& text, const std::string& needle) {
    auto c = ParseHfConfig(text, "config.json");
    ASSERT_FALSE(c.ok()) << needle;
    EXPECT_NE(c.status().ToString().find(needle), std::string::npos) << c.status().ToString();
  };
  expect_error(edit("\"topk_group\": 4", "\"topk_group\": 9"), "DeepSeekMoE settings");
  expect_error(edit("\"kv_lora_rank\": 512,", ""), "MLA");
  expect_error(edit("\"qk_rope_head_dim\": 64", "\"qk_rope_head_dim\": 63"), "MLA");
  expect_error(edit("\"num_nextn_predict_layers\": 1", "\"num_nextn_predict_layers\": 100"), "num_nextn_predict_layers");
  expect_error(edit("\"factor\": 40", "\"factor\": 0.5"), "yarn");
  expect_error(edit("\"model_type\": \"deepseek_v3\"", "\"model_type\": \"deepseek_v9\""), "deepseek_v3");
  expect_error("{\"model_type\": ", "not valid JSON");
}

// mistralai/Mixtral-8x7B-v0.1 and Qwen/Qwen1.5-MoE-A2.7B config.json (trimmed of fields no loader reads).
constexpr const char* kMixtral8x7B = R"({
  "architectures": ["MixtralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096,
  "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32,
  "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8,
  "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02, "sliding_window": null,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 32000
})";

constexpr const char* kQwen15MoeA27B = R"({
  "architectures": ["Qwen2MoeForCausalLM"], "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151643,
  "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 5632, "max_position_embeddings": 8192,
  "max_window_layers": 21, "model_type": "qwen2_moe", "moe_intermediate_size": 1408, "norm_topk_prob": false,
  "num_attention_heads": 16, "num_experts": 60, "num_experts_per_tok": 4, "num_hidden_layers": 24,
  "num_key_value_heads": 16, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "shared_expert_intermediate_size": 5632,
  "sliding_window": 32768, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_sliding_window": false,
  "vocab_size": 151936
})";

TEST(HfConfig, Mixtral8x7B) {
  auto c = ParseHfConfig(kMixtral8x7B, "Mixtral-8x7B-v0.1/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, Arch::kMixtral);
  EXPECT_EQ(c->n_layers, 32);
  EXPECT_EQ(c->n_kv_heads, 8);
  EXPECT_EQ(c->head_dim, 128);
  // 8 experts, 2 per token, each a 14336-wide SwiGLU; renormalized top-2 softmax; no shared expert, no dense layer.
  EXPECT_EQ(c->n_experts, 8);
  EXPECT_EQ(c->n_experts_used, 2);
  EXPECT_EQ(c->moe_intermediate, 14336);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_FALSE(c->router_sigmoid);
  EXPECT_EQ(c->shared_ffn, 0);
  for (int l = 0; l < 32; ++l) EXPECT_TRUE(c->IsMoeLayer(l)) << l;
  EXPECT_EQ(c->rope_style, RopeStyle::kHalves);
  EXPECT_FALSE(c->attn_bias);
  // K and V of 8 heads x 128 per layer: 32 x 2 x 1024 x 2 bytes = 131,072 bytes per token in bf16.
  EXPECT_EQ(PagedKvCache::BytesPerToken(c->kv_layout(), DType::kBF16), 131072u);
}

TEST(HfConfig, Qwen15MoeA27B) {
  auto c = ParseHfConfig(kQwen15MoeA27B, "Qwen1.5-MoE-A2.7B/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, Arch::kQwen2Moe);
  // 60 routed experts of 1408 (4 per token, not renormalized) + one 5632-wide shared expert behind a sigmoid gate.
  EXPECT_EQ(c->n_experts, 60);
  EXPECT_EQ(c->n_experts_used, 4);
  EXPECT_EQ(c->moe_intermediate, 1408);
  EXPECT_FALSE(c->norm_topk_prob);
  EXPECT_EQ(c->shared_ffn, 5632);
  EXPECT_TRUE(c->shared_expert_gate);
  EXPECT_TRUE(c->attn_bias);  // qwen2 attention: q/k/v biases
  EXPECT_EQ(c->qk_norm, QkNorm::kNone);
  EXPECT_EQ(c->intermediate, 5632);
  EXPECT_EQ(PagedKvCache::BytesPerToken(c->kv_layout(), DType::kBF16), 196608u);  // 24 x 2 x 2048 x 2
}

TEST(HfConfig, ModelTypeFallsBackToArchitectures) {
  std::string text = kMixtral8x7B;
  text.replace(text.find("\"model_type\": \"mixtral\", "), 25, "");
  auto c = ParseHfConfig(text, "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, Arch::kMixtral);
}

TEST(HfConfig, MixtralWithoutExpertCountIsAnError) {
  std::string text = kMixtral8x7B;
  text.replace(text.find("\"num_local_experts\": 8,"), 23, "");
  auto c = ParseHfConfig(text, "config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("num_local_experts"), std::string::npos) << c.status().message();
}

// OLMo 2 (allenai/OLMo-2-0425-1B's config.json, trimmed): the whole-projection q/k norm is the family's rule.
constexpr const char* kOlmo2_1B = R"({
  "architectures": ["Olmo2ForCausalLM"], "attention_bias": false, "hidden_size": 2048, "intermediate_size": 8192,
  "max_position_embeddings": 4096, "model_type": "olmo2", "num_attention_heads": 16, "num_hidden_layers": 16,
  "num_key_value_heads": 16, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 500000,
  "tie_word_embeddings": false, "vocab_size": 100352})";

TEST(HfConfig, Olmo2) {
  auto c = ParseHfConfig(kOlmo2_1B, "OLMo-2-0425-1B/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, Arch::kOlmo2);
  EXPECT_EQ(c->qk_norm, QkNorm::kWhole);
  EXPECT_EQ(c->rope_style, RopeStyle::kHalves);  // NeoX, as the HF checkpoint computes it
  EXPECT_TRUE(c->nope_layers.empty());
  EXPECT_EQ(c->max_ctx, 4096);
}

// SmolLM3 (HuggingFaceTB/SmolLM3-3B's config.json, trimmed): no_rope_layers marks every fourth layer 0.
constexpr const char* kSmolLM3_3B = R"({
  "architectures": ["SmolLM3ForCausalLM"], "attention_bias": false, "hidden_size": 2048, "intermediate_size": 11008,
  "max_position_embeddings": 65536, "model_type": "smollm3", "num_attention_heads": 16, "num_hidden_layers": 36,
  "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_theta": 5000000.0, "tie_word_embeddings": true,
  "no_rope_layer_interval": 4, "use_sliding_window": false, "sliding_window": null, "vocab_size": 128256,
  "no_rope_layers": [1,1,1,0,1,1,1,0,1,1,1,0,1,1,1,0,1,1,1,0,1,1,1,0,1,1,1,0,1,1,1,0,1,1,1,0]})";

TEST(HfConfig, SmolLM3) {
  auto c = ParseHfConfig(kSmolLM3_3B, "SmolLM3-3B/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, Arch::kSmolLM3);
  EXPECT_EQ(c->nope_layers, (std::vector<int>{3, 7, 11, 15, 19, 23, 27, 31, 35}));
  EXPECT_TRUE(c->LayerUsesRope(0));
  EXPECT_FALSE(c->LayerUsesRope(35));
  EXPECT_EQ(c->max_ctx, 65536);  // sliding_window null: no cap
  // Without the list, no_rope_layer_interval decides; a list of the wrong length is an error naming the field.
  std::string text = kSmolLM3_3B;
  text.replace(text.find("\"no_rope_layers\""), 16, "\"unused\"");
  auto d = ParseHfConfig(text, "config.json");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->nope_layers, c->nope_layers);
  text = kSmolLM3_3B;
  text.replace(text.find("[1,1,1,0,"), 9, "[1,1,0,");
  auto e = ParseHfConfig(text, "config.json");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("no_rope_layers has 35 entries for 36 layers"), std::string::npos) << e.status().message();
}

// Mistral 7B v0.1 has a 4096-token sliding window; until windows are implemented (issue 32) the context is capped
// at the window, where full attention is exact. Qwen2's window applies only with use_sliding_window.
// A config's sliding_window becomes the model's window: on every layer (Mistral 7B v0.1), none when null (v0.2)
// or disabled (Qwen2's use_sliding_window false), the layers from max_window_layers when Qwen2 enables it.
TEST(HfConfig, SlidingWindowIsRead) {
  const std::string mistral = R"({"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 32000,
    "max_position_embeddings": 32768, "sliding_window": 4096})";
  auto c = ParseHfConfig(mistral, "Mistral-7B-v0.1/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->max_ctx, 32768);
  EXPECT_EQ(c->sliding_window, 4096);
  EXPECT_EQ(c->LayerWindow(0), 4096);
  EXPECT_EQ(c->LayerWindow(31), 4096);
  EXPECT_EQ(c->LayerWindow(32), 0);  // past the decoder layers (an MTP layer)
  std::string v02 = mistral;
  v02.replace(v02.find("4096}"), 4, "null");
  c = ParseHfConfig(v02, "Mistral-7B-v0.2/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->sliding_window, 0);
  EXPECT_EQ(c->LayerWindow(0), 0);
  std::string qwen2 = mistral;
  qwen2.replace(qwen2.find("\"mistral\""), 9, "\"qwen2\"");
  qwen2.replace(qwen2.find("\"sliding_window\""), 0, "\"use_sliding_window\": false, ");
  c = ParseHfConfig(qwen2, "Qwen2/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->LayerWindow(0), 0);
  std::string qwen2_swa = qwen2;
  qwen2_swa.replace(qwen2_swa.find("false"), 5, "true, \"max_window_layers\": 28");
  c = ParseHfConfig(qwen2_swa, "Qwen2-swa/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->LayerWindow(27), 0);
  EXPECT_EQ(c->LayerWindow(28), 4096);
  std::string bad = mistral;
  bad.replace(bad.find("4096}"), 4, "-3");
  EXPECT_FALSE(ParseHfConfig(bad, "bad/config.json").ok());
}

// Gemma 3: the local/global pattern from layer_types or sliding_window_pattern, the local RoPE base, the softmax
// scale, GeGLU; soft-capping (Gemma 2's) refused.
TEST(HfConfig, Gemma3) {
  const std::string g = R"({"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "hidden_size": 2560,
    "intermediate_size": 10240, "num_attention_heads": 8, "num_hidden_layers": 34, "num_key_value_heads": 4,
    "head_dim": 256, "vocab_size": 262208, "max_position_embeddings": 131072, "query_pre_attn_scalar": 256,
    "rope_local_base_freq": 10000.0, "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "rope_theta": 1000000.0,
    "sliding_window": 1024, "sliding_window_pattern": 6, "final_logit_softcapping": null,
    "attn_logit_softcapping": null, "hidden_activation": "gelu_pytorch_tanh"})";
  auto c = ParseHfConfig(g, "gemma-3-4b/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, Arch::kGemma3);
  EXPECT_EQ(c->ffn_act, FfnAct::kGeluTanh);
  EXPECT_TRUE(c->tie_embeddings);
  EXPECT_EQ(c->qk_norm, QkNorm::kPerHead);
  for (int l = 0; l < 34; ++l) EXPECT_EQ(c->LayerWindow(l), l % 6 == 5 ? 0 : 1024) << l;
  EXPECT_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->rope_theta_swa, 1e4);
  EXPECT_FALSE(c->swa_rope_scaled);
  EXPECT_EQ(c->rope_linear_factor, 8.0);
  EXPECT_EQ(c->query_pre_attn_scalar, 256.f);
  std::string capped = g;
  capped.replace(capped.find("\"final_logit_softcapping\": null"), 31, "\"final_logit_softcapping\": 30.0");
  EXPECT_FALSE(ParseHfConfig(capped, "capped/config.json").ok());
  std::string types = g;
  types.replace(types.find("\"sliding_window_pattern\": 6"), 27, "\"layer_types\": [\"full_attention\"]");
  EXPECT_FALSE(ParseHfConfig(types, "types/config.json").ok());  // one entry for 34 layers
  // gemma-3-4b-it's own config.json: the text model wrapped, its text_config naming only what differs from
  // transformers' Gemma3TextConfig defaults.
  const std::string wrapped = R"({"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
    "boi_token_index": 255999, "text_config": {"hidden_size": 2560, "intermediate_size": 10240,
    "model_type": "gemma3_text", "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
    "sliding_window": 1024}, "vision_config": {"model_type": "siglip_vision_model"}, "torch_dtype": "bfloat16"})";
  auto w = ParseHfConfig(wrapped, "gemma-3-4b-it/config.json");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->Summary(), c->Summary());
}

}  // namespace
}  // namespace deepinfer
