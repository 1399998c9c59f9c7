#include "sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "sample/philox.h"

namespace deepinfer {

Status SamplingParams::Validate(int vocab_size) const {
  if (!std::isfinite(temperature) || temperature < 0) return InvalidArgument("temperature must be >= 0");
  if (!(presence_penalty >= -2.f && presence_penalty <= 2.f))
    return InvalidArgument("presence_penalty must be in [-2, 2]");
  if (!(frequency_penalty >= -2.f && frequency_penalty <= 2.f))
    return InvalidArgument("frequency_penalty must be in [-2, 2]");
  if (!(repetition_penalty > 0.f && std::isfinite(repetition_penalty)))
    return InvalidArgument("repetition_penalty must be > 0");
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || (vocab_size > 0 && id >= vocab_size))
      return InvalidArgument("logit_bias token id " + std::to_string(id) + " is outside the vocabulary");
    if (!(bias >= -100.f && bias <= 100.f)) return InvalidArgument("logit_bias values must be in [-100, 100]");
  }
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

void ApplyPenalties(float* logits, int vocab, const SamplingParams& p, const int32_t* history, int len, int prompt_len,
                    std::vector<int32_t>* counts) {
  for (const auto& [id, bias] : p.logit_bias)
    if (id >= 0 && id < vocab) logits[id] += bias;
  if (!p.has_penalties()) return;
  counts->resize(vocab, 0);
  int32_t* cnt = counts->data();
  if (p.repetition_penalty != 1.f) {
    std::vector<uint8_t> seen(vocab, 0);
    for (int i = 0; i < len; ++i) {
      const int32_t t = history[i];
      if (t < 0 || t >= vocab || seen[t]) continue;
      seen[t] = 1;
      logits[t] = logits[t] > 0 ? logits[t] / p.repetition_penalty : logits[t] * p.repetition_penalty;
    }
  }
  if (p.presence_penalty != 0.f || p.frequency_penalty != 0.f) {
    for (int i = prompt_len; i < len; ++i)
      if (history[i] >= 0 && history[i] < vocab) ++cnt[history[i]];
    for (int i = prompt_len; i < len; ++i) {
      const int32_t t = history[i];
      if (t < 0 || t >= vocab || cnt[t] == 0) continue;
      logits[t] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(cnt[t]);
      cnt[t] = 0;  // applied once per distinct token; also restores the scratch to zeros
    }
  }
}

TopLogprobs ComputeLogprobs(const float* logits, int n, int32_t token, int k) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < n; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  TopLogprobs out;
  out.logprob = static_cast<float>(logits[token] - lse);
  k = std::min(k, n);
  if (k > 0) {
    std::vector<int32_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (int i = 0; i < k; ++i) out.top.emplace_back(idx[i], static_cast<float>(logits[idx[i]] - lse));
  }
  return out;
}

namespace {

// exp(x) for x <= 0 (a scaled logit minus the largest), in place, branch-free so the loop vectorizes: Cody-Waite
// reduction x = k ln2 + r, |r| <= ln2 / 2, a degree-12 Taylor polynomial (relative error ~1e-16), then 2^k by
// exponent bits. Below -708 the result would be subnormal and is flushed to 0, which changes nothing next to
// the largest candidate's 1. libm's exp, one call per token, was most of a 128k-token draw.
// Plain C++ (no per-ISA clones: their ifunc resolvers run before ThreadSanitizer's runtime is up), so the
// compiler's baseline vectors, and the same bits on every machine.
void ExpNonPositive(double* v, int n) {
  for (int i = 0; i < n; ++i) {
    const double x = v[i] < -708.0 ? -708.0 : v[i];
    const double shifter = 0x1.8p52;  // adding it rounds to an integer held in the low mantissa bits
    const double t = x * 1.4426950408889634 + shifter;
    const double kd = t - shifter;
    const double r = (x - kd * 0.693147180369123816490) - kd * 1.90821492927058770002e-10;
    double q = 1.0 / 479001600.0;
    q = q * r + 1.0 / 39916800.0;
    q = q * r + 1.0 / 3628800.0;
    q = q * r + 1.0 / 362880.0;
    q = q * r + 1.0 / 40320.0;
    q = q * r + 1.0 / 5040.0;
    q = q * r + 1.0 / 720.0;
    q = q * r + 1.0 / 120.0;
    q = q * r + 1.0 / 24.0;
    q = q * r + 1.0 / 6.0;
    q = q * r + 0.5;
    q = q * r + 1.0;
    q = q * r + 1.0;
    int64_t tbits, sbits;  // k itself, read from t's mantissa (no float-to-int conversion, so NaN is harmless)
    std::memcpy(&tbits, &t, sizeof t);
    std::memcpy(&sbits, &shifter, sizeof shifter);
    const uint64_t bits = static_cast<uint64_t>(tbits - sbits + 1023) << 52;
    double scale;
    std::memcpy(&scale, &bits, sizeof scale);
    v[i] = v[i] < -708.0 ? 0.0 : q * scale;
  }
}

// Four running sums (the order is fixed, so the result is too): one serial chain of 128k additions was as slow
// as the exponentials.
double Sum(const double* v, int n) {
  double acc[4] = {0, 0, 0, 0};
  int i = 0;
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; ++j) acc[j] += v[i + j];
  for (; i < n; ++i) acc[0] += v[i];
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

}  // namespace

