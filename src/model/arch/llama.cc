// Llama 2/3 (and Mistral, the same network): GQA attention with RoPE (llama3 frequency scaling when the
// checkpoint has it), SwiGLU MLP, tied or untied lm_head. GGUF stores q/k rows permuted into adjacent-pair RoPE
// order (llama.cpp's converter); llama.cpp has no "mistral" GGUF architecture, so Mistral GGUFs load as llama.
#include <nlohmann/json.hpp>

#include "model/arch/arch.h"
#include "model/arch/blocks.h"

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
      .tiny_hf_config = [](const TinySpec&, nlohmann::json* cfg) { (*cfg)["sliding_window"] = nullptr; },
      .layer_tensors = GqaLayerTensors,  // Llama's
  };
  return kSpec;
}

}  // namespace deepinfer
