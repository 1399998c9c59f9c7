#include "model/layers/mlp_moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/ops.h"

namespace deepinfer {

MoeMlp::MoeMlp(const ModelConfig& c, int max_tokens)
    : hidden_(c.hidden), ff_(c.moe_intermediate), n_experts_(c.n_experts), top_k_(c.n_experts_used),
      shared_ff_(c.shared_ffn), max_tokens_(max_tokens) {
  router_.n_experts = c.n_experts;
  router_.top_k = c.n_experts_used;
  router_.scoring = c.router_sigmoid ? RouterConfig::Scoring::kSigmoid : RouterConfig::Scoring::kSoftmax;
  router_.norm_topk_prob = c.norm_topk_prob;
  router_.routed_scaling_factor = c.routed_scaling_factor;
  router_.n_group = c.n_group;
  router_.topk_group = c.topk_group;
  // DeepSeek-V3 (sigmoid) ranks groups by the sum of their top two scores, V2 (softmax) by their best one.
  router_.group_score = c.router_sigmoid ? RouterConfig::GroupScore::kTop2Sum : RouterConfig::GroupScore::kMax;
  const size_t m = static_cast<size_t>(max_tokens), k = static_cast<size_t>(top_k_);
  if (shared_ff_ > 0) {
    sh_gate_.resize(m * shared_ff_);
    sh_up_.resize(sh_gate_.size());
    sh_out_.resize(m * hidden_);
    if (c.shared_expert_gate) sh_scale_.resize(m);
  }
  router_logits_.resize(m * n_experts_);
  route_e_.resize(m * k);
  route_w_.resize(m * k);
  in_.resize(m * hidden_);
  gate_.resize(m * ff_);
  up_.resize(m * ff_);
  out_k_.resize(m * k * hidden_);
  rows_.resize(m * k);
  expert_first_.resize(n_experts_ + 1);
}

int MoeMlp::DistinctExperts(int n) const {
  std::vector<bool> hit(n_experts_, false);
  for (int i = 0; i < n * top_k_; ++i) hit[route_e_[i]] = true;
  return static_cast<int>(std::count(hit.begin(), hit.end(), true));
}

void MoeMlp::Forward(const MoeWeights& w, const float* xn, int n, float* out) {
  const int h = hidden_, ff = ff_, K = top_k_;
  MatMul(w.router, xn, n, router_logits_.data());
  router_.correction_bias = w.exp_probs_bias;  // per layer (empty when the model has none)
  RouteTokens(router_, router_logits_.data(), n, route_e_.data(), route_w_.data());
  // (token, slot) pairs grouped per expert: one GEMM per expert over its tokens, rows are independent, so a
  // token's result does not depend on which other tokens share its expert. Experts run in waves of at most
  // max_tokens gathered rows (the buffers' size); a wave's gate/up products (and the shared experts', in the
  // first wave) go to the pool as one dispatch, its down products as another: at decode a wave holds every expert
  // the batch touched, so the layer streams its expert weights in two passes rather than three per expert.
  const int pairs = n * K;
  // Counting sort of the pairs by expert (stable: each expert's pairs stay in token order): rows_ lists them
  // expert by expert, expert e's at [expert_first_[e], expert_first_[e + 1]).
  std::fill(expert_first_.begin(), expert_first_.end(), 0);
  for (int i = 0; i < pairs; ++i) ++expert_first_[route_e_[i] + 1];
  for (int e = 0; e < n_experts_; ++e) expert_first_[e + 1] += expert_first_[e];
  sort_next_.assign(expert_first_.begin(), expert_first_.end() - 1);
  for (int i = 0; i < pairs; ++i) rows_[sort_next_[route_e_[i]]++] = i;
  int e = 0;
  bool shared_pending = !w.shared.empty();
  while (e < n_experts_ || shared_pending) {
    // The wave: the next experts whose pairs fit in in_, gathered there in sorted order (wave row r is pair
    // rows_[wave0 + r]).
    const int wave0 = expert_first_[e];
    wave_.clear();
    for (; e < n_experts_; ++e) {
      const int first = expert_first_[e] - wave0, cnt = expert_first_[e + 1] - expert_first_[e];
      if (cnt == 0) continue;
      if (first + cnt > max_tokens_) break;
      wave_.push_back({e, first, cnt});
    }
    const int rows = expert_first_[e] - wave0;
    for (int r = 0; r < rows; ++r)
      std::memcpy(in_.data() + static_cast<size_t>(r) * h, xn + static_cast<size_t>(rows_[wave0 + r] / K) * h, sizeof(float) * h);
    jobs_.clear();
    for (const WaveExpert& we : wave_) {
      const float* in = in_.data() + static_cast<size_t>(we.first) * h;
      jobs_.push_back({&w.gate[we.expert], in, we.count, gate_.data() + static_cast<size_t>(we.first) * ff});
      jobs_.push_back({&w.up[we.expert], in, we.count, up_.data() + static_cast<size_t>(we.first) * ff});
    }
    const bool shared = shared_pending;
    if (shared) {
      jobs_.push_back({&w.shared.gate, xn, n, sh_gate_.data()});
      jobs_.push_back({&w.shared.up, xn, n, sh_up_.data()});
    }
    MatMulMany(jobs_.data(), static_cast<int>(jobs_.size()));
    SwiGLU(gate_.data(), up_.data(), gate_.data(), static_cast<int64_t>(rows) * ff);
    if (shared) SwiGLU(sh_gate_.data(), sh_up_.data(), sh_gate_.data(), static_cast<int64_t>(n) * shared_ff_);
    // Down projections: routed rows land in in_ (its inputs are consumed), the shared ones in sh_out_.
    jobs_.clear();
    for (const WaveExpert& we : wave_)
      jobs_.push_back({&w.down[we.expert], gate_.data() + static_cast<size_t>(we.first) * ff, we.count,
                       in_.data() + static_cast<size_t>(we.first) * h});
    if (shared) jobs_.push_back({&w.shared.down, sh_gate_.data(), n, sh_out_.data()});
    MatMulMany(jobs_.data(), static_cast<int>(jobs_.size()));
    for (int r = 0; r < rows; ++r)
      std::memcpy(out_k_.data() + static_cast<size_t>(rows_[wave0 + r]) * h, in_.data() + static_cast<size_t>(r) * h, sizeof(float) * h);
    shared_pending = false;
  }
  // Weighted sum in routing order (best expert first), as llama.cpp adds them.
  for (int t = 0; t < n; ++t) {
    float* o = out + static_cast<size_t>(t) * h;
    for (int k = 0; k < K; ++k) {
      const float wk = route_w_[t * K + k];
      const float* y = out_k_.data() + static_cast<size_t>(t * K + k) * h;
      if (k == 0)
        for (int d = 0; d < h; ++d) o[d] = y[d] * wk;
      else
        for (int d = 0; d < h; ++d) o[d] += y[d] * wk;
    }
  }
  if (w.shared.empty()) return;
  // Shared experts, added after the routed sum; Qwen2-MoE scales them per token by sigmoid(x . shared_gate).
  if (w.shared_gate.data) {
    MatMul(w.shared_gate, xn, n, sh_scale_.data());
    for (int t = 0; t < n; ++t) {
      const float g = 1.f / (1.f + std::exp(-sh_scale_[t]));
      float* o = out + static_cast<size_t>(t) * h;
      const float* y = sh_out_.data() + static_cast<size_t>(t) * h;
      for (int d = 0; d < h; ++d) o[d] += y[d] * g;
    }
    return;
  }
  for (size_t i = 0; i < static_cast<size_t>(n) * h; ++i) out[i] += sh_out_[i];
}

}  // namespace deepinfer
