// Gemma 3 text (Google; HF Gemma3ForCausalLM / model_type gemma3_text, GGUF `gemma3`). A GQA decoder with
// sandwich norms and hybrid attention:
//   x = embed(tokens) * sqrt(hidden)
//   x += RMSNorm_post_attn(attention(RMSNorm_in(x)))   per-head q/k RMSNorm, NeoX RoPE, softmax scale
//                                                       query_pre_attn_scalar^-1/2
//   x += RMSNorm_post_ffw(down(gelu_tanh(gate(h)) * up(h))),  h = RMSNorm_pre_ffw(x)
// Five layers of every six (sliding_window_pattern 6: layer l is local unless l % 6 == 5) attend to the last
// sliding_window positions and rotate with the local base rope_local_base_freq (10k, unscaled); the others
// attend to everything with rope_theta (1M) and the checkpoint's linear rope_scaling (factor 8 on 4B+).
// HF RMSNorm weights are offsets from one (x * (1 + w)): ArchSpec::hf_norm_offset. Its forward: model/models/gemma3.cc.
//
// Gemma3ForConditionalGeneration checkpoints (4B and up) load as their text model: config.json's text_config
// (sparse: transformers' defaults fill it, hf_defaults) and the weights under model.language_model.* or
// language_model.model.* (the loader finds the prefix). Not here: the vision tower, final/attention logit
// soft-capping (Gemma 2's; null in every Gemma 3 config).
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

constexpr int kDefaultSwaPeriod = 6;       // llama.cpp's default when the GGUF has no sliding_window_pattern
constexpr double kDefaultLocalBase = 1e4;  // llama.cpp's rope_freq_base_train_swa default, HF's rope_local_base_freq

void Gemma3LayerTensors(const ModelConfig& c, int layer, LayerWeights& w, TensorList& t) {
  t.Norm(TensorId::kAttnNorm, c.hidden, &w.attn_norm);
  GqaTensors(c, w.gqa, t);
  t.Norm(TensorId::kAttnPostNorm, c.hidden, &w.attn_post_norm);
  t.Norm(TensorId::kFfnNorm, c.hidden, &w.ffn_norm);
  FfnTensors(c, layer, w, t);
  t.Norm(TensorId::kFfnPostNorm, c.hidden, &w.ffn_post_norm);
}

Status Gemma3HfConfig(const HfConfigReader& j, ModelConfig* c) {
  const nlohmann::json& js = j.json();
  for (const char* cap : {"final_logit_softcapping", "attn_logit_softcapping"})
    if (js.contains(cap) && !js[cap].is_null()) return Unimplemented(j.path() + ": Gemma 3 with " + cap + " is not supported");
  const std::string act = j.StringOr("hidden_activation", j.StringOr("hidden_act", "gelu_pytorch_tanh"));
  if (act != "gelu_pytorch_tanh" && act != "gelu_tanh") return j.Invalid("hidden_activation '" + act + "' is not GELU (tanh)");
  c->ffn_act = FfnAct::kGeluTanh;
  c->tie_embeddings = j.BoolOr("tie_word_embeddings", true);  // Gemma's default
  DI_ASSIGN_OR_RETURN(double qpas, j.Number("query_pre_attn_scalar", c->head_dim));
  if (!(qpas > 0)) return j.Invalid("query_pre_attn_scalar must be positive");
  c->query_pre_attn_scalar = static_cast<float>(qpas);
  DI_ASSIGN_OR_RETURN(int64_t window, j.Int("sliding_window", 4096));
  if (window <= 0 || window > (int64_t{1} << 30)) return j.Invalid("sliding_window out of range");
  c->sliding_window = static_cast<int>(window);
  DI_ASSIGN_OR_RETURN(const bool typed, ReadHfLayerTypes(j, c));
  if (!typed) {
    DI_ASSIGN_OR_RETURN(int64_t period, j.Int("sliding_window_pattern", kDefaultSwaPeriod));
    if (period <= 0 || period > 4096) return j.Invalid("sliding_window_pattern out of range");
    c->swa_layers = SwaLayerPattern(c->n_layers, static_cast<int>(period));
  }
  // The local base: rope_local_base_freq, or (newer configs) rope_parameters.sliding_attention.rope_theta.
  double local = kDefaultLocalBase;
  if (js.contains("rope_parameters") && js["rope_parameters"].is_object()) {
    const nlohmann::json& rp = js["rope_parameters"];
    if (rp.contains("sliding_attention") && rp["sliding_attention"].value("rope_theta", 0.0) > 0)
      local = rp["sliding_attention"]["rope_theta"].get<double>();
    if (rp.contains("full_attention") && rp["full_attention"].value("rope_theta", 0.0) > 0)
      c->rope_theta = rp["full_attention"]["rope_theta"].get<double>();
    if (rp.contains("full_attention") && rp["full_attention"].value("rope_type", "default") == "linear")
      c->rope_linear_factor = rp["full_attention"].value("factor", 1.0);
  }
  DI_ASSIGN_OR_RETURN(local, j.Number("rope_local_base_freq", local));
  if (!(local > 0)) return j.Invalid("rope_local_base_freq must be positive");
  c->rope_theta_swa = local;
  c->swa_rope_scaled = false;
  return Status::Ok();
}

