#include "model/layers/router.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace deepinfer {
namespace {

float SqrtSoftplus(float x) { return std::sqrt(x > 20.f ? x : std::log(1.f + std::exp(x))); }

// The k chosen scores as weights: renormalized (DeepSeek-V4: by the sum clamped below at f16's smallest normal,
// as llama.cpp does; V3's sigmoid: sum + 1e-20) and scaled.
void WeighChosen(const RouterConfig& cfg, const float* score, const int32_t* chosen, int32_t* experts, float* weights) {
  const int K = cfg.top_k;
  const bool sqrt_softplus = cfg.scoring == RouterConfig::Scoring::kSqrtSoftplus;
  float total = 0;
  for (int k = 0; k < K; ++k) total += score[chosen[k]];
  if (sqrt_softplus) total = std::max(total, 6.103515625e-5f);
  for (int k = 0; k < K; ++k) {
    float w = score[chosen[k]];
    if (cfg.norm_topk_prob) w /= cfg.scoring == RouterConfig::Scoring::kSigmoid ? total + 1e-20f : total;
    experts[k] = chosen[k];
    // llama.cpp skips a scale of 0 or 1 for DeepSeek-V4 (a 0 would zero the layer).
    weights[k] = sqrt_softplus && cfg.routed_scaling_factor == 0.f ? w : w * cfg.routed_scaling_factor;
  }
}

}  // namespace

void RouteByToken(const RouterConfig& cfg, const float* logits, int n, const int32_t* tokens, const int32_t* tid2eid,
                  int32_t* experts, float* weights) {
  const int E = cfg.n_experts, K = cfg.top_k;
  std::vector<float> score(E);
  for (int t = 0; t < n; ++t) {
    const float* x = logits + static_cast<size_t>(t) * E;
    for (int e = 0; e < E; ++e) score[e] = SqrtSoftplus(x[e]);
    WeighChosen(cfg, score.data(), tid2eid + static_cast<size_t>(tokens[t]) * K, experts + t * K, weights + t * K);
  }
}

void RouteTokens(const RouterConfig& cfg, const float* logits, int n, int32_t* experts, float* weights) {
  const int E = cfg.n_experts, K = cfg.top_k;
  const float kNegInf = -std::numeric_limits<float>::infinity();
  std::vector<float> score(E), select(E), group_val(std::max(1, cfg.n_group));
  std::vector<int32_t> order(E), groups(std::max(1, cfg.n_group));
  auto better = [](const std::vector<float>& v) {
    return [&v](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); };
  };
  for (int t = 0; t < n; ++t) {
    const float* x = logits + static_cast<size_t>(t) * E;
    if (cfg.scoring == RouterConfig::Scoring::kSoftmax) {
      float mx = kNegInf;
      for (int e = 0; e < E; ++e) mx = std::max(mx, x[e]);
      double sum = 0;
      for (int e = 0; e < E; ++e) sum += score[e] = std::exp(x[e] - mx);
      const float inv = static_cast<float>(1.0 / sum);
      for (int e = 0; e < E; ++e) score[e] *= inv;
    } else if (cfg.scoring == RouterConfig::Scoring::kSigmoid) {
      for (int e = 0; e < E; ++e) score[e] = 1.f / (1.f + std::exp(-x[e]));
    } else if (cfg.scoring == RouterConfig::Scoring::kSqrtSoftplus) {
      for (int e = 0; e < E; ++e) score[e] = SqrtSoftplus(x[e]);
    } else {  // kSoftmaxTopK: chosen on the logits themselves, weighted below
      for (int e = 0; e < E; ++e) score[e] = x[e];
    }
    for (int e = 0; e < E; ++e) select[e] = score[e] + (cfg.correction_bias.empty() ? 0.f : cfg.correction_bias[e]);
    if (cfg.n_group > 1 && cfg.topk_group < cfg.n_group) {
      const int per = E / cfg.n_group;
      for (int g = 0; g < cfg.n_group; ++g) {
        const float* s = select.data() + g * per;
        if (cfg.group_score == RouterConfig::GroupScore::kMax) {
          group_val[g] = *std::max_element(s, s + per);
        } else {  // sum of the two largest
          float a = kNegInf, b = kNegInf;
          for (int i = 0; i < per; ++i) {
            if (s[i] > a) b = a, a = s[i];
            else if (s[i] > b) b = s[i];
          }
          group_val[g] = a + (per > 1 ? b : 0.f);
        }
      }
      std::iota(groups.begin(), groups.end(), 0);
      std::sort(groups.begin(), groups.end(), better(group_val));
      for (int gi = cfg.topk_group; gi < cfg.n_group; ++gi)  // masked with -inf, never 0 (biases can be negative)
        std::fill(select.begin() + groups[gi] * per, select.begin() + (groups[gi] + 1) * per, kNegInf);
    }
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + K, order.end(), better(select));
    if (cfg.scoring == RouterConfig::Scoring::kSoftmaxTopK) {
      // ggml_soft_max over the k chosen: expf of each minus the best, summed in double, scaled by 1 / sum in f32.
      const float mx = score[order[0]];
      double sum = 0;
      for (int k = 0; k < K; ++k) sum += weights[t * K + k] = std::exp(score[order[k]] - mx);
      const float inv = static_cast<float>(1.0 / sum);
      for (int k = 0; k < K; ++k) {
        experts[t * K + k] = order[k];
        weights[t * K + k] *= inv;
      }
      continue;
    }
    WeighChosen(cfg, score.data(), order.data(), experts + t * K, weights + t * K);
  }
}

}  // namespace deepinfer
