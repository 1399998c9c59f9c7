#include "model/layers/attention_mla.h"

#include <cmath>
#include <cstring>

#include "model/layers/linear.h"

namespace deepinfer {
namespace {
// W_UV of head hh, {v, kv_lora}: rows of kv_b (interleaved per head with W_UK) or of the split v_b.
TensorView UvHead(const MlaWeights& w, int hh, int nope, int vd) {
  if (w.wv_b.data) return RowSlice(w.wv_b, static_cast<int64_t>(hh) * vd, vd);
  return RowSlice(w.wkv_b, static_cast<int64_t>(hh) * (nope + vd) + nope, vd);
}
}  // namespace

MlaAttention::MlaAttention(const Ops& ops, const ModelConfig& c, int max_tokens)
    : ops_(ops), H_(c.n_heads), nope_(c.qk_nope_dim), rope_dim_(c.qk_rope_dim), kvl_(c.kv_lora_rank), vd_(c.v_head_dim),
      q_lora_(c.q_lora_rank), eps_(c.rms_eps), attn_scale_mult_(c.attn_scale_mult) {
  rope_ = RopeTable::Make(c.rope_style, c.qk_rope_dim, c.rope_theta, c.rope_freq_factors, c.yarn);
  const size_t m = static_cast<size_t>(max_tokens), H = static_cast<size_t>(H_), qk = nope_ + rope_dim_;
  qa_.resize(m * std::max(1, q_lora_));
  q_.resize(m * H * qk);
  krow_.resize(m * (kvl_ + rope_dim_));
  qabs_.resize(m * H * (kvl_ + rope_dim_));
  olat_.resize(m * H * kvl_);
  attn_.resize(m * H * vd_);
}

Status MlaAttention::Forward(const MlaWeights& w, const BatchView& b, int l, PagedKvCache& kv, const float* xn, float* out) {
  const int n = b.n, H = H_, nope = nope_, rope = rope_dim_, kvl = kvl_;
  const int qk = nope + rope, krow = kvl + rope;
  // The two projections of xn in one dispatch: the query (or its low-rank down-projection) and the cache row.
  const MatMulJob proj[2] = {q_lora_ > 0 ? MatMulJob{&w.wq_a, xn, n, qa_.data()} : MatMulJob{&w.wq, xn, n, q_.data()},
                             {&w.wkv_a, xn, n, krow_.data()}};
  ops_.MatMulMany(proj, 2);
  if (q_lora_ > 0) {
    ops_.RmsNorm(qa_.data(), w.q_a_norm.data(), eps_, n, q_lora_, qa_.data());
    ops_.MatMul(w.wq_b, qa_.data(), n, q_.data());
  }
  // The cache row: [RMSNorm(latent), RoPE(k_pe)].
  for (int t = 0; t < n; ++t)
    ops_.RmsNorm(krow_.data() + static_cast<size_t>(t) * krow, w.kv_a_norm.data(), eps_, 1, kvl, krow_.data() + static_cast<size_t>(t) * krow);
  ops_.ApplyRope(rope_, krow_.data() + kvl, n, 1, krow, b.pos);
  ops_.ApplyRope(rope_, q_.data() + nope, n, H, qk, b.pos);
  DI_RETURN_IF_ERROR(WriteBatchKv(b, kv, l, krow_.data(), nullptr));
  if (absorb_) Absorbed(w, b, l, kv);
  else Decompressed(w, b, l, kv);
  ops_.MatMul(w.wo, attn_.data(), n, out);
  return Status::Ok();
}

void MlaAttention::Absorbed(const MlaWeights& w, const BatchView& b, int l, PagedKvCache& kv) {
  const int n = b.n, H = H_, nope = nope_, rope = rope_dim_, kvl = kvl_, vd = vd_;
  const int qk = nope + rope, krow = kvl + rope;
  const float scale = attn_scale_mult_ / std::sqrt(static_cast<float>(qk));
  // Absorbed query per head: [q_nope . W_UK[h], q_pe], so scores read the latent directly. One kernel call runs
  // every head's GEMM (heads split over the pool, each the same single-threaded kernel).
  HeadsMatMul absorb;
  absorb.heads = H;
  absorb.rows = n;
  absorb.head_weight = [&](int hh) {
    TensorView uk;
    uk.dtype = DType::kF32;
    uk.shape = {kvl, nope};
    uk.data = w.uk_t.data() + static_cast<size_t>(hh) * kvl * nope;
    uk.nbytes = sizeof(float) * kvl * nope;
    return uk;
  };
  absorb.x = q_.data();
  absorb.x_stride = static_cast<int64_t>(H) * qk;
  absorb.x_head_offset = qk;
  absorb.in_width = nope;
  absorb.y = qabs_.data();
  absorb.y_stride = static_cast<int64_t>(H) * krow;
  absorb.y_head_offset = krow;
  absorb.out_width = kvl;
  ops_.MatMulHeads(absorb);
  for (int t = 0; t < n; ++t)
    for (int hh = 0; hh < H; ++hh)
      std::memcpy(qabs_.data() + (static_cast<size_t>(t) * H + hh) * krow + kvl, q_.data() + (static_cast<size_t>(t) * H + hh) * qk + nope,
                  sizeof(float) * rope);
  // MQA over the latent: one K/V "head" shared by all H query heads; V is the latent part of the same rows.
  ops_.PagedAttention(qabs_.data(), b.seqs, b.num_seqs, kv.k(l), kv.k(l), kv.dtype(), AttnShape{H, 1, krow, kvl, krow, krow}, scale,
                 olat_.data());
  // Up-project each head's latent output with W_UV[h] (one kernel call over the heads, as above).
  HeadsMatMul up;
  up.heads = H;
  up.rows = n;
  up.head_weight = [&](int hh) { return UvHead(w, hh, nope, vd); };
  up.x = olat_.data();
  up.x_stride = static_cast<int64_t>(H) * kvl;
  up.x_head_offset = kvl;
  up.in_width = kvl;
  up.y = attn_.data();
  up.y_stride = static_cast<int64_t>(H) * vd;
  up.y_head_offset = vd;
  up.out_width = vd;
  ops_.MatMulHeads(up);
}

void MlaAttention::Decompressed(const MlaWeights& w, const BatchView& b, int l, PagedKvCache& kv) {
  // Per sequence: up-project every cached latent to per-head K (nope part) and V, append the shared rope key,
  // and run ordinary multi-head attention on contiguous buffers.
  const int H = H_, nope = nope_, rope = rope_dim_, kvl = kvl_, vd = vd_;
  const int qk = nope + rope, krow = kvl + rope;
  const size_t esize = GetDTypeInfo(kv.dtype()).block_bytes;
  for (int si = 0; si < b.num_seqs; ++si) {
    const AttnSeq& sq = b.seqs[si];
    const int len = sq.start + sq.m;
    std::vector<float> lat(static_cast<size_t>(len) * krow), K(static_cast<size_t>(len) * H * qk), V(static_cast<size_t>(len) * H * vd);
    const uint8_t* kl = static_cast<const uint8_t*>(kv.k(l));
    for (int p = 0; p < len; ++p)
      ops_.DequantizeRow(kv.dtype(), kl + static_cast<size_t>(sq.rows[p]) * krow * esize, lat.data() + static_cast<size_t>(p) * krow, krow);
    std::vector<float> lat_only(static_cast<size_t>(len) * kvl), tmp(static_cast<size_t>(len) * std::max(nope, vd));
    for (int p = 0; p < len; ++p)
      std::memcpy(lat_only.data() + static_cast<size_t>(p) * kvl, lat.data() + static_cast<size_t>(p) * krow, sizeof(float) * kvl);
    std::vector<float> uk(static_cast<size_t>(nope) * kvl);
    for (int hh = 0; hh < H; ++hh) {
      // W_UK[hh] {nope, kv_lora}: the transpose of the f32 uk_t every layout provides.
      for (int d = 0; d < nope; ++d)
        for (int c = 0; c < kvl; ++c) uk[static_cast<size_t>(d) * kvl + c] = w.uk_t[(static_cast<size_t>(hh) * kvl + c) * nope + d];
      TensorView ukv;
      ukv.dtype = DType::kF32;
      ukv.shape = {nope, kvl};
      ukv.data = uk.data();
      ukv.nbytes = uk.size() * sizeof(float);
      ops_.MatMul(ukv, lat_only.data(), len, tmp.data());
      for (int p = 0; p < len; ++p) {
        float* kr = K.data() + (static_cast<size_t>(p) * H + hh) * qk;
        std::memcpy(kr, tmp.data() + static_cast<size_t>(p) * nope, sizeof(float) * nope);
        std::memcpy(kr + nope, lat.data() + static_cast<size_t>(p) * krow + kvl, sizeof(float) * rope);
      }
      ops_.MatMul(UvHead(w, hh, nope, vd), lat_only.data(), len, tmp.data());
      for (int p = 0; p < len; ++p)
        std::memcpy(V.data() + (static_cast<size_t>(p) * H + hh) * vd, tmp.data() + static_cast<size_t>(p) * vd, sizeof(float) * vd);
    }
    std::vector<int32_t> ident(len);
    for (int p = 0; p < len; ++p) ident[p] = p;
    const AttnSeq one{0, sq.m, sq.start, ident.data()};
    ops_.PagedAttention(q_.data() + static_cast<size_t>(sq.q_row) * H * qk, &one, 1, K.data(), V.data(), DType::kF32,
                   AttnShape{H, H, qk, vd, H * qk, H * vd}, attn_scale_mult_ / std::sqrt(static_cast<float>(qk)),
                   attn_.data() + static_cast<size_t>(sq.q_row) * H * vd);
  }
}

}  // namespace deepinfer
