// Qwen3 (dense): Llama's network with a per-head RMSNorm on q and k before RoPE, NeoX RoPE, no biases.
#include "model/arch/arch.h"
#include "model/arch/blocks.h"

namespace deepinfer {

const ArchSpec& Qwen3Arch() {
  static const ArchSpec kSpec{
      .arch = Arch::kQwen3,
      .name = "qwen3",
      .hf_names = {"qwen3", "Qwen3ForCausalLM"},
      .hf_class = "Qwen3ForCausalLM",
      .gguf_arch = "qwen3",
      .qk_norm = QkNorm::kPerHead,
      // GQA attention with per-head q/k norms, dense SwiGLU MLP.
      .layer_tensors = GqaLayerTensors,
  };
  return kSpec;
}

}  // namespace deepinfer
