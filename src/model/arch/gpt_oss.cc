// gpt-oss (OpenAI; GGUF `gpt-oss`, HF GptOssForCausalLM / model_type gpt_oss). A pre-norm MoE decoder:
//   x += o_proj(attention(RMSNorm(x))) + b_o     q/k/v with biases, NeoX RoPE with YaRN, one learned softmax
//                                                sink per query head, scale 1/sqrt(head_dim)
//   x += MoE(RMSNorm(x))                         router logits W_r h + b_r; top-k on the logits, weights a
//                                                softmax over the k; each expert (W_up h + b_up, W_gate h + b_gate)
//                                                -> clamped SwiGLU -> W_down a + b_down, weighted and summed
// Even layers attend to a sliding window (128 in the released models), odd ones to everything; both rotate with
// the same base and YaRN. The query width (heads x head_dim = 4096) differs from hidden (2880). No dense MLP, no
// shared expert, untied head. Its forward is LlamaForward (the pre-norm layer); the family's parts are in the
// layers (attention sinks and output bias, the router's scoring, the experts' biases and activation).
//
// HF checkpoints store each layer's experts fused (gate_up_proj, gate and up rows interleaved; down_proj) either
// in MXFP4 blocks with a nibble order of their own (`*_blocks` / `*_scales`, the released checkpoints) or as float
// tensors in x @ W layout (dequantized re-uploads); the loader repacks them (ArchSpec::hf_oai_experts) into the
// GGUF's per-expert {out, in} matrices, MXFP4 bit for bit as llama.cpp's converter writes them.
// docs/design/gpt_oss.md has the whole specification.
#include <cmath>
#include <nlohmann/json.hpp>

#include "base/logging.h"
#include "format/gguf.h"
#include "model/arch/arch.h"
#include "model/arch/blocks.h"
#include "model/make_tiny.h"

namespace deepinfer {
namespace {

constexpr int kSwaPeriod = 2;            // llama.cpp's gpt-oss default (its GGUFs write no pattern)
constexpr double kSwigluLimit = 7.0;     // ggml's swiglu_oai and transformers' GptOssExperts (config swiglu_limit)

// The settings both formats share once the sizes are read.
void SetFamilyRules(ModelConfig* c) {
  c->ffn_act = FfnAct::kSwigluOai;
  c->attn_out_bias = true;
  c->attn_sinks = true;
  c->moe_biases = true;
  c->router_softmax_topk = true;
  c->norm_topk_prob = false;  // the softmax over the k chosen already sums to one
}

// YaRN's cos/sin magnitude for a factor (transformers' get_mscale(factor), the product of llama.cpp's
// yarn_attn_factor and ggml's own 1 + 0.1 ln(1 / freq_scale)).
float YarnMscale(double factor) { return static_cast<float>(factor > 1 ? 1.0 + 0.1 * std::log(factor) : 1.0); }

Status GptOssHfConfig(const HfConfigReader& j, ModelConfig* c) {
  const nlohmann::json& js = j.json();
  DI_ASSIGN_OR_RETURN(int64_t experts, j.Int("num_local_experts", -1));
  DI_ASSIGN_OR_RETURN(int64_t used, j.Int("num_experts_per_tok", j.IntOr("experts_per_token", 4)));
  if (experts <= 0 || experts > 4096 || used <= 0 || used > experts) return j.Invalid("num_local_experts / num_experts_per_tok out of range");
  c->n_experts = static_cast<int>(experts);
  c->n_experts_used = static_cast<int>(used);
  c->moe_intermediate = c->intermediate;  // intermediate_size is each expert's width
  DI_ASSIGN_OR_RETURN(double limit, j.Number("swiglu_limit", kSwigluLimit));
  if (limit != kSwigluLimit) return Unimplemented(j.path() + ": swiglu_limit other than 7 is not supported (llama.cpp fixes it at 7)");
  DI_ASSIGN_OR_RETURN(int64_t window, j.Int("sliding_window", 128));
  if (window <= 0 || window > (int64_t{1} << 30)) return j.Invalid("sliding_window out of range");
  c->sliding_window = static_cast<int>(window);
  DI_ASSIGN_OR_RETURN(const bool typed, ReadHfLayerTypes(j, c));
  if (!typed) {
    c->swa_layers = SwaLayerPattern(c->n_layers, kSwaPeriod);
  }
  // rope_scaling (or newer transformers' rope_parameters): YaRN in every released checkpoint.
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!js.contains(key) || !js[key].is_object()) continue;
    const nlohmann::json& rs = js[key];
    const std::string type = rs.value("rope_type", rs.value("type", ""));
    if (type.empty() || type == "default") break;
    if (type != "yarn") return Unimplemented(j.path() + ": gpt-oss with rope_scaling '" + type + "' is not supported");
    auto num = [&](const char* k, double def) { return rs.contains(k) && rs[k].is_number() ? rs[k].get<double>() : def; };
    c->yarn.factor = num("factor", 1.0);
    c->yarn.original_ctx = num("original_max_position_embeddings", 4096.0);
    c->yarn.beta_fast = num("beta_fast", 32.0);
    c->yarn.beta_slow = num("beta_slow", 1.0);
    c->yarn.truncate = !rs.contains("truncate") || !rs["truncate"].is_boolean() || rs["truncate"].get<bool>();
    if (!(c->yarn.factor >= 1 && c->yarn.factor < 1e6 && c->yarn.original_ctx > 0 && c->yarn.beta_fast > 0 && c->yarn.beta_slow > 0))
      return j.Invalid(std::string(key) + " yarn values out of range");
    c->yarn.mscale = YarnMscale(c->yarn.factor) * static_cast<float>(num("attention_factor", 1.0));
    if (rs.contains("rope_theta") && rs["rope_theta"].is_number()) c->rope_theta = rs["rope_theta"].get<double>();
    break;
  }
  SetFamilyRules(c);
  return Status::Ok();
}

