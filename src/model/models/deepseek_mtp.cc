// DeepSeek-V3's MTP (next-n) module: from the main model's final-normed state h at position p and the embedding
// of token p + 1, one more pre-norm decoder layer predicts token p + 2 (model.h, MtpWeights):
//   x = eh_proj [enorm(embed(t)), hnorm(h)];   x = layer(x);   logits = head(head_norm(x))
#include <cstring>

#include "model/forward_pass.h"
#include "model/models/forwards.h"

namespace deepinfer {

Status DeepseekMtpForward(ForwardPass& f, const MtpWeights& P, int k, const float* hidden, PagedKvCache& kv, float* out_hidden) {
  const ModelConfig& c = f.config();
  const int h = c.hidden, n = f.batch().n;
  DI_RETURN_IF_ERROR(f.Embed(P.embed));  // into x, which eh_proj overwrites below
  float* x = f.x();
  float* in = f.mtp_in();
  for (int r = 0; r < n; ++r) {
    const int g = f.global_row(r);  // hidden holds every row of the batch (context parallelism: a subset is ours)
    float* row = in + static_cast<size_t>(r) * 2 * h;
    f.ops().RmsNorm(x + static_cast<size_t>(r) * h, P.enorm.data(), c.rms_eps, 1, h, row);
    f.ops().RmsNorm(hidden + static_cast<size_t>(g) * h, P.hnorm.data(), c.rms_eps, 1, h, row + h);
  }
  if (n > 0) f.ops().MatMul(P.eh_proj, in, n, x);
  DI_RETURN_IF_ERROR(PreNormLayer(f, P.layer, k, kv, -1));
  if (out_hidden && n > 0) std::memcpy(out_hidden, x, sizeof(float) * static_cast<size_t>(n) * h);
  return Status::Ok();
}

}  // namespace deepinfer
