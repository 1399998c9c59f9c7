// Gemma 3's forward (GGUF `gemma3`, HF Gemma3ForCausalLM). Sandwich norms: each block's input and output are
// RMS-normed, the output before it joins the residual:
//   x = embed(tokens) * sqrt(hidden)
//   x += RMSNorm_attn_post(attention(RMSNorm_attn(x)))   local layers windowed (ModelConfig::LayerWindow)
//   x += RMSNorm_ffn_post(mlp(RMSNorm_ffn(x)))            GeGLU (the model's FfnAct)
// Which layers are local, their RoPE base and the softmax scale are configuration the attention layer reads
// (llama.cpp: src/models/gemma3.cpp).
#include <cmath>

#include "model/forward_pass.h"
#include "model/models/forwards.h"

namespace deepinfer {

Status Gemma3Forward(ForwardPass& f, PagedKvCache& kv) {
  DI_RETURN_IF_ERROR(f.Embed(f.model().tok_embd));
  const Rows all = f.all();
  f.Scale(std::sqrt(static_cast<float>(f.config().hidden)), all);  // as llama.cpp: sqrtf(n_embd) in f32
  for (int l = 0; l < f.config().n_layers; ++l) {
    const LayerWeights& L = f.model().layers[l];
    f.Norm(L.attn_norm, all);
    DI_RETURN_IF_ERROR(f.Attention(L, l, kv, all));
    f.NormOutput(L.attn_post_norm, all);
    f.AddResidual(all);
    f.Norm(L.ffn_norm, all);
    DI_RETURN_IF_ERROR(f.Mlp(L, l));
    f.NormOutput(L.ffn_post_norm, all);
    f.AddResidual(all);
  }
  return Status::Ok();
}

}  // namespace deepinfer
