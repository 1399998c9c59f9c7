#include "model/transformer.h"

#include <cmath>
#include <cstring>

#include "kernels/cpu/gemm.h"

namespace deepinfer {

KvCache::KvCache(const ModelConfig& c, int capacity)
    : capacity_(capacity), layer_stride_(static_cast<size_t>(capacity) * c.n_kv_heads * c.head_dim) {
  k_.assign(layer_stride_ * c.n_layers, 0.f);
  v_.assign(layer_stride_ * c.n_layers, 0.f);
}

Transformer::Transformer(const Model& model, int max_chunk)
    : model_(model), c_(model.config), max_chunk_(max_chunk) {
  rope_ = RopeTable::Make(c_.rope_style, c_.head_dim, c_.rope_theta, c_.rope_freq_factors);
  const size_t m = static_cast<size_t>(max_chunk_);
  x_.resize(m * c_.hidden);
  xn_.resize(m * std::max(c_.hidden, c_.n_heads * c_.head_dim));
  q_.resize(m * c_.n_heads * c_.head_dim);
  k_.resize(m * c_.n_kv_heads * c_.head_dim);
  v_.resize(m * c_.n_kv_heads * c_.head_dim);
  attn_.resize(m * std::max(c_.hidden, c_.n_heads * c_.head_dim));
  gate_.resize(m * c_.intermediate);
  up_.resize(m * c_.intermediate);
  pos_.resize(m);
}

Status Transformer::Forward(const int32_t* tokens, int n, int start, KvCache& kv, float* logits, bool all_logits) {
  if (n <= 0) return InvalidArgument("forward: no tokens");
  if (start < 0 || start + n > kv.capacity())
    return OutOfRange("forward: positions [" + std::to_string(start) + ", " + std::to_string(start + n) +
                      ") exceed the KV cache capacity " + std::to_string(kv.capacity()));
  for (int i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= c_.vocab_size)
      return InvalidArgument("forward: token id " + std::to_string(tokens[i]) + " outside the vocabulary");
  for (int done = 0; done < n; done += max_chunk_) {
    const int len = std::min(max_chunk_, n - done);
    const bool last = done + len == n;
    float* out = all_logits ? logits + static_cast<size_t>(done) * c_.vocab_size : (last ? logits : nullptr);
    ForwardChunk(tokens + done, len, start + done, kv, out, all_logits);
  }
  return Status::Ok();
}

void Transformer::ForwardChunk(const int32_t* tokens, int n, int start, KvCache& kv, float* logits, bool all_logits) {
  const int h = c_.hidden;
  for (int i = 0; i < n; ++i) {
    DequantizeRow(model_.tok_embd.dtype, model_.tok_embd.row(tokens[i]), x_.data() + static_cast<size_t>(i) * h, h);
    pos_[i] = start + i;
  }
  for (int l = 0; l < c_.n_layers; ++l) Layer(l, n, start, kv);
  if (!logits) return;
  const int first = all_logits ? 0 : n - 1, rows = all_logits ? n : 1;
  RmsNorm(x_.data() + static_cast<size_t>(first) * h, model_.out_norm.data(), c_.rms_eps, rows, h, xn_.data());
  MatMul(model_.lm_head, xn_.data(), rows, logits);
}

void Transformer::Layer(int l, int n, int start, KvCache& kv) {
  const LayerWeights& L = model_.layers[l];
  const int h = c_.hidden, hd = c_.head_dim, nh = c_.n_heads, nkv = c_.n_kv_heads;
  const int kv_dim = nkv * hd;

  // Attention block.
  RmsNorm(x_.data(), L.attn_norm.data(), c_.rms_eps, n, h, xn_.data());
  MatMul(L.wq, xn_.data(), n, q_.data(), L.bq.empty() ? nullptr : L.bq.data());
  MatMul(L.wk, xn_.data(), n, k_.data(), L.bk.empty() ? nullptr : L.bk.data());
  MatMul(L.wv, xn_.data(), n, v_.data(), L.bv.empty() ? nullptr : L.bv.data());
  if (c_.qk_norm) {
    RmsNorm(q_.data(), L.q_norm.data(), c_.rms_eps, n * nh, hd, q_.data());
    RmsNorm(k_.data(), L.k_norm.data(), c_.rms_eps, n * nkv, hd, k_.data());
  }
  ApplyRope(rope_, q_.data(), n, nh, hd, pos_.data());
  ApplyRope(rope_, k_.data(), n, nkv, hd, pos_.data());
  std::memcpy(kv.k(l) + static_cast<size_t>(start) * kv_dim, k_.data(), sizeof(float) * n * kv_dim);
  std::memcpy(kv.v(l) + static_cast<size_t>(start) * kv_dim, v_.data(), sizeof(float) * n * kv_dim);
  CausalAttention(q_.data(), kv.k(l), kv.v(l), n, start, nh, nkv, hd, 1.f / std::sqrt(static_cast<float>(hd)), attn_.data());
  MatMul(L.wo, attn_.data(), n, xn_.data());
  for (size_t i = 0; i < static_cast<size_t>(n) * h; ++i) x_[i] += xn_[i];

  // MLP block.
  RmsNorm(x_.data(), L.ffn_norm.data(), c_.rms_eps, n, h, xn_.data());
  MatMul(L.w_gate, xn_.data(), n, gate_.data());
  MatMul(L.w_up, xn_.data(), n, up_.data());
  SwiGLU(gate_.data(), up_.data(), gate_.data(), static_cast<int64_t>(n) * c_.intermediate);
  MatMul(L.w_down, gate_.data(), n, attn_.data());
  for (size_t i = 0; i < static_cast<size_t>(n) * h; ++i) x_[i] += attn_[i];
}

}  // namespace deepinfer
