// MoE routing against a plain reference written from the model cards (HF modeling code semantics), on random
// logits with ties and negative correction biases, for the three shipped schemes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "model/layers/router.h"

namespace deepinfer {
namespace {

// Reference: materialize every candidate's (selection score, index), mask groups explicitly, full sort.
void Reference(const RouterConfig& c, const std::vector<float>& x, std::vector<int>* ids, std::vector<double>* w) {
  const int E = c.n_experts;
  std::vector<double> s(E), sel(E);
  if (c.scoring == RouterConfig::Scoring::kSoftmax) {
    double mx = *std::max_element(x.begin(), x.end()), z = 0;
    for (int e = 0; e < E; ++e) z += std::exp(x[e] - mx);
    for (int e = 0; e < E; ++e) s[e] = std::exp(x[e] - mx) / z;
  } else if (c.scoring == RouterConfig::Scoring::kSigmoid) {
    for (int e = 0; e < E; ++e) s[e] = 1 / (1 + std::exp(-static_cast<double>(x[e])));
  } else {  // kSoftmaxTopK: chosen on the logits, weighted by a softmax over the chosen (below)
    for (int e = 0; e < E; ++e) s[e] = x[e];
  }
  for (int e = 0; e < E; ++e) sel[e] = s[e] + (c.correction_bias.empty() ? 0 : c.correction_bias[e]);
  std::vector<bool> allowed(E, true);
  if (c.n_group > 1 && c.topk_group < c.n_group) {
    const int per = E / c.n_group;
    std::vector<std::pair<double, int>> gs;
    for (int g = 0; g < c.n_group; ++g) {
      std::vector<double> v(sel.begin() + g * per, sel.begin() + (g + 1) * per);
      std::sort(v.rbegin(), v.rend());
      gs.push_back({c.group_score == RouterConfig::GroupScore::kMax ? v[0] : v[0] + v[1], g});
    }
    std::sort(gs.begin(), gs.end(), [](auto a, auto b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
    for (int i = c.topk_group; i < c.n_group; ++i)
      for (int e = gs[i].second * per; e < (gs[i].second + 1) * per; ++e) allowed[e] = false;
  }
  std::vector<std::pair<double, int>> cand;
  for (int e = 0; e < E; ++e)
    if (allowed[e]) cand.push_back({sel[e], e});
  std::sort(cand.begin(), cand.end(), [](auto a, auto b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  ids->clear();
  w->clear();
  if (c.scoring == RouterConfig::Scoring::kSoftmaxTopK) {  // HF GptOssTopKRouter: softmax(topk(logits).values)
    double z = 0;
    for (int k = 0; k < c.top_k; ++k) z += std::exp(s[cand[k].second] - s[cand[0].second]);
    for (int k = 0; k < c.top_k; ++k) {
      ids->push_back(cand[k].second);
      w->push_back(std::exp(s[cand[k].second] - s[cand[0].second]) / z);
    }
    return;
  }
  double total = 0;
  for (int k = 0; k < c.top_k; ++k) total += s[cand[k].second];
  for (int k = 0; k < c.top_k; ++k) {
    ids->push_back(cand[k].second);
    w->push_back((c.norm_topk_prob ? s[cand[k].second] / total : s[cand[k].second]) * c.routed_scaling_factor);
  }
}

void CheckAgainstReference(const RouterConfig& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 2.f);
  const int n = 300;
  std::vector<float> logits(static_cast<size_t>(n) * c.n_experts);
  for (auto& v : logits) v = nd(rng);
  // Exact ties: duplicate values inside rows (quantized logits), so tie-breaking is exercised.
  for (int t = 0; t < n; t += 3)
    for (int e = 0; e < c.n_experts; ++e) logits[t * c.n_experts + e] = std::round(logits[t * c.n_experts + e]);
  std::vector<int32_t> ids(static_cast<size_t>(n) * c.top_k);
  std::vector<float> w(ids.size());
  RouteTokens(c, logits.data(), n, ids.data(), w.data());
  for (int t = 0; t < n; ++t) {
    std::vector<float> x(logits.begin() + t * c.n_experts, logits.begin() + (t + 1) * c.n_experts);
    std::vector<int> rid;
    std::vector<double> rw;
    Reference(c, x, &rid, &rw);
    for (int k = 0; k < c.top_k; ++k) {
      ASSERT_EQ(ids[t * c.top_k + k], rid[k]) << "token " << t << " slot " << k;
      ASSERT_NEAR(w[t * c.top_k + k], rw[k], 1e-5 * std::max(1.0, std::fabs(rw[k]))) << "token " << t << " slot " << k;
    }
  }
}

TEST(MoeRouterTest, SoftmaxTopKLikeQwen3Moe) {
  RouterConfig c;
  c.n_experts = 64;
  c.top_k = 8;
  CheckAgainstReference(c, 1);
  c.norm_topk_prob = false;  // DeepSeek-V2-Lite "greedy"
  CheckAgainstReference(c, 2);
}

TEST(MoeRouterTest, TopKThenSoftmaxLikeGptOss) {
  RouterConfig c;
  c.scoring = RouterConfig::Scoring::kSoftmaxTopK;
  c.norm_topk_prob = false;
  c.n_experts = 32;
  c.top_k = 4;
  CheckAgainstReference(c, 3);
  c.n_experts = 8;
  c.top_k = 2;
  CheckAgainstReference(c, 4);
}

TEST(MoeRouterTest, GroupLimitedGreedyLikeDeepSeekV2) {
  RouterConfig c;
  c.n_experts = 64;
  c.top_k = 6;
  c.n_group = 8;
  c.topk_group = 3;
  c.norm_topk_prob = false;
  c.routed_scaling_factor = 16.f;
  CheckAgainstReference(c, 3);
}

TEST(MoeRouterTest, SigmoidNoAuxTcWithNegativeBiasesLikeDeepSeekV3) {
  RouterConfig c;
  c.n_experts = 64;
  c.top_k = 8;
  c.n_group = 8;
  c.topk_group = 4;
  c.scoring = RouterConfig::Scoring::kSigmoid;
  c.group_score = RouterConfig::GroupScore::kTop2Sum;
  c.routed_scaling_factor = 2.5f;
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-1.5f, 0.5f);  // mostly negative: a 0.0 mask fill would let masked experts win
  for (int e = 0; e < 64; ++e) c.correction_bias.push_back(u(rng));
  CheckAgainstReference(c, 4);
}

TEST(MoeRouterTest, MaskedGroupsNeverWinEvenWhenAllBiasedScoresAreNegative) {
  RouterConfig c;
  c.n_experts = 8;
  c.top_k = 2;
  c.n_group = 4;
  c.topk_group = 1;
  c.scoring = RouterConfig::Scoring::kSigmoid;
  c.group_score = RouterConfig::GroupScore::kTop2Sum;
  c.correction_bias.assign(8, -5.f);  // every biased score < 0
  c.correction_bias[6] = c.correction_bias[7] = -4.f;  // group 3 is the best group
  std::vector<float> logits(8, 0.f);
  int32_t ids[2];
  float w[2];
  RouteTokens(c, logits.data(), 1, ids, w);
  EXPECT_EQ(ids[0], 6);
  EXPECT_EQ(ids[1], 7);
  EXPECT_NEAR(w[0], 0.5f, 1e-6);  // equal sigmoid(0) scores, renormalized
}

}  // namespace
}  // namespace deepinfer
