#include "model/layers/attention_gqa.h"

#include <cmath>


namespace deepinfer {

GqaAttention::GqaAttention(const Ops& ops, const ModelConfig& c, int max_tokens, WholeNormSplit split)
    : ops_(ops), n_heads_(c.n_heads), n_kv_(c.n_kv_heads), head_dim_(c.head_dim), qk_norm_(c.qk_norm), split_(split),
      eps_(c.rms_eps) {
  const float qpas = c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar : static_cast<float>(c.head_dim);
  scale_ = 1.f / std::sqrt(qpas);
  // Linear RoPE scaling divides every frequency by the factor (rotation by pos / factor).
  std::vector<float> factors = c.rope_freq_factors;
  if (c.rope_linear_factor != 1.0) {
    if (factors.empty()) factors.assign(static_cast<size_t>(c.head_dim / 2), 1.f);
    for (float& f : factors) f = static_cast<float>(f * c.rope_linear_factor);
  }
  rope_ = RopeTable::Make(c.rope_style, c.head_dim, c.rope_theta, factors, c.yarn);
  const double theta_swa = c.rope_theta_swa > 0 ? c.rope_theta_swa : c.rope_theta;
  rope_swa_ = c.swa_rope_scaled ? RopeTable::Make(c.rope_style, c.head_dim, theta_swa, factors, c.yarn)
                                : RopeTable::Make(c.rope_style, c.head_dim, theta_swa, {});
  for (int l = 0; l < c.n_layers + c.n_mtp; ++l) window_.push_back(c.LayerWindow(l));
  const size_t m = static_cast<size_t>(max_tokens);
  q_.resize(m * n_heads_ * head_dim_);
  k_.resize(m * n_kv_ * head_dim_);
  v_.resize(k_.size());
  attn_.resize(q_.size());
}

Status GqaAttention::Forward(const GqaWeights& w, const BatchView& b, int l, PagedKvCache& kv, bool rope, const float* xn,
                             float* out) {
  const int n = b.n, hd = head_dim_, nh = n_heads_, nkv = n_kv_;
  ops_.MatMul(w.wq, xn, n, q_.data(), w.bq.empty() ? nullptr : w.bq.data());
  ops_.MatMul(w.wk, xn, n, k_.data(), w.bk.empty() ? nullptr : w.bk.data());
  ops_.MatMul(w.wv, xn, n, v_.data(), w.bv.empty() ? nullptr : w.bv.data());
  if (qk_norm_ == QkNorm::kPerHead) {
    ops_.RmsNorm(q_.data(), w.q_norm.data(), eps_, n * nh, hd, q_.data());
    ops_.RmsNorm(k_.data(), w.k_norm.data(), eps_, n * nkv, hd, k_.data());
  } else if (qk_norm_ == QkNorm::kWhole && split_.tp) {
    DI_RETURN_IF_ERROR(SplitWholeNorm(w, n));
  } else if (qk_norm_ == QkNorm::kWhole) {
    ops_.RmsNorm(q_.data(), w.q_norm.data(), eps_, n, nh * hd, q_.data());
    ops_.RmsNorm(k_.data(), w.k_norm.data(), eps_, n, nkv * hd, k_.data());
  }
  const int window = l < static_cast<int>(window_.size()) ? window_[static_cast<size_t>(l)] : 0;
  if (rope) {
    const RopeTable& table = window > 0 ? rope_swa_ : rope_;
    ops_.ApplyRope(table, q_.data(), n, nh, hd, b.pos);
    ops_.ApplyRope(table, k_.data(), n, nkv, hd, b.pos);
  }
  DI_RETURN_IF_ERROR(WriteBatchKv(b, kv, l, k_.data(), v_.data()));
  AttnShape shape{nh, nkv, hd, hd, nkv * hd, nkv * hd};
  shape.window = window;
  shape.sinks = w.sinks.empty() ? nullptr : w.sinks.data();
  ops_.PagedAttention(q_.data(), b.seqs, b.num_seqs, kv.k(l), kv.v(l), kv.dtype(), shape, scale_, attn_.data());
  // Under tensor parallelism only the first rank holds the output bias (the others hold zeros: model/shard.cc),
  // so the row-parallel all-reduce adds it once.
  ops_.MatMul(w.wo, attn_.data(), n, out, w.bo.empty() ? nullptr : w.bo.data());
  return Status::Ok();
}

Status GqaAttention::SplitWholeNorm(const GqaWeights& w, int n) {
  const int qd = n_heads_ * head_dim_, kd = n_kv_ * head_dim_;
  ss_.assign(static_cast<size_t>(2) * n, 0.0);
  for (int r = 0; r < n; ++r) {
    double sq = 0, sk = 0;  // in double, as ggml's rms_norm sums
    for (int j = 0; j < qd; ++j) sq += static_cast<double>(q_[static_cast<size_t>(r) * qd + j]) * q_[static_cast<size_t>(r) * qd + j];
    for (int j = 0; j < kd; ++j) sk += static_cast<double>(k_[static_cast<size_t>(r) * kd + j]) * k_[static_cast<size_t>(r) * kd + j];
    ss_[r] = sq;
    ss_[n + r] = sk;
  }
  // The communicator sums floats: each rank's partial sum (accumulated in double) is rounded once to f32.
  std::vector<float>& partial = partial_;
  partial.assign(ss_.begin(), ss_.end());
  const Status s = split_.tp->AllReduceSum(partial.data(), partial.size());
  if (!s.ok()) return Status(s.code(), "tensor-parallel q/k norm all-reduce: " + s.message());
  for (int r = 0; r < n; ++r) {
    const float mean_q = partial[r] / static_cast<float>(split_.q_width);
    const float mean_k = partial[n + r] / static_cast<float>(split_.k_replicas) / static_cast<float>(split_.k_width);
    const float sq = 1.0f / std::sqrt(mean_q + eps_), sk = 1.0f / std::sqrt(mean_k + eps_);
    float* q = q_.data() + static_cast<size_t>(r) * qd;
    float* k = k_.data() + static_cast<size_t>(r) * kd;
    for (int j = 0; j < qd; ++j) q[j] = q[j] * sq * w.q_norm[j];
    for (int j = 0; j < kd; ++j) k[j] = k[j] * sk * w.k_norm[j];
  }
  return Status::Ok();
}

}  // namespace deepinfer
