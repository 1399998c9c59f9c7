// Manifold-constrained hyper-connections (DeepSeek-V4's mHC): the residual is `hc` streams of `hidden` per token
// instead of one. Before each sublayer (attention, MLP) a learned mix of the RMS-normed streams gives three
// things per token: the weights `pre` that collapse the streams into the sublayer's input, the weights `post`
// that spread its output back over the streams, and an hc x hc mixing matrix `comb` of the streams themselves,
// made doubly stochastic by Sinkhorn iterations:
//   x = sum_s pre_s X[s];   X'[dst] = post_dst y + sum_src comb[dst, src] X[src]
// The head collapses the streams once more with its own weights (no post, no comb). Every sum runs in a fixed
// order per token (llama.cpp's unfused graph order), so a row's result does not depend on its batch.
#pragma once
#include <vector>

#include "kernels/ops.h"
#include "tensor/tensor.h"

namespace deepinfer {

struct HcWeights {
  // fn: {mix, hc * hidden} in f32 (mix = (2 + hc) hc for a sublayer, hc for the head); base {mix}; scale {3}
  // (pre, post, comb) for a sublayer, {1} for the head.
  std::vector<float> fn, base, scale;
};

class HyperConnection {
 public:
  HyperConnection(const Ops& ops, int hc, int hidden, int sinkhorn_iters, float hc_eps, float rms_eps, int max_tokens);
  // x (n rows of hidden) = the sublayer's input from the streams X (n rows of hc x hidden); keeps each row's post
  // and comb for Post, at rows row0.. of its state (two-batch overlap: each micro-batch's rows keep theirs while
  // the other's sublayers run).
  void Pre(const HcWeights& w, const float* X, int n, float* x, int row0 = 0);
  // X (n rows of hc x hidden) = post * y + comb X, with the post and comb the last Pre with this row0 kept.
  void Post(const float* y, int n, float* X, int row0 = 0);
  // x (n rows of hidden) = the head's collapse of X.
  void Collapse(const HcWeights& w, const float* X, int n, float* x);

 private:
  // mix_ = fn . RMSNorm(flatten(X)) for n rows, mix values each.
  void Mix(const HcWeights& w, const float* X, int n, int mix);
  void Sinkhorn(float* c) const;  // one row's hc x hc matrix, c[dst + hc * src]

  const Ops& ops_;
  int hc_, hidden_, iters_;
  float hc_eps_, rms_eps_;
  std::vector<float> ones_, flat_, mix_, pre_, post_, comb_, tmp_;
};

}  // namespace deepinfer
