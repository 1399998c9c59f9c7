// OLMo 2's forward (GGUF `olmo2`, HF Olmo2ForCausalLM). Its layer norms a block's output rather than its input:
//   x += RMSNorm_attn_post(attention(x))   q and k each RMS-normed over the whole projection, NeoX RoPE
//   x += RMSNorm_ffn_post(mlp(x))          dense SwiGLU
// No norm precedes either block, so each reads the residual stream itself. The final norm and the head are
// the shared ones (Transformer). What differs from Llama is composition only: the same attention, MLP and norm
// kernels in another order (llama.cpp: src/models/olmo2.cpp).
#include "model/forward_pass.h"
#include "model/models/forwards.h"

namespace deepinfer {

Status Olmo2Forward(ForwardPass& f, PagedKvCache& kv) {
  DI_RETURN_IF_ERROR(f.Embed(f.model().tok_embd));
  const Rows all = f.all();
  for (int l = 0; l < f.config().n_layers; ++l) {
    const LayerWeights& L = f.model().layers[l];
    f.Input(all);
    DI_RETURN_IF_ERROR(f.Attention(L, l, kv, all));
    f.NormOutput(L.attn_post_norm, all);
    f.AddResidual(all);
    f.Input(all);
    DI_RETURN_IF_ERROR(f.Mlp(L, l));
    f.NormOutput(L.ffn_post_norm, all);
    f.AddResidual(all);
  }
  return Status::Ok();
}

}  // namespace deepinfer
