#include "model/layers/attention_gqa.h"

#include <cmath>


namespace deepinfer {

GqaAttention::GqaAttention(const Ops& ops, const ModelConfig& c, int max_tokens)
    : ops_(ops), n_heads_(c.n_heads), n_kv_(c.n_kv_heads), head_dim_(c.head_dim), qk_norm_(c.qk_norm), eps_(c.rms_eps) {
  rope_ = RopeTable::Make(c.rope_style, c.head_dim, c.rope_theta, c.rope_freq_factors, c.yarn);
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
  } else if (qk_norm_ == QkNorm::kWhole) {
    ops_.RmsNorm(q_.data(), w.q_norm.data(), eps_, n, nh * hd, q_.data());
    ops_.RmsNorm(k_.data(), w.k_norm.data(), eps_, n, nkv * hd, k_.data());
  }
  if (rope) {
    ops_.ApplyRope(rope_, q_.data(), n, nh, hd, b.pos);
    ops_.ApplyRope(rope_, k_.data(), n, nkv, hd, b.pos);
  }
  DI_RETURN_IF_ERROR(WriteBatchKv(b, kv, l, k_.data(), v_.data()));
  ops_.PagedAttention(q_.data(), b.seqs, b.num_seqs, kv.k(l), kv.v(l), kv.dtype(), AttnShape{nh, nkv, hd, hd, nkv * hd, nkv * hd},
                 1.f / std::sqrt(static_cast<float>(hd)), attn_.data());
  ops_.MatMul(w.wo, attn_.data(), n, out);
  return Status::Ok();
}

}  // namespace deepinfer