FilteredDistribution Filter(const float* logits, int n, const SamplingParams& p) {
  FilteredDistribution d;
  Filter(logits, n, p, &d);
  return d;
}

void Filter(const float* logits, int n, const SamplingParams& p, FilteredDistribution* out) {
  FilteredDistribution& d = *out;
  std::vector<int32_t>& idx = d.ids;
  std::vector<double>& prob = d.prob;
  // Tokens at -inf (a grammar mask refuses them) have probability 0: leaving them out changes no draw and makes
  // a masked row cost its allowed tokens only.
  idx.clear();
  idx.reserve(n);
  for (int i = 0; i < n; ++i)
    if (logits[i] != -std::numeric_limits<float>::infinity()) idx.push_back(i);
  if (idx.empty()) {  // every token refused: the unconstrained candidates, as before
    idx.resize(n);
    std::iota(idx.begin(), idx.end(), 0);
  }
  n = static_cast<int>(idx.size());
  // Candidates in descending logit order (ties by id), so the order is deterministic.
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  bool sorted = false;
  if (p.top_k > 0 && p.top_k < n) {
    std::partial_sort(idx.begin(), idx.begin() + p.top_k, idx.end(), by_logit);
    idx.resize(p.top_k);
    n = p.top_k;
    sorted = true;
  }
  // Without top-k the candidates stay in id order unless top-p needs (part of) the descending order.
  double mx = -std::numeric_limits<double>::infinity();
  for (int32_t t : idx) mx = std::max(mx, static_cast<double>(logits[t] / p.temperature));
  prob.resize(n);
  for (int i = 0; i < n; ++i) prob[i] = logits[idx[i]] / p.temperature - mx;
  ExpNonPositive(prob.data(), n);
  const double sum = Sum(prob.data(), n);
  for (auto& v : prob) v /= sum;
  int keep = n;
  if (p.min_p > 0.f) {
    // min-p keeps the candidates at or above a floor (min_p x the largest probability): a prefix of the
    // descending order, found without sorting. The ones below it go first, in the current order.
    const double floor = *std::max_element(prob.begin(), prob.end()) * p.min_p;
    keep = 0;
    for (int i = 0; i < n; ++i)
      if (prob[i] >= floor) {
        idx[keep] = idx[i];
        prob[keep++] = prob[i];
      }
  }
  if (p.top_p < 1.f) {
    // top-p cuts the smallest prefix of the descending order whose mass reaches top_p. Only as much of it as
    // the cut reads is sorted: blocks of the largest remaining candidates (nth_element, then sort), doubling.
    // A trained model's nucleus is a few hundred tokens; a flat distribution still sorts nearly everything.
    std::vector<std::pair<int32_t, double>> cand(keep);
    for (int i = 0; i < keep; ++i) cand[i] = {idx[i], prob[i]};
    auto by_cand = [&](const std::pair<int32_t, double>& a, const std::pair<int32_t, double>& b) {
      return by_logit(a.first, b.first);
    };
    const int m = keep;
    int ready = sorted ? m : 0;  // cand[0 .. ready) hold the largest candidates, in order
    auto ensure = [&](int k) {
      if (k <= ready) return;
      k = std::min(m, std::max({k, 256, 2 * ready}));
      if (k < m) std::nth_element(cand.begin() + ready, cand.begin() + k, cand.end(), by_cand);
      std::sort(cand.begin() + ready, cand.begin() + k, by_cand);
      ready = k;
    };
    double cum = 0;
    for (int i = 0; i < m; ++i) {
      ensure(i + 1);
      cum += cand[i].second;
      if (cum >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
    ensure(keep);
    for (int i = 0; i < keep; ++i) {
      idx[i] = cand[i].first;
      prob[i] = cand[i].second;
    }
  }
  idx.resize(keep);
  prob.resize(keep);
  d.total = Sum(prob.data(), keep);
}

int32_t DrawFrom(const FilteredDistribution& d, float uniform) {
  const double u = uniform * d.total;
  double cum = 0;
  const int keep = static_cast<int>(d.ids.size());
  for (int i = 0; i < keep; ++i) {
    cum += d.prob[i];
    if (u < cum) return d.ids[i];
  }
  return d.ids[keep - 1];
}

double FilteredDistribution::Prob(int32_t token) const {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] == token) return prob[i] / total;
  return 0;
}

int32_t SampleToken(const float* logits, int n, const SamplingParams& p, uint64_t position, uint32_t substream) {
  if (p.greedy()) return ArgMax(logits, n);
  thread_local FilteredDistribution d;  // reused: a full vocabulary's candidate lists are up to 1.5 MB
  Filter(logits, n, p, &d);
  return DrawFrom(d, UniformAt(p.seed.value_or(0), position, substream));
}

}  // namespace deepinfer
