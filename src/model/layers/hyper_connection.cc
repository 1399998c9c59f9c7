#include "model/layers/hyper_connection.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace deepinfer {
namespace {

float Sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

}  // namespace

HyperConnection::HyperConnection(const Ops& ops, int hc, int hidden, int sinkhorn_iters, float hc_eps, float rms_eps,
                                 int max_tokens)
    : ops_(ops), hc_(hc), hidden_(hidden), iters_(sinkhorn_iters), hc_eps_(hc_eps), rms_eps_(rms_eps) {
  const size_t m = static_cast<size_t>(max_tokens), width = static_cast<size_t>(hc) * hidden;
  ones_.assign(width, 1.f);
  flat_.resize(m * width);
  mix_.resize(m * static_cast<size_t>((2 + hc) * hc));
  pre_.resize(m * hc);
  post_.resize(m * hc);
  comb_.resize(m * hc * hc);
  tmp_.resize(width);
}

void HyperConnection::Mix(const HcWeights& w, const float* X, int n, int mix) {
  const int width = hc_ * hidden_;
  ops_.RmsNorm(X, ones_.data(), rms_eps_, n, width, flat_.data());
  TensorView fn;
  fn.dtype = DType::kF32;
  fn.shape = {mix, width};
  fn.data = w.fn.data();
  fn.nbytes = w.fn.size() * sizeof(float);
  ops_.MatMul(fn, flat_.data(), n, mix_.data());
}

void HyperConnection::Sinkhorn(float* c) const {
  const int h = hc_;
  // Per source stream: a softmax over the destinations, plus eps.
  for (int src = 0; src < h; ++src) {
    float* col = c + h * src;
    float mx = col[0];
    for (int d = 1; d < h; ++d) mx = std::max(mx, col[d]);
    double sum = 0;
    for (int d = 0; d < h; ++d) sum += col[d] = std::exp(col[d] - mx);
    const float inv = static_cast<float>(1.0 / sum);
    for (int d = 0; d < h; ++d) col[d] = col[d] * inv + hc_eps_;
  }
  // Element (dst, src) is c[dst + h * src]: normalizing each of h lines of h elements, a line `stride` apart from
  // the next and its elements `step` apart, in the same summation order either way.
  auto normalize = [&](int stride, int step) {
    for (int line = 0; line < h; ++line) {
      float* v = c + static_cast<ptrdiff_t>(line) * stride;
      float s = 0;
      for (int k = 0; k < h; ++k) s += v[k * step];
      s += hc_eps_;
      for (int k = 0; k < h; ++k) v[k * step] /= s;
    }
  };
  auto over_src = [&] { normalize(1, h); };  // each destination's row over the sources
  auto over_dst = [&] { normalize(h, 1); };  // each source's column over the destinations
  over_src();
  for (int i = 1; i < iters_; ++i) {
    over_dst();
    over_src();
  }
}

void HyperConnection::Pre(const HcWeights& w, const float* X, int n, float* x, int row0) {
  const int h = hc_, mix = (2 + h) * h, D = hidden_;
  Mix(w, X, n, mix);
  for (int t = 0; t < n; ++t) {
    const float* m = mix_.data() + static_cast<size_t>(t) * mix;
    float* pre = pre_.data() + static_cast<size_t>(t) * h;
    float* post = post_.data() + static_cast<size_t>(row0 + t) * h;
    float* comb = comb_.data() + static_cast<size_t>(row0 + t) * h * h;
    for (int s = 0; s < h; ++s) {
      pre[s] = Sigmoid(m[s] * w.scale[0] + w.base[s]) + hc_eps_;
      post[s] = 2.f * Sigmoid(m[h + s] * w.scale[1] + w.base[h + s]);
    }
    for (int i = 0; i < h * h; ++i) comb[i] = m[2 * h + i] * w.scale[2] + w.base[2 * h + i];
    Sinkhorn(comb);
    const float* Xt = X + static_cast<size_t>(t) * h * D;
    float* xt = x + static_cast<size_t>(t) * D;
    for (int i = 0; i < D; ++i) xt[i] = Xt[i] * pre[0];
    for (int s = 1; s < h; ++s)
      for (int i = 0; i < D; ++i) xt[i] += Xt[static_cast<size_t>(s) * D + i] * pre[s];
  }
}

void HyperConnection::Post(const float* y, int n, float* X, int row0) {
  const int h = hc_, D = hidden_;
  std::vector<float>& out = tmp_;
  for (int t = 0; t < n; ++t) {
    const float* post = post_.data() + static_cast<size_t>(row0 + t) * h;
    const float* comb = comb_.data() + static_cast<size_t>(row0 + t) * h * h;
    const float* yt = y + static_cast<size_t>(t) * D;
    float* Xt = X + static_cast<size_t>(t) * h * D;
    for (int dst = 0; dst < h; ++dst) {
      float* o = out.data() + static_cast<size_t>(dst) * D;
      for (int i = 0; i < D; ++i) o[i] = yt[i] * post[dst];
      for (int src = 0; src < h; ++src) {
        const float c = comb[dst + h * src];
        const float* xs = Xt + static_cast<size_t>(src) * D;
        for (int i = 0; i < D; ++i) o[i] += xs[i] * c;
      }
    }
    std::memcpy(Xt, out.data(), sizeof(float) * h * D);
  }
}

void HyperConnection::Collapse(const HcWeights& w, const float* X, int n, float* x) {
  const int h = hc_, D = hidden_;
  Mix(w, X, n, h);
  for (int t = 0; t < n; ++t) {
    const float* m = mix_.data() + static_cast<size_t>(t) * h;
    float pre[16];
    for (int s = 0; s < h; ++s) pre[s] = Sigmoid(m[s] * w.scale[0] + w.base[s]) + hc_eps_;
    const float* Xt = X + static_cast<size_t>(t) * h * D;
    float* xt = x + static_cast<size_t>(t) * D;
    for (int i = 0; i < D; ++i) xt[i] = Xt[i] * pre[0];
    for (int s = 1; s < h; ++s)
      for (int i = 0; i < D; ++i) xt[i] += Xt[static_cast<size_t>(s) * D + i] * pre[s];
  }
}

}  // namespace deepinfer