Status Gemma3GgufConfig(const GgufConfigReader& g, ModelConfig* c) {
  if (g.Has("final_logit_softcapping") || g.Has("attn_logit_softcapping")) {
    DI_ASSIGN_OR_RETURN(double cap, g.Has("final_logit_softcapping") ? g.Float("final_logit_softcapping") : g.Float("attn_logit_softcapping"));
    if (cap != 0) return Unimplemented(g.path() + ": Gemma 3 with logit soft-capping is not supported");
  }
  c->ffn_act = FfnAct::kGeluTanh;
  // llama.cpp derives the softmax scale from the model's size: 27B (62 layers) uses hidden / heads.
  c->query_pre_attn_scalar = c->n_layers == 62 ? static_cast<float>(c->hidden / c->n_heads) : static_cast<float>(c->head_dim);
  DI_ASSIGN_OR_RETURN(int64_t window, g.Int("attention.sliding_window", 0, false));
  if (window < 0 || window > (int64_t{1} << 30)) return g.Invalid("attention.sliding_window out of range");
  if (window > 0) {
    DI_ASSIGN_OR_RETURN(int64_t period, g.Int("attention.sliding_window_pattern", kDefaultSwaPeriod, false));
    if (period < 0 || period > 4096) return g.Invalid("attention.sliding_window_pattern out of range");
    c->sliding_window = static_cast<int>(window);
    c->swa_layers = SwaLayerPattern(c->n_layers, static_cast<int>(period));
    c->rope_theta_swa = kDefaultLocalBase;
    if (auto v = g.Float("rope.freq_base_swa"); v.ok()) c->rope_theta_swa = *v;
    c->swa_rope_scaled = false;
  }
  return Status::Ok();
}

// The period of a pattern SwaPattern can express (0: none).
int PatternPeriod(const ModelConfig& c) {
  for (int p = 1; p <= c.n_layers; ++p)
    if (SwaLayerPattern(c.n_layers, p) == c.swa_layers) return p;
  return 0;
}

}  // namespace

const ArchSpec& Gemma3Arch() {
  static const ArchSpec kSpec{
      .arch = Arch::kGemma3,
      .name = "gemma3",
      .hf_names = {"gemma3_text", "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"},
      .hf_class = "Gemma3ForCausalLM",
      .gguf_arch = "gemma3",
      .qk_norm = QkNorm::kPerHead,
      .adds_bos = true,
      .hf_norm_offset = 1.f,
      // transformers' Gemma3TextConfig: the 4B/12B text_config names only what differs from these.
      .hf_defaults = R"({"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
          "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 131072,
          "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "query_pre_attn_scalar": 256, "sliding_window": 4096,
          "rope_local_base_freq": 10000.0, "tie_word_embeddings": true})",
      .hf_config = Gemma3HfConfig,
      .gguf_config = Gemma3GgufConfig,
      .gguf_convertible = [](const ModelConfig& c) -> Status {
        if (c.sliding_window > 0 && PatternPeriod(c) == 0)
          return Unimplemented("llama.cpp's gemma3 windows every layer but each sliding_window_pattern-th (layer_types differs)");
        if (c.query_pre_attn_scalar != (c.n_layers == 62 ? static_cast<float>(c.hidden / c.n_heads) : static_cast<float>(c.head_dim)))
          return Unimplemented("llama.cpp's gemma3 derives query_pre_attn_scalar from the model size (the config's differs)");
        return Status::Ok();
      },
      .gguf_metadata = [](const ModelConfig& c, const std::string& prefix, GgufWriter& w) {
        if (c.sliding_window > 0) {
          w.SetU32(prefix + "attention.sliding_window", static_cast<uint32_t>(c.sliding_window));
          w.SetU32(prefix + "attention.sliding_window_pattern", static_cast<uint32_t>(PatternPeriod(c)));
          w.SetF32(prefix + "rope.freq_base_swa", static_cast<float>(c.rope_theta_swa));
        }
      },
      .tiny_adjust = [](TinySpec* s) {
        if (s->window == 0) s->window = 16;
        if (s->swa_period == 0) s->swa_period = std::min(kDefaultSwaPeriod, s->layers);
      },
      .tiny_hf_config = [](const TinySpec& s, nlohmann::json* cfg) {
        (*cfg)["sliding_window"] = s.window;
        (*cfg)["sliding_window_pattern"] = s.swa_period;
        std::vector<std::string> types;
        for (bool w : SwaLayerPattern(s.layers, s.swa_period)) types.push_back(w ? "sliding_attention" : "full_attention");
        (*cfg)["layer_types"] = types;
        (*cfg)["rope_local_base_freq"] = kDefaultLocalBase;
        (*cfg)["query_pre_attn_scalar"] = s.head_dim;
        (*cfg)["hidden_activation"] = "gelu_pytorch_tanh";
        (*cfg)["final_logit_softcapping"] = nullptr;
        (*cfg)["attn_logit_softcapping"] = nullptr;
        (*cfg)["model_type"] = "gemma3_text";
      },
      .tiny_gguf_metadata = [](const TinySpec& s, const std::string& prefix, GgufWriter& w) {
        w.SetU32(prefix + "attention.sliding_window", static_cast<uint32_t>(s.window));
        w.SetU32(prefix + "attention.sliding_window_pattern", static_cast<uint32_t>(s.swa_period));
        w.SetF32(prefix + "rope.freq_base_swa", static_cast<float>(kDefaultLocalBase));
      },
      .tensor_names = {
          {TensorId::kFfnNorm, WeightFormat::kHf, "pre_feedforward_layernorm.weight"},
      },
      .forward = Gemma3Forward,
      .layer_tensors = Gemma3LayerTensors,
  };
  return kSpec;
}

}  // namespace deepinfer
