#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "base/logging.h"
#include "base/thread_pool.h"

#include "kernels/cpu/gemm.h"

namespace deepinfer {

KvCache::KvCache(const KvLayout& layout, int capacity, DType dtype) : capacity_(capacity) {
  constexpr int kBlock = 16;
  const int blocks = std::max(1, (capacity + kBlock - 1) / kBlock);
  auto kv = PagedKvCache::Create(layout, blocks, kBlock, dtype);
  if (!kv.ok()) {  // only an allocation failure can get here (the arguments are valid by construction)
    DI_LOG_ERROR("KV cache: %s", kv.status().ToString().c_str());
    std::abort();
  }
  paged_ = std::move(*kv);
  for (int b = 0; b < blocks; ++b) table_.push_back(b);
}

Transformer::Transformer(const Model& model, int max_batch_tokens)
    : model_(model), c_(model.config), max_tokens_(max_batch_tokens) {
  rope_ = RopeTable::Make(c_.rope_style, c_.mla ? c_.qk_rope_dim : c_.head_dim, c_.rope_theta, c_.rope_freq_factors, c_.yarn);
  const size_t m = static_cast<size_t>(max_tokens_);
  const size_t qdim = static_cast<size_t>(c_.n_heads) * c_.head_dim, kvdim = static_cast<size_t>(c_.n_kv_heads) * c_.head_dim;
  x_.resize(m * c_.hidden);
  xn_.resize(m * std::max<size_t>(c_.hidden, qdim));
  q_.resize(m * qdim);
  k_.resize(m * std::max<size_t>(kvdim, c_.kv_k_elems()));
  v_.resize(m * kvdim);
  attn_.resize(m * std::max<size_t>(c_.hidden, qdim));
  gate_.resize(m * c_.intermediate);
  up_.resize(m * c_.intermediate);
  pos_.resize(m);
  slot_of_token_.resize(m);
  if (c_.mla) {
    const size_t H = static_cast<size_t>(c_.n_heads), kvl = static_cast<size_t>(c_.kv_lora_rank);
    qa_.resize(m * std::max(1, c_.q_lora_rank));
    qabs_.resize(m * H * (kvl + c_.qk_rope_dim));
    olat_.resize(m * H * kvl);
    head_in_.resize(m * std::max<size_t>(kvl, c_.qk_nope_dim));
    head_out_.resize(m * std::max<size_t>(kvl, c_.v_head_dim));
    attn_.resize(std::max(attn_.size(), m * H * c_.v_head_dim));
  }
  if (c_.n_experts > 0) {
    router_.n_experts = c_.n_experts;
    router_.top_k = c_.n_experts_used;
    router_.scoring = c_.router_sigmoid ? RouterConfig::Scoring::kSigmoid : RouterConfig::Scoring::kSoftmax;
    router_.norm_topk_prob = c_.norm_topk_prob;
    router_.routed_scaling_factor = c_.routed_scaling_factor;
    router_.n_group = c_.n_group;
    router_.topk_group = c_.topk_group;
    // DeepSeek-V3 (sigmoid) ranks groups by the sum of their top two scores, V2 (softmax) by their best one.
    router_.group_score = c_.router_sigmoid ? RouterConfig::GroupScore::kTop2Sum : RouterConfig::GroupScore::kMax;
    if (c_.n_shared_experts > 0) {
      sh_gate_.resize(m * c_.moe_intermediate * c_.n_shared_experts);
      sh_up_.resize(sh_gate_.size());
      sh_out_.resize(m * c_.hidden);
    }
    const size_t k = static_cast<size_t>(c_.n_experts_used);
    router_logits_.resize(m * c_.n_experts);
    route_e_.resize(m * k);
    route_w_.resize(m * k);
    moe_in_.resize(m * c_.hidden);
    moe_gate_.resize(m * c_.moe_intermediate);
    moe_up_.resize(m * c_.moe_intermediate);
    moe_out_.resize(m * k * c_.hidden);
    moe_rows_.resize(m * k);
    expert_first_.resize(c_.n_experts + 1);
  }
}

Status Transformer::Forward(const int32_t* tokens, int n, int start, KvCache& kv, float* logits, bool all_logits,
                            float* hidden) {
  if (n <= 0) return InvalidArgument("forward: no tokens");
  if (start < 0 || start + n > kv.capacity())
    return OutOfRange("forward: positions [" + std::to_string(start) + ", " + std::to_string(start + n) +
                      ") exceed the KV cache capacity " + std::to_string(kv.capacity()));
  const int nb = static_cast<int>(kv.block_table().size());
  if (all_logits) {
    // One row per token: each token is its own "sequence" entry of length 1, which the batched forward handles
    // exactly like a chunk (row-wise invariance), but chunked by max_batch_tokens.
    std::vector<SeqForward> rows;
    for (int done = 0; done < n; done += max_tokens_) {
      const int len = std::min(max_tokens_, n - done);
      rows.clear();
      for (int i = 0; i < len; ++i)
        rows.push_back({tokens + done + i, 1, start + done + i, kv.block_table().data(), nb, true});
      DI_RETURN_IF_ERROR(ForwardBatch(rows.data(), len, kv.paged(), logits + static_cast<size_t>(done) * c_.vocab_size,
                                      hidden ? hidden + static_cast<size_t>(done) * c_.hidden : nullptr));
    }
    return Status::Ok();
  }
  for (int done = 0; done < n; done += max_tokens_) {
    const int len = std::min(max_tokens_, n - done);
    SeqForward s{tokens + done, len, start + done, kv.block_table().data(), nb, done + len == n};
    DI_RETURN_IF_ERROR(ForwardBatch(&s, 1, kv.paged(), logits, hidden ? hidden + static_cast<size_t>(done) * c_.hidden : nullptr));
  }
  return Status::Ok();
}

Status Transformer::PlanBatch(const SeqForward* seqs, int num_seqs, int bs, int* total_out) {
  int total = 0;
  for (int s = 0; s < num_seqs; ++s) {
    const SeqForward& q = seqs[s];
    if (q.n <= 0) return InvalidArgument("forward: a sequence with no tokens");
    if (q.start < 0 || q.start + q.n > q.num_blocks * bs)
      return OutOfRange("forward: positions [" + std::to_string(q.start) + ", " + std::to_string(q.start + q.n) +
                        ") are not covered by the sequence's " + std::to_string(q.num_blocks) + " KV blocks");
    for (int i = 0; i < q.n; ++i)
      if (q.tokens[i] < 0 || q.tokens[i] >= c_.vocab_size)
        return InvalidArgument("forward: token id " + std::to_string(q.tokens[i]) + " outside the vocabulary");
    total += q.n;
  }
  if (total > max_tokens_)
    return OutOfRange("forward: " + std::to_string(total) + " tokens exceed the batch limit " + std::to_string(max_tokens_));

  // Physical K/V row of every position each sequence reads (its whole prefix) and of each token it writes.
  rows_.clear();
  attn_seqs_.clear();
  logit_rows_.clear();
  tokens_.resize(total);
  int row = 0;
  std::vector<size_t> rows_begin;
  rows_begin.reserve(num_seqs);
  for (int s = 0; s < num_seqs; ++s) {
    const SeqForward& q = seqs[s];
    rows_begin.push_back(rows_.size());
    for (int p = 0; p < q.start + q.n; ++p) rows_.push_back(q.block_table[p / bs] * bs + p % bs);
    for (int i = 0; i < q.n; ++i) {
      tokens_[row + i] = q.tokens[i];
      pos_[row + i] = q.start + i;
      slot_of_token_[row + i] = rows_[rows_begin.back() + q.start + i];
    }
    if (q.want_logits) logit_rows_.push_back(row + q.n - 1);
    row += q.n;
  }
  row = 0;
  for (int s = 0; s < num_seqs; ++s) {  // pointers into rows_ are stable only after it stopped growing
    attn_seqs_.push_back({row, seqs[s].n, seqs[s].start, rows_.data() + rows_begin[s]});
    row += seqs[s].n;
  }
  *total_out = total;
  return Status::Ok();
}

// RMSNorm of the logit rows of x_ with `norm`, then the vocabulary projection.
void Transformer::Logits(const std::vector<float>& norm, const TensorView& head, float* logits) {
  const int h = c_.hidden, rows = static_cast<int>(logit_rows_.size());
  for (int r = 0; r < rows; ++r)
    RmsNorm(x_.data() + static_cast<size_t>(logit_rows_[r]) * h, norm.data(), c_.rms_eps, 1, h,
            xn_.data() + static_cast<size_t>(r) * h);
  MatMul(head, xn_.data(), rows, logits);
}

Status Transformer::ForwardBatch(const SeqForward* seqs, int num_seqs, PagedKvCache& kv, float* logits, float* hidden) {
  int total = 0;
  DI_RETURN_IF_ERROR(PlanBatch(seqs, num_seqs, kv.block_size(), &total));
  const int h = c_.hidden;
  for (int r = 0; r < total; ++r)
    DequantizeRow(model_.tok_embd.dtype, model_.tok_embd.row(tokens_[r]), x_.data() + static_cast<size_t>(r) * h, h);
  for (int l = 0; l < c_.n_layers; ++l) Layer(model_.layers[l], l, total, kv);
  if (hidden) RmsNorm(x_.data(), model_.out_norm.data(), c_.rms_eps, total, h, hidden);
  if (!logit_rows_.empty()) Logits(model_.out_norm, model_.lm_head, logits);
  return Status::Ok();
}

KvLayout Transformer::MtpKvLayout() const {
  KvLayout layout = c_.kv_layout();
  layout.num_layers = std::max(1, c_.n_mtp);
  return layout;
}

Status Transformer::ForwardMtp(int k, const SeqForward* seqs, int num_seqs, const float* hidden, PagedKvCache& mtp_kv,
                               float* logits) {
  if (k < 0 || k >= static_cast<int>(model_.mtp.size()))
    return InvalidArgument("forward: the model has no MTP module " + std::to_string(k));
  int total = 0;
  DI_RETURN_IF_ERROR(PlanBatch(seqs, num_seqs, mtp_kv.block_size(), &total));
  const MtpWeights& P = model_.mtp[k];
  const int h = c_.hidden;
  mtp_in_.resize(static_cast<size_t>(max_tokens_) * 2 * h);
  for (int r = 0; r < total; ++r) {
    float* in = mtp_in_.data() + static_cast<size_t>(r) * 2 * h;
    DequantizeRow(P.embed.dtype, P.embed.row(tokens_[r]), in, h);
    RmsNorm(in, P.enorm.data(), c_.rms_eps, 1, h, in);
    RmsNorm(hidden + static_cast<size_t>(r) * h, P.hnorm.data(), c_.rms_eps, 1, h, in + h);
  }
  MatMul(P.eh_proj, mtp_in_.data(), total, x_.data());
  Layer(P.layer, k, total, mtp_kv);
  if (!logit_rows_.empty()) Logits(P.head_norm, P.head, logits);
  return Status::Ok();
}

void Transformer::Layer(const LayerWeights& L, int l, int n, PagedKvCache& kv) {
  AttentionBlock(L, l, n, kv);
  MlpBlock(L, n);
}

void Transformer::AttentionBlock(const LayerWeights& L, int l, int n, PagedKvCache& kv) {
  const int h = c_.hidden, hd = c_.head_dim, nh = c_.n_heads, nkv = c_.n_kv_heads;
  RmsNorm(x_.data(), L.attn_norm.data(), c_.rms_eps, n, h, xn_.data());
  if (c_.mla) {
    MlaAttention(L, l, n, kv);
  } else {
    MatMul(L.wq, xn_.data(), n, q_.data(), L.bq.empty() ? nullptr : L.bq.data());
    MatMul(L.wk, xn_.data(), n, k_.data(), L.bk.empty() ? nullptr : L.bk.data());
    MatMul(L.wv, xn_.data(), n, v_.data(), L.bv.empty() ? nullptr : L.bv.data());
    if (c_.qk_norm) {
      RmsNorm(q_.data(), L.q_norm.data(), c_.rms_eps, n * nh, hd, q_.data());
      RmsNorm(k_.data(), L.k_norm.data(), c_.rms_eps, n * nkv, hd, k_.data());
    }
    ApplyRope(rope_, q_.data(), n, nh, hd, pos_.data());
    ApplyRope(rope_, k_.data(), n, nkv, hd, pos_.data());
    kv.Write(l, k_.data(), v_.data(), slot_of_token_.data(), n);
    PagedAttention(q_.data(), attn_seqs_.data(), static_cast<int>(attn_seqs_.size()), kv.k(l), kv.v(l), kv.dtype(),
                   AttnShape{nh, nkv, hd, hd, nkv * hd, nkv * hd}, 1.f / std::sqrt(static_cast<float>(hd)), attn_.data());
  }
  MatMul(L.wo, attn_.data(), n, xn_.data());
  for (size_t i = 0; i < static_cast<size_t>(n) * h; ++i) x_[i] += xn_[i];
}

void Transformer::MlpBlock(const LayerWeights& L, int n) {
  const int h = c_.hidden;
  RmsNorm(x_.data(), L.ffn_norm.data(), c_.rms_eps, n, h, xn_.data());
  if (L.moe()) {
    MoeMlp(L, n);
  } else {
    const MatMulJob gate_up[2] = {{&L.w_gate, xn_.data(), n, gate_.data()}, {&L.w_up, xn_.data(), n, up_.data()}};
    MatMulMany(gate_up, 2);
    SwiGLU(gate_.data(), up_.data(), gate_.data(), static_cast<int64_t>(n) * c_.intermediate);
    MatMul(L.w_down, gate_.data(), n, attn_.data());
  }
  for (size_t i = 0; i < static_cast<size_t>(n) * h; ++i) x_[i] += attn_[i];
}

Status Transformer::BenchAttention(int l, const SeqForward* seqs, int num_seqs, PagedKvCache& kv) {
  if (l < 0 || l >= c_.n_layers) return InvalidArgument("bench: no layer " + std::to_string(l));
  int total = 0;
  DI_RETURN_IF_ERROR(PlanBatch(seqs, num_seqs, kv.block_size(), &total));
  const int h = c_.hidden;
  for (int r = 0; r < total; ++r)
    DequantizeRow(model_.tok_embd.dtype, model_.tok_embd.row(tokens_[r]), x_.data() + static_cast<size_t>(r) * h, h);
  AttentionBlock(model_.layers[l], l, total, kv);
  return Status::Ok();
}

StatusOr<int> Transformer::BenchMoe(int l, const float* xn, int n) {
  if (l < 0 || l >= c_.n_layers || !model_.layers[l].moe()) return InvalidArgument("bench: layer " + std::to_string(l) + " is not a MoE layer");
  if (n <= 0 || n > max_tokens_) return OutOfRange("bench: batch outside [1, max_batch_tokens]");
  std::memcpy(xn_.data(), xn, sizeof(float) * static_cast<size_t>(n) * c_.hidden);
  MoeMlp(model_.layers[l], n);
  std::vector<bool> hit(c_.n_experts, false);
  for (int i = 0; i < n * c_.n_experts_used; ++i) hit[route_e_[i]] = true;
  return static_cast<int>(std::count(hit.begin(), hit.end(), true));
}

void Transformer::MoeMlp(const LayerWeights& L, int n) {
  const int h = c_.hidden, ff = c_.moe_intermediate, K = c_.n_experts_used;
  MatMul(L.router, xn_.data(), n, router_logits_.data());
  router_.correction_bias = L.exp_bias;  // per layer (empty when the model has none)
  RouteTokens(router_, router_logits_.data(), n, route_e_.data(), route_w_.data());
  // (token, slot) pairs grouped per expert: one GEMM per expert over its tokens, rows are independent, so a
  // token's result does not depend on which other tokens share its expert. Experts run in waves of at most
  // max_batch_tokens gathered rows (the buffers' size); a wave's gate/up products (and the shared experts', in the
  // first wave) go to the pool as one dispatch, its down products as another: at decode a wave holds every expert
  // the batch touched, so the layer streams its expert weights in two passes rather than three per expert.
  const int pairs = n * K;
  // Counting sort of the pairs by expert (stable: each expert's pairs stay in token order): moe_rows_ lists
  // them expert by expert, expert e's at [expert_first_[e], expert_first_[e + 1]).
  std::fill(expert_first_.begin(), expert_first_.end(), 0);
  for (int i = 0; i < pairs; ++i) ++expert_first_[route_e_[i] + 1];
  for (int e = 0; e < c_.n_experts; ++e) expert_first_[e + 1] += expert_first_[e];
  sort_next_.assign(expert_first_.begin(), expert_first_.end() - 1);
  for (int i = 0; i < pairs; ++i) moe_rows_[sort_next_[route_e_[i]]++] = i;
  std::vector<MatMulJob>& jobs = moe_jobs_;
  int e = 0;
  bool shared_pending = L.sh_gate.data != nullptr;
  const int64_t sff = static_cast<int64_t>(ff) * c_.n_shared_experts;
  while (e < c_.n_experts || shared_pending) {
    // The wave: the next experts whose pairs fit in moe_in_, gathered there in sorted order (wave row r is pair
    // moe_rows_[wave0 + r]).
    const int wave0 = expert_first_[e];
    wave_experts_.clear();
    for (; e < c_.n_experts; ++e) {
      const int first = expert_first_[e] - wave0, cnt = expert_first_[e + 1] - expert_first_[e];
      if (cnt == 0) continue;
      if (first + cnt > max_tokens_) break;
      wave_experts_.push_back({e, first, cnt});
    }
    const int rows = expert_first_[e] - wave0;
    for (int r = 0; r < rows; ++r)
      std::memcpy(moe_in_.data() + static_cast<size_t>(r) * h, xn_.data() + static_cast<size_t>(moe_rows_[wave0 + r] / K) * h,
                  sizeof(float) * h);
    jobs.clear();
    for (const WaveExpert& w : wave_experts_) {
      const float* in = moe_in_.data() + static_cast<size_t>(w.first) * h;
      jobs.push_back({&L.exp_gate[w.expert], in, w.count, moe_gate_.data() + static_cast<size_t>(w.first) * ff});
      jobs.push_back({&L.exp_up[w.expert], in, w.count, moe_up_.data() + static_cast<size_t>(w.first) * ff});
    }
    const bool shared = shared_pending;
    if (shared) {
      jobs.push_back({&L.sh_gate, xn_.data(), n, sh_gate_.data()});
      jobs.push_back({&L.sh_up, xn_.data(), n, sh_up_.data()});
    }
    MatMulMany(jobs.data(), static_cast<int>(jobs.size()));
    SwiGLU(moe_gate_.data(), moe_up_.data(), moe_gate_.data(), static_cast<int64_t>(rows) * ff);
    if (shared) SwiGLU(sh_gate_.data(), sh_up_.data(), sh_gate_.data(), n * sff);
    // Down projections: routed rows land in moe_in_ (its inputs are consumed), the shared ones in sh_out_.
    jobs.clear();
    for (const WaveExpert& w : wave_experts_)
      jobs.push_back({&L.exp_down[w.expert], moe_gate_.data() + static_cast<size_t>(w.first) * ff, w.count,
                      moe_in_.data() + static_cast<size_t>(w.first) * h});
    if (shared) jobs.push_back({&L.sh_down, sh_gate_.data(), n, sh_out_.data()});
    MatMulMany(jobs.data(), static_cast<int>(jobs.size()));
    for (int r = 0; r < rows; ++r)
      std::memcpy(moe_out_.data() + static_cast<size_t>(moe_rows_[wave0 + r]) * h, moe_in_.data() + static_cast<size_t>(r) * h,
                  sizeof(float) * h);
    shared_pending = false;
  }
  // Weighted sum in routing order (best expert first), as llama.cpp adds them.
  for (int t = 0; t < n; ++t) {
    float* out = attn_.data() + static_cast<size_t>(t) * h;
    for (int k = 0; k < K; ++k) {
      const float w = route_w_[t * K + k];
      const float* y = moe_out_.data() + static_cast<size_t>(t * K + k) * h;
      if (k == 0)
        for (int d = 0; d < h; ++d) out[d] = y[d] * w;
      else
        for (int d = 0; d < h; ++d) out[d] += y[d] * w;
    }
  }
  // Shared experts: a dense SwiGLU every token takes, added after the routed sum.
  if (L.sh_gate.data)
    for (size_t i = 0; i < static_cast<size_t>(n) * h; ++i) attn_[i] += sh_out_[i];
}

namespace {
// Rows [r0, r0 + rows) of a weight matrix as a view.
TensorView RowSlice(const TensorView& w, int64_t r0, int64_t rows) {
  TensorView v;
  v.dtype = w.dtype;
  v.shape = {rows, w.cols()};
  v.data = w.row(r0);
  v.nbytes = static_cast<size_t>(rows) * w.row_bytes();
  v.block_scale = w.block_scale;
  v.scale_cols = w.scale_cols;
  v.scale_row0 = w.scale_row0 + r0;
  return v;
}
// W_UV of head hh, {v, kv_lora}: rows of kv_b (interleaved per head with W_UK) or of the split v_b.
TensorView UvHead(const LayerWeights& L, int hh, int nope, int vd) {
  if (L.wv_b.data) return RowSlice(L.wv_b, static_cast<int64_t>(hh) * vd, vd);
  return RowSlice(L.wkv_b, static_cast<int64_t>(hh) * (nope + vd) + nope, vd);
}
}  // namespace

void Transformer::MlaAttention(const LayerWeights& L, int l, int n, PagedKvCache& kv) {
  const int H = c_.n_heads, nope = c_.qk_nope_dim, rope = c_.qk_rope_dim, kvl = c_.kv_lora_rank, vd = c_.v_head_dim;
  const int qk = nope + rope, krow = kvl + rope;
  // Queries: [n, H, nope + rope].
  // The two projections of xn_ in one dispatch: the query (or its low-rank down-projection) and the cache row.
  const MatMulJob proj[2] = {c_.q_lora_rank > 0 ? MatMulJob{&L.wq_a, xn_.data(), n, qa_.data()}
                                                : MatMulJob{&L.wq, xn_.data(), n, q_.data()},
                             {&L.wkv_a, xn_.data(), n, k_.data()}};
  MatMulMany(proj, 2);
  if (c_.q_lora_rank > 0) {
    RmsNorm(qa_.data(), L.q_a_norm.data(), c_.rms_eps, n, c_.q_lora_rank, qa_.data());
    MatMul(L.wq_b, qa_.data(), n, q_.data());
  }
  // The cache row: [RMSNorm(latent), RoPE(k_pe)].
  for (int t = 0; t < n; ++t) RmsNorm(k_.data() + static_cast<size_t>(t) * krow, L.kv_a_norm.data(), c_.rms_eps, 1, kvl,
                                      k_.data() + static_cast<size_t>(t) * krow);
  ApplyRope(rope_, k_.data() + kvl, n, 1, krow, pos_.data());
  ApplyRope(rope_, q_.data() + nope, n, H, qk, pos_.data());
  kv.Write(l, k_.data(), nullptr, slot_of_token_.data(), n);
  if (!mla_absorb_) return MlaDecompressedAttention(L, l, n, kv);
  const float scale = c_.attn_scale_mult / std::sqrt(static_cast<float>(qk));
  // Absorbed query per head: [q_nope . W_UK[h], q_pe], so scores read the latent directly. Heads are split over
  // the pool (one dispatch, not one per head); each head's GEMM is the same single-threaded kernel either way.
  ComputePool().Run([&](int tid, int nt) {
    auto [h0, h1] = ThreadPool::Range(static_cast<size_t>(H), tid, nt);
    std::vector<float> in(static_cast<size_t>(n) * nope), out(static_cast<size_t>(n) * kvl);
    for (size_t hh = h0; hh < h1; ++hh) {
      for (int t = 0; t < n; ++t)
        std::memcpy(in.data() + static_cast<size_t>(t) * nope, q_.data() + (static_cast<size_t>(t) * H + hh) * qk, sizeof(float) * nope);
      TensorView uk;
      uk.dtype = DType::kF32;
      uk.shape = {kvl, nope};
      uk.data = L.uk_t.data() + hh * kvl * nope;
      uk.nbytes = sizeof(float) * kvl * nope;
      MatMulSlice(uk, in.data(), n, out.data(), kvl, 0, kvl);
      for (int t = 0; t < n; ++t) {
        float* dst = qabs_.data() + (static_cast<size_t>(t) * H + hh) * krow;
        std::memcpy(dst, out.data() + static_cast<size_t>(t) * kvl, sizeof(float) * kvl);
        std::memcpy(dst + kvl, q_.data() + (static_cast<size_t>(t) * H + hh) * qk + nope, sizeof(float) * rope);
      }
    }
  });
  // MQA over the latent: one K/V "head" shared by all H query heads; V is the latent part of the same rows.
  PagedAttention(qabs_.data(), attn_seqs_.data(), static_cast<int>(attn_seqs_.size()), kv.k(l), kv.k(l), kv.dtype(),
                 AttnShape{H, 1, krow, kvl, krow, krow}, scale, olat_.data());
  // Up-project each head's latent output with W_UV[h] (heads split over the pool, as above).
  ComputePool().Run([&](int tid, int nt) {
    auto [h0, h1] = ThreadPool::Range(static_cast<size_t>(H), tid, nt);
    std::vector<float> in(static_cast<size_t>(n) * kvl), out(static_cast<size_t>(n) * vd);
    for (size_t hh = h0; hh < h1; ++hh) {
      for (int t = 0; t < n; ++t)
        std::memcpy(in.data() + static_cast<size_t>(t) * kvl, olat_.data() + (static_cast<size_t>(t) * H + hh) * kvl, sizeof(float) * kvl);
      MatMulSlice(UvHead(L, static_cast<int>(hh), nope, vd), in.data(), n, out.data(), vd, 0, vd);
      for (int t = 0; t < n; ++t)
        std::memcpy(attn_.data() + (static_cast<size_t>(t) * H + hh) * vd, out.data() + static_cast<size_t>(t) * vd, sizeof(float) * vd);
    }
  });
}

void Transformer::MlaDecompressedAttention(const LayerWeights& L, int l, int n, PagedKvCache& kv) {
  // Per sequence: up-project every cached latent to per-head K (nope part) and V, append the shared rope key,
  // and run ordinary multi-head attention on contiguous buffers.
  const int H = c_.n_heads, nope = c_.qk_nope_dim, rope = c_.qk_rope_dim, kvl = c_.kv_lora_rank, vd = c_.v_head_dim;
  const int qk = nope + rope, krow = kvl + rope;
  const size_t esize = GetDTypeInfo(kv.dtype()).block_bytes;
  for (const AttnSeq& sq : attn_seqs_) {
    const int len = sq.start + sq.m;
    std::vector<float> lat(static_cast<size_t>(len) * krow), K(static_cast<size_t>(len) * H * qk), V(static_cast<size_t>(len) * H * vd);
    const uint8_t* kl = static_cast<const uint8_t*>(kv.k(l));
    for (int p = 0; p < len; ++p)
      DequantizeRow(kv.dtype(), kl + static_cast<size_t>(sq.rows[p]) * krow * esize, lat.data() + static_cast<size_t>(p) * krow, krow);
    std::vector<float> lat_only(static_cast<size_t>(len) * kvl), tmp(static_cast<size_t>(len) * std::max(nope, vd));
    for (int p = 0; p < len; ++p)
      std::memcpy(lat_only.data() + static_cast<size_t>(p) * kvl, lat.data() + static_cast<size_t>(p) * krow, sizeof(float) * kvl);
    std::vector<float> uk(static_cast<size_t>(nope) * kvl);
    for (int hh = 0; hh < H; ++hh) {
      // W_UK[hh] {nope, kv_lora}: the transpose of the f32 uk_t every layout provides.
      for (int d = 0; d < nope; ++d)
        for (int c = 0; c < kvl; ++c) uk[static_cast<size_t>(d) * kvl + c] = L.uk_t[(static_cast<size_t>(hh) * kvl + c) * nope + d];
      TensorView ukv;
      ukv.dtype = DType::kF32;
      ukv.shape = {nope, kvl};
      ukv.data = uk.data();
      ukv.nbytes = uk.size() * sizeof(float);
      MatMul(ukv, lat_only.data(), len, tmp.data());
      for (int p = 0; p < len; ++p) {
        float* kr = K.data() + (static_cast<size_t>(p) * H + hh) * qk;
        std::memcpy(kr, tmp.data() + static_cast<size_t>(p) * nope, sizeof(float) * nope);
        std::memcpy(kr + nope, lat.data() + static_cast<size_t>(p) * krow + kvl, sizeof(float) * rope);
      }
      MatMul(UvHead(L, hh, nope, vd), lat_only.data(), len, tmp.data());
      for (int p = 0; p < len; ++p)
        std::memcpy(V.data() + (static_cast<size_t>(p) * H + hh) * vd, tmp.data() + static_cast<size_t>(p) * vd, sizeof(float) * vd);
    }
    std::vector<int32_t> ident(len);
    for (int p = 0; p < len; ++p) ident[p] = p;
    const AttnSeq one{0, sq.m, sq.start, ident.data()};
    PagedAttention(q_.data() + static_cast<size_t>(sq.q_row) * H * qk, &one, 1, K.data(), V.data(), DType::kF32,
                   AttnShape{H, H, qk, vd, H * qk, H * vd}, c_.attn_scale_mult / std::sqrt(static_cast<float>(qk)),
                   attn_.data() + static_cast<size_t>(sq.q_row) * H * vd);
  }
}

}  // namespace deepinfer
