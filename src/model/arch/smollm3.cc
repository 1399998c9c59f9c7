// SmolLM3 (Hugging Face; HF SmolLM3ForCausalLM, GGUF `smollm3`): Llama's network and tensors, except that some
// layers apply no RoPE ("NoPE"): config.json's no_rope_layers lists 1 (RoPE) or 0 (none) per layer, by default
// 0 on every fourth (no_rope_layer_interval 4), which is the only pattern llama.cpp's smollm3 knows. RoPE as
// Llama's: GGUF q/k rows in adjacent-pair order. Its forward: model/models/smollm3.cc.
//
// Not here: the sliding-window variant (use_sliding_window), which no released checkpoint enables.
#include <nlohmann/json.hpp>

#include "model/arch/arch.h"
#include "model/arch/blocks.h"
#include "model/make_tiny.h"

namespace deepinfer {
namespace {

constexpr int kNopeInterval = 4;  // HF's default no_rope_layer_interval; llama.cpp's n_no_rope_layer_step

std::vector<int> EveryNthLayer(int n_layers, int interval) {
  std::vector<int> out;
  for (int l = 0; l < n_layers; ++l)
    if ((l + 1) % interval == 0) out.push_back(l);
  return out;
}

Status ReadSmolLM3HfConfig(const HfConfigReader& j, ModelConfig* c) {
  if (j.BoolOr("use_sliding_window", false))
    return Unimplemented(j.path() + ": SmolLM3 with use_sliding_window is not supported yet");
  const nlohmann::json& list = j.json().contains("no_rope_layers") ? j.json()["no_rope_layers"] : nlohmann::json();
  if (list.is_array()) {
    if (static_cast<int>(list.size()) != c->n_layers)
      return j.Invalid("no_rope_layers has " + std::to_string(list.size()) + " entries for " + std::to_string(c->n_layers) + " layers");
    for (int l = 0; l < c->n_layers; ++l) {
      if (!list[l].is_number_integer() || (list[l] != 0 && list[l] != 1)) return j.Invalid("no_rope_layers entries must be 0 or 1");
      if (list[l] == 0) c->nope_layers.push_back(l);
    }
    return Status::Ok();
  }
  DI_ASSIGN_OR_RETURN(int64_t interval, j.Int("no_rope_layer_interval", kNopeInterval));
  if (interval <= 0 || interval > 4096) return j.Invalid("no_rope_layer_interval out of range");
  c->nope_layers = EveryNthLayer(c->n_layers, static_cast<int>(interval));
  return Status::Ok();
}

}  // namespace

const ArchSpec& SmolLM3Arch() {
  static const ArchSpec kSpec{
      .arch = Arch::kSmolLM3,
      .name = "smollm3",
      .hf_names = {"smollm3", "SmolLM3ForCausalLM"},
      .hf_class = "SmolLM3ForCausalLM",
      .gguf_arch = "smollm3",
      .gguf_rope = RopeStyle::kAdjacentPairs,
      .hf_config = ReadSmolLM3HfConfig,
      .gguf_config = [](const GgufConfigReader&, ModelConfig* c) -> Status {
        c->nope_layers = EveryNthLayer(c->n_layers, kNopeInterval);
        return Status::Ok();
      },
      .gguf_convertible = [](const ModelConfig& c) -> Status {
        if (c.nope_layers != EveryNthLayer(c.n_layers, kNopeInterval))
          return Unimplemented("llama.cpp's smollm3 skips RoPE on every fourth layer exactly (no_rope_layers differs)");
        return Status::Ok();
      },
      .tiny_hf_config = [](const TinySpec& s, nlohmann::json* cfg) {
        std::vector<int> rope(s.layers, 1);
        for (int l : EveryNthLayer(s.layers, kNopeInterval)) rope[l] = 0;
        (*cfg)["no_rope_layers"] = rope;
        (*cfg)["no_rope_layer_interval"] = kNopeInterval;
        (*cfg)["use_sliding_window"] = false;
      },
      .forward = SmolLM3Forward,
      .layer_tensors = GqaLayerTensors,  // Llama's
  };
  return kSpec;
}

}  // namespace deepinfer
