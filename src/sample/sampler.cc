#include "sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "sample/philox.h"

namespace deepinfer {

Status SamplingParams::Validate() const {
  if (!std::isfinite(temperature) || temperature < 0) return InvalidArgument("temperature must be >= 0");
  if (!(top_p > 0.f && top_p <= 1.f)) return InvalidArgument("top_p must be in (0, 1]");
  if (!(min_p >= 0.f && min_p <= 1.f)) return InvalidArgument("min_p must be in [0, 1]");
  if (top_k < 0) return InvalidArgument("top_k must be >= 0 (0 disables it)");
  return Status::Ok();
}

int32_t ArgMax(const float* logits, int n) {
  int32_t best = 0;
  for (int i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

int32_t SampleToken(const float* logits, int n, const SamplingParams& p, uint64_t position) {
  if (p.greedy()) return ArgMax(logits, n);
  // Candidates sorted by logit (ties by id, so the order is deterministic).
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  int keep = n;
  if (p.top_k > 0 && p.top_k < n) {
    keep = p.top_k;
    std::partial_sort(idx.begin(), idx.begin() + keep, idx.end(), by_logit);
  } else {
    std::sort(idx.begin(), idx.end(), by_logit);
  }
  std::vector<double> prob(keep);
  const double mx = logits[idx[0]] / p.temperature;
  double sum = 0;
  for (int i = 0; i < keep; ++i) sum += prob[i] = std::exp(logits[idx[i]] / p.temperature - mx);
  for (auto& v : prob) v /= sum;
  if (p.top_p < 1.f) {  // smallest prefix whose mass reaches top_p
    double cum = 0;
    int cut = keep;
    for (int i = 0; i < keep; ++i) {
      cum += prob[i];
      if (cum >= p.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
  }
  if (p.min_p > 0.f) {
    const double floor = prob[0] * p.min_p;
    int cut = 1;
    while (cut < keep && prob[cut] >= floor) ++cut;
    keep = cut;
  }
  double total = 0;
  for (int i = 0; i < keep; ++i) total += prob[i];
  const double u = UniformAt(p.seed, position) * total;
  double cum = 0;
  for (int i = 0; i < keep; ++i) {
    cum += prob[i];
    if (u < cum) return idx[i];
  }
  return idx[keep - 1];
}

}  // namespace deepinfer
