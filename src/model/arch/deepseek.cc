// DeepSeek-V2 / V3 (HF deepseek_v2, deepseek_v3; GGUF deepseek2): multi-head latent attention (an optional
// low-rank q, a normalized kv_lora latent plus one shared RoPE key cached per token, interleaved RoPE with YaRN),
// DeepSeekMoE (leading dense layers, shared experts, softmax or sigmoid scores with a selection-only correction
// bias, group-limited top-k, routed scaling) and V3's MTP module.
#include <cmath>
#include <nlohmann/json.hpp>

#include "format/gguf.h"
#include "model/arch/arch.h"
#include "model/arch/blocks.h"
#include "model/arch/tensor_list.h"
#include "model/make_tiny.h"
#include "model/model.h"

namespace deepinfer {
namespace {

Status HfConfig(const HfConfigReader& j, ModelConfig* cp) {
  ModelConfig& c = *cp;
  c.mla = true;
  c.q_lora_rank = static_cast<int>(j.IntOr("q_lora_rank", 0));  // null in V2-Lite: no q compression
  c.kv_lora_rank = static_cast<int>(j.IntOr("kv_lora_rank", 0));
  c.qk_nope_dim = static_cast<int>(j.IntOr("qk_nope_head_dim", 0));
  c.qk_rope_dim = static_cast<int>(j.IntOr("qk_rope_head_dim", 0));
  c.v_head_dim = static_cast<int>(j.IntOr("v_head_dim", 0));
  c.head_dim = c.qk_nope_dim + c.qk_rope_dim;
  c.n_kv_heads = c.n_heads;
  c.n_mtp = static_cast<int>(j.IntOr("num_nextn_predict_layers", 0));
  if (c.n_mtp < 0 || c.n_mtp > 16) return j.Invalid("num_nextn_predict_layers out of range");
  const int64_t n_exp = j.IntOr("n_routed_experts", 0);
  if (c.kv_lora_rank <= 0 || c.qk_nope_dim <= 0 || c.qk_rope_dim <= 0 || c.qk_rope_dim % 2 || c.v_head_dim <= 0 ||
      c.q_lora_rank < 0 || c.kv_lora_rank > 65536 || c.q_lora_rank > 65536 || n_exp < 0 || n_exp > 4096)
    return j.Invalid("MLA / expert dimensions missing or out of range");
  if (n_exp > 0) {
    c.n_experts = static_cast<int>(n_exp);
    c.n_experts_used = static_cast<int>(j.IntOr("num_experts_per_tok", 0));
    c.moe_intermediate = static_cast<int>(j.IntOr("moe_intermediate_size", 0));
    c.n_shared_experts = static_cast<int>(j.IntOr("n_shared_experts", 0));
    c.first_k_dense = static_cast<int>(j.IntOr("first_k_dense_replace", 0));
    c.decoder_sparse_step = static_cast<int>(j.IntOr("moe_layer_freq", 1));
    c.n_group = static_cast<int>(j.IntOr("n_group", 1));
    c.topk_group = static_cast<int>(j.IntOr("topk_group", 1));
    c.router_sigmoid = j.StringOr("scoring_func", "softmax") == "sigmoid";
    c.router_bias = j.StringOr("topk_method", "greedy") == "noaux_tc";
    c.norm_topk_prob = j.BoolOr("norm_topk_prob", false);
    const auto& js = j.json();
    c.routed_scaling_factor = js.contains("routed_scaling_factor") && js["routed_scaling_factor"].is_number()
                                  ? static_cast<float>(js["routed_scaling_factor"].get<double>())
                                  : 1.f;
    if (c.n_experts_used <= 0 || c.n_experts_used > c.n_experts || c.moe_intermediate <= 0 || c.n_group < 1 ||
        c.topk_group < 1 || c.topk_group > c.n_group || c.n_experts % c.n_group || c.n_shared_experts < 0 ||
        c.first_k_dense < 0 || c.decoder_sparse_step < 1)
      return j.Invalid("DeepSeekMoE settings out of range");
    c.shared_ffn = c.moe_intermediate * c.n_shared_experts;
  }
  // YaRN (the only rope_scaling DeepSeek ships): frequency ramp, cos/sin mscale, softmax mscale^2.
  const auto& js = j.json();
  if (js.contains("rope_scaling") && js["rope_scaling"].is_object()) {
    const auto& rs = js["rope_scaling"];
    const std::string type = rs.value("rope_type", rs.value("type", ""));
    if (type == "yarn") {
      auto num = [&](const char* k, double def) { return rs.contains(k) && rs[k].is_number() ? rs[k].get<double>() : def; };
      c.yarn.factor = num("factor", 1.0);
      c.yarn.original_ctx = num("original_max_position_embeddings", 4096.0);
      c.yarn.beta_fast = num("beta_fast", 32.0);
      c.yarn.beta_slow = num("beta_slow", 1.0);
      const double mscale = num("mscale", 1.0), mscale_all = num("mscale_all_dim", 0.0);
      auto get_mscale = [&](double m) { return c.yarn.factor <= 1 ? 1.0 : 0.1 * m * std::log(c.yarn.factor) + 1.0; };
      if (!(c.yarn.factor >= 1 && c.yarn.factor < 1e6 && c.yarn.original_ctx > 0 && c.yarn.beta_fast > 0 && c.yarn.beta_slow > 0))
        return j.Invalid("rope_scaling yarn values out of range");
      c.yarn.mscale = static_cast<float>(get_mscale(mscale) / get_mscale(mscale_all));
      c.attn_scale_mult = static_cast<float>(get_mscale(mscale_all) * get_mscale(mscale_all));
    }
  }
  return Status::Ok();
}

// deepseek2, legacy layout (attn_kv_b): key_length = nope + rope, value_length = v. Current layout
// (attn_k_b/attn_v_b, MQA form): key_length = kv_lora + rope, value_length = kv_lora, and the per-head sizes in
// key_length_mla / value_length_mla. rope.dimension_count = rope in both.
Status GgufConfig(const GgufConfigReader& g, ModelConfig* cp) {
  ModelConfig& c = *cp;
  const bool split = g.Has("attention.key_length_mla");
  int64_t head_dim = c.head_dim;
  if (split) {
    DI_ASSIGN_OR_RETURN(head_dim, g.Int("attention.key_length_mla", 0, true));
  }
  DI_ASSIGN_OR_RETURN(int64_t v_len, g.Int(split ? "attention.value_length_mla" : "attention.value_length", 0, true));
  DI_ASSIGN_OR_RETURN(int64_t rope, g.Int("rope.dimension_count", 0, true));
  DI_ASSIGN_OR_RETURN(int64_t q_lora, g.Int("attention.q_lora_rank", 0, false));
  DI_ASSIGN_OR_RETURN(int64_t kv_lora, g.Int("attention.kv_lora_rank", 0, true));
  DI_ASSIGN_OR_RETURN(int64_t dense, g.Int("leading_dense_block_count", 0, false));
  DI_ASSIGN_OR_RETURN(int64_t shared, g.Int("expert_shared_count", 0, false));
  DI_ASSIGN_OR_RETURN(int64_t gating, g.Int("expert_gating_func", 1, false));
  DI_ASSIGN_OR_RETURN(int64_t groups, g.Int("expert_group_count", 1, false));
  DI_ASSIGN_OR_RETURN(int64_t groups_used, g.Int("expert_group_used_count", 1, false));
  for (int64_t v : {v_len, rope, kv_lora}) if (v <= 0 || v > 65536) return g.Invalid("MLA dimensions out of range");
  if (head_dim <= 0 || head_dim > 65536 || q_lora < 0 || q_lora > 65536 || rope >= head_dim || dense < 0 || shared < 0 ||
      shared > 64 || groups < 1 || groups_used < 1 || groups_used > groups)
    return g.Invalid("deepseek2 metadata out of range");
  c.mla = true;
  c.q_lora_rank = static_cast<int>(q_lora);
  c.kv_lora_rank = static_cast<int>(kv_lora);
  c.qk_rope_dim = static_cast<int>(rope);
  c.head_dim = static_cast<int>(head_dim);
  c.qk_nope_dim = c.head_dim - c.qk_rope_dim;
  c.v_head_dim = static_cast<int>(v_len);
  c.first_k_dense = static_cast<int>(dense);
  c.n_shared_experts = static_cast<int>(shared);
  c.shared_ffn = c.moe_intermediate * c.n_shared_experts;
  c.router_sigmoid = gating == 2;
  c.n_group = static_cast<int>(groups);
  c.topk_group = static_cast<int>(groups_used);
  c.norm_topk_prob = g.Bool("expert_weights_norm", false) && c.n_experts > 0;
  if (auto v = g.Float("expert_weights_scale"); v.ok()) c.routed_scaling_factor = static_cast<float>(*v);
  c.router_bias =
      g.file().FindTensor(TensorName(DeepseekArch(), WeightFormat::kGguf, TensorId::kFfnExpProbsBias, c.first_k_dense)) != nullptr;
  if (auto t = g.String("rope.scaling.type"); t.ok() && *t == "yarn") {
    auto f = g.Float("rope.scaling.factor");
    auto oc = g.Int("rope.scaling.original_context_length", 0, true);
    if (!f.ok() || !oc.ok() || !(*f >= 1 && *f < 1e6) || *oc <= 0)
      return g.Invalid("rope.scaling yarn needs factor >= 1 and original_context_length");
    c.yarn.factor = *f;
    c.yarn.original_ctx = static_cast<double>(*oc);
    if (auto v = g.Float("rope.scaling.yarn_beta_fast"); v.ok()) c.yarn.beta_fast = *v;
    if (auto v = g.Float("rope.scaling.yarn_beta_slow"); v.ok()) c.yarn.beta_slow = *v;
    // llama.cpp stores 0.1 * mscale_all_dim; cos/sin keep scale 1 (mscale == mscale_all_dim, as V2/V3 ship).
    auto lm = g.Float("rope.scaling.yarn_log_multiplier");
    const double log_mul = lm.ok() ? *lm : 0.0;
    const double m = 1 + log_mul * std::log(c.yarn.factor);
    c.attn_scale_mult = static_cast<float>(m * m);
  }
  c.n_kv_heads = c.n_heads;
  return Status::Ok();
}

Status GgufConvertible(const ModelConfig& c) {
  if (c.n_experts > 0 && c.decoder_sparse_step != 1) return Unimplemented("llama.cpp's deepseek2 has no moe_layer_freq other than 1");
  if (c.yarn.factor > 1 && std::fabs(c.yarn.mscale - 1.f) > 1e-6f)
    return Unimplemented("YaRN with mscale != mscale_all_dim has no GGUF representation");
  return Status::Ok();
}

// deepseek2 in llama.cpp's current MLA layout (MQA over the latent; per-head sizes in *_mla).
void GgufMetadata(const ModelConfig& c, const std::string& p, GgufWriter& w) {
  if (c.n_experts > 0) WriteGgufExpertCounts(p, c.n_experts, c.n_experts_used, c.moe_intermediate, w);
  w.SetU32(p + "attention.head_count_kv", 1);
  w.SetU32(p + "attention.key_length", c.kv_lora_rank + c.qk_rope_dim);
  w.SetU32(p + "attention.value_length", c.kv_lora_rank);
  w.SetU32(p + "attention.key_length_mla", c.qk_nope_dim + c.qk_rope_dim);
  w.SetU32(p + "attention.value_length_mla", c.v_head_dim);
  w.SetU32(p + "rope.dimension_count", c.qk_rope_dim);
  w.SetU32(p + "attention.q_lora_rank", c.q_lora_rank);  // 0 = no q compression; llama.cpp requires the key
  w.SetU32(p + "attention.kv_lora_rank", c.kv_lora_rank);
  w.SetU32(p + "leading_dense_block_count", c.n_experts > 0 ? c.first_k_dense : c.n_layers);
  w.SetU32(p + "expert_shared_count", c.n_shared_experts);
  if (c.n_experts > 0) {
    w.SetF32(p + "expert_weights_scale", c.routed_scaling_factor);
    if (c.norm_topk_prob) w.SetBool(p + "expert_weights_norm", true);
    w.SetU32(p + "expert_gating_func", c.router_sigmoid ? 2 : 1);
    w.SetU32(p + "expert_group_count", c.n_group);
    w.SetU32(p + "expert_group_used_count", c.topk_group);
  }
  if (c.yarn.factor > 1) {
    w.SetString(p + "rope.scaling.type", "yarn");
    w.SetF32(p + "rope.scaling.factor", static_cast<float>(c.yarn.factor));
    w.SetU32(p + "rope.scaling.original_context_length", static_cast<uint32_t>(c.yarn.original_ctx));
    w.SetF32(p + "rope.scaling.yarn_beta_fast", static_cast<float>(c.yarn.beta_fast));
    w.SetF32(p + "rope.scaling.yarn_beta_slow", static_cast<float>(c.yarn.beta_slow));
    // llama.cpp stores 0.1 * mscale_all_dim; attn_scale_mult = (0.1 * mscale_all_dim * ln(factor) + 1)^2.
    const double mscale_all = (std::sqrt(c.attn_scale_mult) - 1.0) / (0.1 * std::log(c.yarn.factor));
    w.SetF32(p + "rope.scaling.yarn_log_multiplier", static_cast<float>(0.1 * mscale_all));
  }
}

void TinyHfConfig(const TinySpec& s, nlohmann::json* cfgp) {
  nlohmann::json& cfg = *cfgp;
  cfg["q_lora_rank"] = s.q_lora > 0 ? nlohmann::json(s.q_lora) : nlohmann::json(nullptr);
  cfg["kv_lora_rank"] = s.kv_lora;
  cfg["qk_nope_head_dim"] = s.qk_nope;
  cfg["qk_rope_head_dim"] = s.qk_rope;
  cfg["v_head_dim"] = s.v_head;
  cfg.erase("head_dim");
  cfg["n_routed_experts"] = s.experts;
  cfg["num_experts_per_tok"] = s.experts_used;
  cfg["moe_intermediate_size"] = s.moe_intermediate;
  cfg["n_shared_experts"] = s.shared_experts;
  cfg["first_k_dense_replace"] = s.first_dense;
  cfg["moe_layer_freq"] = 1;
  cfg["n_group"] = s.n_group;
  cfg["topk_group"] = s.topk_group;
  cfg["topk_method"] = "noaux_tc";
  cfg["scoring_func"] = "sigmoid";
  cfg["norm_topk_prob"] = true;
  cfg["routed_scaling_factor"] = s.routed_scale;
  cfg["num_nextn_predict_layers"] = s.mtp ? 1 : 0;
  cfg["rope_scaling"] = nullptr;
  if (s.yarn)
    cfg["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32}, {"beta_fast", 32},
                           {"beta_slow", 1}, {"mscale", 1.0}, {"mscale_all_dim", 1.0}};
  if (s.dtype == DType::kF8E4M3)
    cfg["quantization_config"] = {{"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"},
                                  {"weight_block_size", {128, 128}}};
}

void TinyGgufMetadata(const TinySpec& s, const std::string& p, GgufWriter& w) {
  w.SetU32(p + "attention.q_lora_rank", s.q_lora);
  w.SetU32(p + "attention.kv_lora_rank", s.kv_lora);
  w.SetU32(p + "leading_dense_block_count", s.first_dense);
  w.SetU32(p + "expert_shared_count", s.shared_experts);
  w.SetF32(p + "expert_weights_scale", s.routed_scale);
  w.SetBool(p + "expert_weights_norm", true);
  w.SetU32(p + "expert_gating_func", 2);  // sigmoid
  w.SetU32(p + "expert_group_count", s.n_group);
  w.SetU32(p + "expert_group_used_count", s.topk_group);
  if (s.yarn) {
    w.SetString(p + "rope.scaling.type", "yarn");
    w.SetF32(p + "rope.scaling.factor", 4.f);
    w.SetU32(p + "rope.scaling.original_context_length", 32);
    w.SetF32(p + "rope.scaling.yarn_log_multiplier", 0.1f);  // 0.1 x mscale_all_dim
    w.SetF32(p + "rope.scaling.yarn_beta_fast", 32.f);
    w.SetF32(p + "rope.scaling.yarn_beta_slow", 1.f);
  }
  WriteGgufExpertCounts(p, s.experts, s.experts_used, s.moe_intermediate, w);
}

}  // namespace

const ArchSpec& DeepseekArch() {
  static const ArchSpec kSpec{
      .arch = Arch::kDeepseekV3,
      .name = "deepseek_v3",
      .hf_names = {"deepseek_v3", "deepseek_v2", "DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM"},
      .hf_class = "DeepseekV3ForCausalLM",
      .gguf_arch = "deepseek2",
      .mla = true,
      .moe = true,
      .gguf_rope = RopeStyle::kAdjacentPairs,  // DeepSeek's rotary is interleaved (pairs 2i, 2i+1) in both formats
      .hf_rope = RopeStyle::kAdjacentPairs,
      .hf_config = HfConfig,
      .gguf_config = GgufConfig,
      .gguf_convertible = GgufConvertible,
      .gguf_metadata = GgufMetadata,
      .tiny_adjust = [](TinySpec* s) {
        s->head_dim = s->qk_nope + s->qk_rope;
        s->kv_heads = s->heads;  // MLA: every head has its own K/V after decompression (llama.cpp's head_count_kv)
      },
      .tiny_hf_config = TinyHfConfig,
      .tiny_gguf_metadata = TinyGgufMetadata,
      // MLA attention; a dense SwiGLU in the first first_k_dense layers, else DeepSeekMoE: router (V3: with its
      // selection bias), routed experts, shared experts.
      .layer_tensors = MlaLayerTensors,
      .mtp_tensors = MtpModuleTensors,
  };
  return kSpec;
}

}  // namespace deepinfer