Status GptOssGgufConfig(const GgufConfigReader& g, ModelConfig* c) {
  // llama.cpp requires the window; the layer pattern is optional (period 2 by default), the local base too.
  DI_ASSIGN_OR_RETURN(int64_t window, g.Int("attention.sliding_window", 0, true));
  if (window <= 0 || window > (int64_t{1} << 30)) return g.Invalid("attention.sliding_window out of range");
  DI_ASSIGN_OR_RETURN(int64_t period, g.Int("attention.sliding_window_pattern", kSwaPeriod, false));
  if (period < 0 || period > 4096) return g.Invalid("attention.sliding_window_pattern out of range");
  c->sliding_window = static_cast<int>(window);
  c->swa_layers = SwaLayerPattern(c->n_layers, static_cast<int>(period));
  if (auto v = g.Float("rope.freq_base_swa"); v.ok()) c->rope_theta_swa = *v;
  DI_ASSIGN_OR_RETURN(const bool yarn, g.Yarn(&c->yarn));
  if (yarn) {
    // llama.cpp's gpt-oss keeps beta_fast 32 / beta_slow 1 whatever the file says, and rounds the ramp's ends.
    double attn_factor = 1.0;
    if (auto a = g.Float("rope.scaling.attn_factor"); a.ok()) attn_factor = *a;
    c->yarn.mscale = YarnMscale(c->yarn.factor) * static_cast<float>(attn_factor);
  } else if (auto t = g.String("rope.scaling.type"); t.ok() && *t != "none") {
    return Unimplemented(g.path() + ": gpt-oss with rope.scaling.type '" + *t + "' is not supported");
  }
  SetFamilyRules(c);
  return Status::Ok();
}

}  // namespace

