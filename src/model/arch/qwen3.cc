// Qwen3 (dense): Llama's network with a per-head RMSNorm on q and k before RoPE, NeoX RoPE, no biases.
#include "model/arch/arch.h"

namespace deepinfer {

const ArchSpec& Qwen3Arch() {
  static const ArchSpec kSpec{
      .arch = Arch::kQwen3,
      .name = "qwen3",
      .hf_names = {"qwen3", "Qwen3ForCausalLM"},
      .hf_class = "Qwen3ForCausalLM",
      .gguf_arch = "qwen3",
      .qk_norm = true,
  };
  return kSpec;
}

}  // namespace deepinfer
