// DeepSeek-V4's forward: the residual is `hc` streams per token (hyper-connections); each sublayer reads a mix
// of them and writes back into all of them; the head collapses them before the shared final norm and
// vocabulary projection (Transformer::ForwardBatch does those, from f.x()).
//   X = [e, e, e, e]                                  e = embedding
//   per layer:  X = HC_post(attention(RMSNorm(HC_pre(X))), X)      window + compressed K=V (layers/attention_dsv4.h)
//               X = HC_post(MoE(RMSNorm(HC_pre(X))), X)            hash-routed on the first layers, sqrt-softplus after
//   x = HC_collapse(X)
//
// The MTP block (llama.cpp's deepseek4 graph_mtp) reads the main model's streams X_p at position p, before the
// head, and the embedding of token p + 1:
//   X[s] = eh_proj [RMSNorm(e) enorm, RMSNorm(X_p[s]) hnorm]   for each stream s
//   X = one window-only layer as above (its K=V rows in the MTP cache), routed by score (never hashed)
//   x = HC_collapse(X) with the model's head weights; logits = head(RMSNorm(x) head_norm)
#include <cstring>

#include "model/forward_pass.h"
#include "model/models/forwards.h"

namespace deepinfer {
namespace {

// One V4 layer over the streams X of the whole batch. layer: the attention's layer (n_layers + k: MTP block k);
// moe_layer: the MoE's live placement (-1 for the MTP block).
Status Dsv4Layer(ForwardPass& f, const LayerWeights& L, int layer, int moe_layer, PagedKvCache& kv, float* X) {
  HyperConnection& hc = *f.hc();
  const int n = f.batch().n;
  hc.Pre(L.hc_attn, X, n, f.x());
  f.Norm(L.attn_norm, f.all());
  DI_RETURN_IF_ERROR(f.AttentionDsv4(L, layer, kv));
  hc.Post(f.y(), n, X);
  hc.Pre(L.hc_ffn, X, n, f.x());
  f.Norm(L.ffn_norm, f.all());
  DI_RETURN_IF_ERROR(f.Mlp(L, moe_layer));
  hc.Post(f.y(), n, X);
  return Status::Ok();
}

// The main layers under two-batch overlap (RunLayersOverlapped's schedule with V4's stages): each micro-batch's
// streams are its rows of X, and the hyper-connections keep each micro-batch's post and comb at its own rows, so
// B's MoE output of layer l is mixed back after A's attention of layer l + 1 has run.
Status Dsv4LayersOverlapped(ForwardPass& f, PagedKvCache& kv, float* X) {
  const ModelConfig& c = f.config();
  const size_t row_streams = static_cast<size_t>(c.dsv4.hc) * c.hidden;
  HyperConnection& hc = *f.hc();
  auto streams = [&](Rows r) { return X + static_cast<size_t>(r.row0) * row_streams; };
  auto at = [&](float* base, Rows r) { return base + static_cast<size_t>(r.row0) * c.hidden; };
  OverlapStages stages;
  stages.attention_and_dispatch = [&](const LayerWeights& L, int l, int i, Rows r) -> Status {
    const int n = r.b->n;
    hc.Pre(L.hc_attn, streams(r), n, at(f.x(), r), r.row0);
    f.Norm(L.attn_norm, r);
    DI_RETURN_IF_ERROR(f.AttentionDsv4(L, l, kv, r));
    hc.Post(at(f.y(), r), n, streams(r), r.row0);
    hc.Pre(L.hc_ffn, streams(r), n, at(f.x(), r), r.row0);
    f.Norm(L.ffn_norm, r);
    f.MoeBegin(l, i);
    return Status::Ok();
  };
  stages.finish = [&](int i, Rows r) -> Status {
    DI_RETURN_IF_ERROR(f.MoeEnd(i));
    hc.Post(at(f.y(), r), r.b->n, streams(r), r.row0);
    return Status::Ok();
  };
  stages.whole_layer = [&](const LayerWeights& L, int l) { return Dsv4Layer(f, L, l, l, kv, X); };
  return RunLayersOverlapped(f, stages);
}

}  // namespace

Status DeepseekV4Forward(ForwardPass& f, PagedKvCache& kv) {
  const ModelConfig& c = f.config();
  const int n = f.batch().n, D = c.hidden, h = c.dsv4.hc;
  DI_RETURN_IF_ERROR(f.Embed(f.model().tok_embd));
  float* X = f.streams();
  for (int t = 0; t < n; ++t)
    for (int s = 0; s < h; ++s)
      std::memcpy(X + (static_cast<size_t>(t) * h + s) * D, f.x() + static_cast<size_t>(t) * D, sizeof(float) * D);
  if (f.overlapped()) {
    DI_RETURN_IF_ERROR(Dsv4LayersOverlapped(f, kv, X));
  } else {
    for (int l = 0; l < c.n_layers; ++l) DI_RETURN_IF_ERROR(Dsv4Layer(f, f.model().layers[static_cast<size_t>(l)], l, l, kv, X));
  }
  f.hc()->Collapse(f.model().hc_head, X, n, f.x());
  return Status::Ok();
}

Status DeepseekV4MtpForward(ForwardPass& f, const MtpWeights& P, int k, const float* hidden, PagedKvCache& kv, float* out_hidden) {
  const ModelConfig& c = f.config();
  const int n = f.batch().n, D = c.hidden, h = c.dsv4.hc;
  DI_RETURN_IF_ERROR(f.Embed(P.embed));
  // Each row's h inputs [e ; stream s], e normed once and repeated (llama.cpp norms before it repeats).
  float* in = f.mtp_in();
  for (int r = 0; r < n; ++r) {
    const float* streams = hidden + static_cast<size_t>(f.global_row(r)) * h * D;
    float* row = in + static_cast<size_t>(r) * h * 2 * D;
    f.ops().RmsNorm(f.x() + static_cast<size_t>(r) * D, P.enorm.data(), c.rms_eps, 1, D, row);
    for (int s = 0; s < h; ++s) {
      float* pair = row + static_cast<size_t>(s) * 2 * D;
      if (s > 0) std::memcpy(pair, row, sizeof(float) * D);
      f.ops().RmsNorm(streams + static_cast<size_t>(s) * D, P.hnorm.data(), c.rms_eps, 1, D, pair + D);
    }
  }
  float* X = f.streams();
  if (n > 0) f.ops().MatMul(P.eh_proj, in, n * h, X);
  DI_RETURN_IF_ERROR(Dsv4Layer(f, P.layer, c.n_layers + k, -1, kv, X));
  if (out_hidden && n > 0) std::memcpy(out_hidden, X, sizeof(float) * static_cast<size_t>(n) * h * D);
  f.hc()->Collapse(P.hc_head, X, n, f.x());  // the block's own (DeepSeek's checkpoints), else the model's (GGUF)
  return Status::Ok();
}

}  // namespace deepinfer
