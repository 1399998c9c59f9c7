// Llama 2/3 (and Mistral, the same network): GQA attention with RoPE (llama3 frequency scaling when the
// checkpoint has it), SwiGLU MLP, tied or untied lm_head. GGUF stores q/k rows permuted into adjacent-pair RoPE
// order (llama.cpp's converter); llama.cpp has no "mistral" GGUF architecture, so Mistral GGUFs load as llama.
#include <nlohmann/json.hpp>

#include "format/gguf.h"
#include "model/arch/arch.h"
#include "model/arch/blocks.h"
#include "model/make_tiny.h"

namespace deepinfer {

const ArchSpec& LlamaArch() {
  static const ArchSpec kSpec{
      .arch = Arch::kLlama,
      .name = "llama",
      .hf_names = {"llama", "LlamaForCausalLM"},
      .hf_class = "LlamaForCausalLM",
      .gguf_arch = "llama",
      .adds_bos = true,
      .gguf_rope = RopeStyle::kAdjacentPairs,
      // GQA attention (GGUF q/k rows in adjacent-pair order), dense SwiGLU MLP.
      .layer_tensors = GqaLayerTensors,
  };
  return kSpec;
}

const ArchSpec& MistralArch() {
  static const ArchSpec kSpec{
      .arch = Arch::kMistral,
      .name = "mistral",
      .hf_names = {"mistral", "MistralForCausalLM"},
      .hf_class = "MistralForCausalLM",
      .gguf_arch = "llama",
      .adds_bos = true,
      .gguf_rope = RopeStyle::kAdjacentPairs,
      // make-tiny --window W: Mistral 7B v0.1's layout, every layer windowed (GGUF: attention.sliding_window, which
      // deepinfer honours and llama.cpp's llama ignores).
      .tiny_hf_config = [](const TinySpec& s, nlohmann::json* cfg) {
        if (s.window > 0) (*cfg)["sliding_window"] = s.window;
        else (*cfg)["sliding_window"] = nullptr;
      },
      .tiny_gguf_metadata = [](const TinySpec& s, const std::string& prefix, GgufWriter& w) {
        if (s.window > 0) w.SetU32(prefix + "attention.sliding_window", static_cast<uint32_t>(s.window));
      },
      .layer_tensors = GqaLayerTensors,  // Llama's
  };
  return kSpec;
}

}  // namespace deepinfer