const ArchSpec& GptOssArch() {
  static const ArchSpec kSpec{
      .arch = Arch::kGptOss,
      .name = "gpt_oss",
      .hf_names = {"gpt_oss", "GptOssForCausalLM"},
      .hf_class = "GptOssForCausalLM",
      .gguf_arch = "gpt-oss",
      .attn_bias = true,
      .moe = true,
      .hf_oai_experts = true,
      .hf_config = GptOssHfConfig,
      .gguf_config = GptOssGgufConfig,
      .gguf_convertible = [](const ModelConfig& c) -> Status {
        if (c.swa_layers != SwaLayerPattern(c.n_layers, kSwaPeriod))
          return Unimplemented("llama.cpp's gpt-oss windows the even layers only (layer_types differs)");
        // The released configs say truncate: false; GGUF has no key for it and llama.cpp rounds the ramp to whole
        // dims for every gpt-oss GGUF. Its converter writes the file all the same, and so does convert.
        if (!c.yarn.truncate)
          DI_LOG_WARN("gpt-oss: the config's YaRN ramp is unrounded (rope_scaling.truncate: false); GGUF cannot say so and "
                      "llama.cpp (and deepinfer on the GGUF) rounds it, as for every gpt-oss GGUF");
        return Status::Ok();
      },
      .gguf_metadata = [](const ModelConfig& c, const std::string& p, GgufWriter& w) {
        WriteGgufExpertCounts(p, c.n_experts, c.n_experts_used, c.moe_intermediate, w);
        w.SetU32(p + "attention.sliding_window", static_cast<uint32_t>(c.sliding_window));
        if (c.yarn.factor > 1) {
          w.SetString(p + "rope.scaling.type", "yarn");
          w.SetF32(p + "rope.scaling.factor", static_cast<float>(c.yarn.factor));
          w.SetU32(p + "rope.scaling.original_context_length", static_cast<uint32_t>(c.yarn.original_ctx));
        }
      },
      .tiny_adjust = [](TinySpec* s) {
        if (s->window == 0) s->window = 16;
        s->swa_period = kSwaPeriod;
        // No dense MLP: intermediate_size is the experts' width (HF), which the GGUF's feed_forward_length repeats
        // (llama.cpp's converter), so both files describe the same configuration.
        s->intermediate = s->moe_intermediate;
      },
      .tiny_hf_config = [](const TinySpec& s, nlohmann::json* cfg) {
        (*cfg)["num_local_experts"] = s.experts;
        (*cfg)["num_experts_per_tok"] = s.experts_used;
        (*cfg)["intermediate_size"] = s.moe_intermediate;
        (*cfg)["sliding_window"] = s.window;
        std::vector<std::string> types;
        for (bool w : SwaLayerPattern(s.layers, kSwaPeriod)) types.push_back(w ? "sliding_attention" : "full_attention");
        (*cfg)["layer_types"] = types;
        (*cfg)["attention_bias"] = true;
        (*cfg)["swiglu_limit"] = kSwigluLimit;
        // The released configs' YaRN (factor 32 over 4096), rounded as llama.cpp rounds it so both files agree.
        (*cfg)["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 32.0}, {"original_max_position_embeddings", 4096},
                                  {"beta_fast", 32.0}, {"beta_slow", 1.0}, {"truncate", true}};
      },
      .tiny_gguf_metadata = [](const TinySpec& s, const std::string& p, GgufWriter& w) {
        WriteGgufExpertCounts(p, s.experts, s.experts_used, s.moe_intermediate, w);
        w.SetU32(p + "attention.sliding_window", static_cast<uint32_t>(s.window));
        w.SetString(p + "rope.scaling.type", "yarn");
        w.SetF32(p + "rope.scaling.factor", 32.f);
        w.SetU32(p + "rope.scaling.original_context_length", 4096);
      },
      .tensor_names = {
          // The pre-MLP norm: GGUF calls it post_attention_norm (llama.cpp's attn_post_norm), HF
          // post_attention_layernorm; never the sandwich norm kAttnPostNorm, which would be applied to the output.
          {TensorId::kFfnNorm, WeightFormat::kGguf, "post_attention_norm.weight"},
          {TensorId::kFfnRouter, WeightFormat::kHf, "mlp.router.weight"},
          {TensorId::kFfnRouterBias, WeightFormat::kHf, "mlp.router.bias"},
          // The fused experts (hf_oai_experts): gate and up are the even and odd rows of gate_up_proj.
          {TensorId::kFfnGateExps, WeightFormat::kHf, "mlp.experts.gate_up_proj"},
          {TensorId::kFfnUpExps, WeightFormat::kHf, "mlp.experts.gate_up_proj"},
          {TensorId::kFfnDownExps, WeightFormat::kHf, "mlp.experts.down_proj"},
          {TensorId::kFfnGateExpsBias, WeightFormat::kHf, "mlp.experts.gate_up_proj_bias"},
          {TensorId::kFfnUpExpsBias, WeightFormat::kHf, "mlp.experts.gate_up_proj_bias"},
          {TensorId::kFfnDownExpsBias, WeightFormat::kHf, "mlp.experts.down_proj_bias"},
      },
      .layer_tensors = GqaLayerTensors,
  };
  return kSpec;
}

}  // namespace deepinfer
