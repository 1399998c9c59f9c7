// config.json -> ModelConfig: the fields every family shares, then the family's own (model/arch/).
#include <nlohmann/json.hpp>

#include "model/arch/arch.h"
#include "model/model.h"

namespace deepinfer {

StatusOr<ModelConfig> ParseHfConfig(const std::string& json_text, const std::string& cfg_path) {
  auto j = nlohmann::json::parse(json_text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return DataLoss(cfg_path + ": not valid JSON");
  // A multimodal checkpoint (Gemma3ForConditionalGeneration) wraps its language model's config in text_config;
  // the text model is what runs (the loader finds its weights under the wrapper's prefix, the vision tower is
  // not read).
  if (!j.contains("hidden_size") && j.contains("text_config") && j["text_config"].is_object() &&
      j["text_config"].contains("model_type")) {
    nlohmann::json text = j["text_config"];
    for (const char* k : {"tie_word_embeddings", "torch_dtype", "bos_token_id", "eos_token_id"})
      if (j.contains(k) && !text.contains(k)) text[k] = j[k];
    j = std::move(text);
  }
  std::string arch_name = j.contains("model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>() : "";
  const ArchSpec* spec = FindArchByHfName(arch_name);
  if (!spec && arch_name.empty() && j.contains("architectures") && j["architectures"].is_array() &&
      !j["architectures"].empty() && j["architectures"][0].is_string()) {
    arch_name = j["architectures"][0].get<std::string>();
    spec = FindArchByHfName(arch_name);
  }
  if (!spec)
    return Unimplemented(cfg_path + ": unknown architecture '" + arch_name + "' (supported: " + SupportedArchNames(false) + ")");
  // The family's config class defaults, for the keys a checkpoint leaves out (Gemma 3's text_config is sparse).
  if (spec->hf_defaults) {
    const auto defaults = nlohmann::json::parse(spec->hf_defaults);
    for (auto it = defaults.begin(); it != defaults.end(); ++it)
      if (!j.contains(it.key())) j[it.key()] = it.value();
  }
  const HfConfigReader r(j, cfg_path);
  ModelConfig c;
  c.arch = spec->arch;
  DI_ASSIGN_OR_RETURN(int64_t hidden, r.Int("hidden_size", -1));
  DI_ASSIGN_OR_RETURN(int64_t heads, r.Int("num_attention_heads", -1));
  DI_ASSIGN_OR_RETURN(int64_t kv, r.Int("num_key_value_heads", heads));
  DI_ASSIGN_OR_RETURN(int64_t hd, r.Int("head_dim", heads > 0 ? hidden / heads : 0));
  DI_ASSIGN_OR_RETURN(int64_t layers, r.Int("num_hidden_layers", -1));
  DI_ASSIGN_OR_RETURN(int64_t n_expert, r.Int("num_experts", 0));
  DI_ASSIGN_OR_RETURN(int64_t moe_ff, r.Int("moe_intermediate_size", 0));
  // MoE-only models may leave it out (transformers' DeepseekV4Config aliases it to moe_intermediate_size).
  const bool routed = n_expert > 0 || j.contains("n_routed_experts");
  DI_ASSIGN_OR_RETURN(int64_t ffn, r.Int("intermediate_size", routed && moe_ff > 0 ? moe_ff : -1));
  DI_ASSIGN_OR_RETURN(int64_t vocab, r.Int("vocab_size", -1));
  DI_ASSIGN_OR_RETURN(int64_t ctx, r.Int("max_position_embeddings", 2048));
  DI_ASSIGN_OR_RETURN(double eps, r.Number("rms_norm_eps", 1e-6));
  DI_ASSIGN_OR_RETURN(double theta, r.Number("rope_theta", 10000.0));
  for (int64_t v : {hidden, heads, kv, hd, layers, ffn, vocab, ctx})
    if (v <= 0 || v > (int64_t{1} << 30)) return InvalidArgument(cfg_path + ": model dimensions are missing or out of range");
  c.hidden = static_cast<int>(hidden);
  c.n_heads = static_cast<int>(heads);
  c.n_kv_heads = static_cast<int>(kv);
  c.head_dim = static_cast<int>(hd);
  c.n_layers = static_cast<int>(layers);
  c.intermediate = static_cast<int>(ffn);
  c.vocab_size = static_cast<int>(vocab);
  c.max_ctx = static_cast<int>(std::min<int64_t>(ctx, 1 << 22));
  c.rms_eps = static_cast<float>(eps);
  c.rope_theta = theta;
  c.rope_style = spec->hf_rope;
  c.tie_embeddings = r.BoolOr("tie_word_embeddings", false);
  c.qk_norm = spec->qk_norm;
  if (spec->hf_config) DI_RETURN_IF_ERROR(spec->hf_config(r, &c));
  c.attn_bias = spec->attn_bias || r.BoolOr("attention_bias", false);
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
    auto& rs = j["rope_scaling"];
    std::string type = rs.value("rope_type", rs.value("type", ""));
    if (type == "llama3") {
      c.rope_freq_factors = Llama3FreqFactors(c.head_dim, theta, rs.value("factor", 8.0), rs.value("low_freq_factor", 1.0),
                                              rs.value("high_freq_factor", 4.0), rs.value("original_max_position_embeddings", 8192.0));
    } else if (type == "linear") {
      c.rope_linear_factor = rs.value("factor", 1.0);
    } else if (type == "yarn" && c.yarn.factor > 0) {
      // read by the family (DeepSeek), the only one that ships YaRN
    } else if (!type.empty() && type != "default") {
      return Unimplemented(cfg_path + ": rope_scaling type '" + type + "' is not supported yet");
    }
  }
  // Sliding-window attention declared the generic way (Mistral 7B v0.1's 4096 on every layer; Qwen2's on the
  // layers from max_window_layers when use_sliding_window), for families that do not set windows themselves.
  if (c.sliding_window == 0 && j.contains("sliding_window") && j["sliding_window"].is_number_integer() &&
      r.BoolOr("use_sliding_window", true)) {
    const int64_t window = j["sliding_window"].get<int64_t>();
    if (window < 0 || window > (int64_t{1} << 30)) return r.Invalid("sliding_window out of range");
    if (window > 0 && window < c.max_ctx) {
      c.sliding_window = static_cast<int>(window);
      if (j.contains("max_window_layers")) {
        DI_ASSIGN_OR_RETURN(int64_t first, r.Int("max_window_layers", 0));
        c.swa_layers.assign(static_cast<size_t>(c.n_layers), false);
        for (int64_t l = std::max<int64_t>(first, 0); l < c.n_layers; ++l) c.swa_layers[static_cast<size_t>(l)] = true;
      }
    }
  }
  DI_RETURN_IF_ERROR(ValidateConfig(c, cfg_path));
  return c;
}

}  // namespace deepinfer
