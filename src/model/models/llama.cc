// Llama's forward, and that of every family built the same way (see forwards.h): token embeddings, then per
// layer two pre-norm residual blocks,
//   x += attention(RMSNorm(x))   GQA (optional q/k biases, per-head q/k norm) or MLA, by the weights
//   x += mlp(RMSNorm(x))         dense SwiGLU or routed experts (+ shared experts), by the layer
// Under expert parallelism with a communication stream the layers run as two overlapped micro-batches.
#include "model/forward_pass.h"
#include "model/models/forwards.h"

namespace deepinfer {

Status PreNormLayer(ForwardPass& f, const LayerWeights& L, int kv_layer, PagedKvCache& kv, int moe_layer, bool rope) {
  const Rows all = f.all();
  f.Norm(L.attn_norm, all);
  DI_RETURN_IF_ERROR(f.Attention(L, kv_layer, kv, all, rope));
  f.AddResidual(all);
  f.Norm(L.ffn_norm, all);
  DI_RETURN_IF_ERROR(f.Mlp(L, moe_layer));
  f.AddResidual(all);
  return Status::Ok();
}

Status LlamaForward(ForwardPass& f, PagedKvCache& kv) {
  DI_RETURN_IF_ERROR(f.Embed(f.model().tok_embd));
  if (f.overlapped()) return PreNormLayersOverlapped(f, kv);
  for (int l = 0; l < f.config().n_layers; ++l) DI_RETURN_IF_ERROR(PreNormLayer(f, f.model().layers[l], l, kv, l));
  return Status::Ok();
}

}  // namespace deepinfer
