// Mixture-of-experts routing: router logits -> the k experts each token uses and their weights. One function
// covers the shipped schemes: softmax top-k (Qwen3-MoE, DeepSeek-V2-Lite "greedy"), softmax with group-limited
// selection (DeepSeek-V2 "group_limited_greedy": group score = max), and sigmoid with a selection-only bias and
// group-limited selection (DeepSeek-V3 "noaux_tc": group score = sum of the group's top 2). Ties always go to the
// lower expert index, so routing is deterministic.
#pragma once
#include <cstdint>
#include <vector>

namespace deepinfer {

struct RouterConfig {
  // kSoftmaxTopK (gpt-oss): the top k are chosen on the raw logits and weighted by a softmax over those k only
  // (llama.cpp's SOFTMAX_WEIGHT gating); no renormalization or scaling applies after it.
  // kSqrtSoftplus (DeepSeek-V4): scores sqrt(softplus(logit)) (ggml's softplus: x above 20, else
  // log(1 + e^x)); the k weights renormalized by max(sum, 6.1035e-5) (llama.cpp's clamp) and scaled.
  enum class Scoring { kSoftmax, kSigmoid, kSoftmaxTopK, kSqrtSoftplus };
  enum class GroupScore { kMax, kTop2Sum };
  int n_experts = 0;
  int top_k = 0;
  Scoring scoring = Scoring::kSoftmax;
  bool norm_topk_prob = true;       // renormalize the k weights to sum to 1
  float routed_scaling_factor = 1;  // applied after normalization
  int n_group = 1, topk_group = 1;  // keep the topk_group best of n_group expert groups
  GroupScore group_score = GroupScore::kMax;
  std::vector<float> correction_bias;  // added to the scores for selection only (empty: none)
};

// logits: n rows of n_experts (f32). Writes n * top_k expert ids (best first) and their weights.
void RouteTokens(const RouterConfig& cfg, const float* logits, int n, int32_t* experts, float* weights);
// Hash routing (DeepSeek-V4's first layers): token t's experts are tid2eid[tokens[t] * top_k ..] in that order,
// weighted by their scores as RouteTokens weights its choice (no selection bias).
void RouteByToken(const RouterConfig& cfg, const float* logits, int n, const int32_t* tokens, const int32_t* tid2eid,
                  int32_t* experts, float* weights);

}  // namespace deepinfer
