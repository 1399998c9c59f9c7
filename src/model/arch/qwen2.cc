// Qwen2 / Qwen2.5: Llama's network with q/k/v projection biases and NeoX (rotate-half) RoPE in both formats.
#include "model/arch/arch.h"
#include "model/arch/blocks.h"

namespace deepinfer {

const ArchSpec& Qwen2Arch() {
  static const ArchSpec kSpec{
      .arch = Arch::kQwen2,
      .name = "qwen2",
      .hf_names = {"qwen2", "Qwen2ForCausalLM"},
      .hf_class = "Qwen2ForCausalLM",
      .gguf_arch = "qwen2",
      .attn_bias = true,
      // GQA attention with q/k/v biases, dense SwiGLU MLP.
      .layer_tensors = GqaLayerTensors,
  };
  return kSpec;
}

}  // namespace deepinfer
