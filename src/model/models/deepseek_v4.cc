// DeepSeek-V4's forward: the residual is `hc` streams per token (hyper-connections); each sublayer reads a mix
// of them and writes back into all of them; the head collapses them before the shared final norm and
// vocabulary projection (Transformer::ForwardBatch does those, from f.x()).
//   X = [e, e, e, e]                                  e = embedding
//   per layer:  X = HC_post(attention(RMSNorm(HC_pre(X))), X)      window + compressed K=V (layers/attention_dsv4.h)
//               X = HC_post(MoE(RMSNorm(HC_pre(X))), X)            hash-routed on the first layers, sqrt-softplus after
//   x = HC_collapse(X)
#include <cstring>

#include "model/forward_pass.h"
#include "model/models/forwards.h"

namespace deepinfer {

Status DeepseekV4Forward(ForwardPass& f, PagedKvCache& kv) {
  const ModelConfig& c = f.config();
  const int n = f.batch().n, D = c.hidden, h = c.dsv4.hc;
  DI_RETURN_IF_ERROR(f.Embed(f.model().tok_embd));
  float* X = f.streams();
  for (int t = 0; t < n; ++t)
    for (int s = 0; s < h; ++s)
      std::memcpy(X + (static_cast<size_t>(t) * h + s) * D, f.x() + static_cast<size_t>(t) * D, sizeof(float) * D);
  HyperConnection& hc = *f.hc();
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = f.model().layers[static_cast<size_t>(l)];
    hc.Pre(L.hc_attn, X, n, f.x());
    f.Norm(L.attn_norm, f.all());
    DI_RETURN_IF_ERROR(f.dsv4()->Forward(L.dsv4, f.batch(), l, kv, f.xn(), f.y()));
    hc.Post(f.y(), n, X);
    hc.Pre(L.hc_ffn, X, n, f.x());
    f.Norm(L.ffn_norm, f.all());
    DI_RETURN_IF_ERROR(f.Mlp(L, l));
    hc.Post(f.y(), n, X);
  }
  hc.Collapse(f.model().hc_head, X, n, f.x());
  return Status::Ok();
}

}  // namespace deepinfer
