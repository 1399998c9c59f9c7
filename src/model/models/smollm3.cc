// SmolLM3's forward (GGUF `smollm3`, HF SmolLM3ForCausalLM): Llama's pre-norm layer, except that some layers
// (every fourth by default: ModelConfig::nope_layers) apply no RoPE to q and k, leaving position to the causal
// mask there ("NoPE"). llama.cpp: src/models/smollm3.cpp.
// Its MLP is a dense SwiGLU, its RoPE Llama's (GGUF q/k rows in adjacent-pair order).
#include "model/forward_pass.h"
#include "model/models/forwards.h"

namespace deepinfer {

Status SmolLM3Forward(ForwardPass& f, PagedKvCache& kv) {
  DI_RETURN_IF_ERROR(f.Embed(f.model().tok_embd));
  for (int l = 0; l < f.config().n_layers; ++l)
    DI_RETURN_IF_ERROR(PreNormLayer(f, f.model().layers[l], l, kv, l, /*rope=*/f.config().LayerUsesRope(l)));
  return Status::Ok();
}

}  // namespace deepinfer
