#include "model/transformer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "base/logging.h"

#include "kernels/cpu/gemm.h"
#include "model/shard.h"

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
    : model_(model), c_(model.config), lc_(RankConfig(model)), shard_(model.shard), max_tokens_(max_batch_tokens) {
  const size_t m = static_cast<size_t>(max_tokens_);
  // The layers run with this rank's shapes (tensor parallelism: its heads and FFN slices).
  if (c_.mla) mla_ = std::make_unique<MlaAttention>(lc_, max_tokens_);
  else gqa_ = std::make_unique<GqaAttention>(lc_, max_tokens_);
  bool any_dense = false;
  for (int l = 0; l < c_.n_layers + c_.n_mtp; ++l) any_dense = any_dense || !c_.IsMoeLayer(l);
  if (any_dense) mlp_ = std::make_unique<DenseMlp>(max_tokens_, lc_.intermediate);
  dist_ = dist::Context();
  if (dist_ && dist_->pc.single()) dist_ = nullptr;
  if (dist_ && dist_->pc.cp > 1)
    cp_ = std::make_unique<ContextParallel>(dist_->cp.get(), dist_->pc.cp_contiguous ? CpSplit::kContiguous : CpSplit::kBalanced);
  // Expert parallelism: one expert may receive every rank's tokens.
  if (c_.n_experts > 0) moe_ = std::make_unique<MoeMlp>(lc_, max_tokens_, dist_ ? dist_->pc.world : 1);
  for (const LayerWeights& L : model_.layers)
    if (L.is_moe() && !L.moe.placement.empty() && dist_) {
      placement_.resize(c_.n_layers);
      expert_load_.assign(c_.n_layers, std::vector<int64_t>(c_.n_experts, 0));
      break;
    }
  // Two-batch overlap needs something to overlap: expert-parallel MoE layers (context parallelism is refused at
  // start-up). A micro-batch holds at most half the batch, but the buffers are sized for the whole one.
  if (dist_ && dist_->moe_stream && !placement_.empty()) {
    tbo_ = true;
    moe2_ = std::make_unique<MoeMlp>(lc_, max_tokens_, dist_->pc.world);
  }
  for (int l = 0; l < static_cast<int>(placement_.size()); ++l) placement_[l] = model_.layers[l].moe.placement;
  if (!placement_.empty()) {
    ep_weights_.resize(c_.n_layers);
    ep_moved_.resize(c_.n_layers);
    for (int l = 0; l < c_.n_layers; ++l)
      if (model_.layers[l].is_moe()) {
        ep_weights_[l] = model_.layers[l].moe;
        ep_moved_[l].resize(c_.n_experts);
      }
  }
  x_.resize(m * c_.hidden);
  xn_.resize(m * c_.hidden);
  y_.resize(m * c_.hidden);
  pos_.resize(m);
  slot_of_token_.resize(m);
}

Status Transformer::Forward(const int32_t* tokens, int n, int start, KvCache& kv, float* logits, bool all_logits,
                            float* hidden) {
  if (n <= 0) return InvalidArgument("forward: no tokens");
  if (start < 0 || start + n > kv.capacity())
    return OutOfRange("forward: positions [" + std::to_string(start) + ", " + std::to_string(start + n) +
                      ") exceed the KV cache capacity " + std::to_string(kv.capacity()));
  const int nb = static_cast<int>(kv.block_table().size());
  if (all_logits) {
    // One run per chunk with a logit row per token (row-wise invariance: the same rows as a decode would give).
    for (int done = 0; done < n; done += max_tokens_) {
      const int len = std::min(max_tokens_, n - done);
      SeqForward s{tokens + done, len, start + done, kv.block_table().data(), nb, true, true};
      DI_RETURN_IF_ERROR(ForwardBatch(&s, 1, kv.paged(), logits + static_cast<size_t>(done) * c_.vocab_size,
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
    if (q.all_logits)
      for (int i = 0; i < q.n; ++i) logit_rows_.push_back(row + i);
    else if (q.want_logits)
      logit_rows_.push_back(row + q.n - 1);
    row += q.n;
  }
  row = 0;
  for (int s = 0; s < num_seqs; ++s) {  // pointers into rows_ are stable only after it stopped growing
    attn_seqs_.push_back({row, seqs[s].n, seqs[s].start, rows_.data() + rows_begin[s]});
    row += seqs[s].n;
  }
  batch_ = BatchView{total, pos_.data(), slot_of_token_.data(), attn_seqs_.data(), static_cast<int>(attn_seqs_.size())};
  *total_out = total;
  if (!cp_) return Status::Ok();

  // Context parallel: keep this rank's rows (compacted in order) and the whole batch's KV slots.
  std::vector<int> seq_rows(num_seqs);
  for (int s = 0; s < num_seqs; ++s) seq_rows[s] = seqs[s].n;
  cp_->Plan(seq_rows);
  cp_slots_.assign(slot_of_token_.begin(), slot_of_token_.begin() + total);
  LocalAttnSeqs(*cp_, attn_seqs_.data(), static_cast<int>(attn_seqs_.size()), &cp_seqs_);
  const std::vector<int32_t>& mine = cp_->mine();
  int64_t work = 0;
  for (size_t i = 0; i < mine.size(); ++i) {
    tokens_[i] = tokens_[mine[i]];  // mine is increasing: i <= mine[i], compaction in place is safe
    pos_[i] = pos_[mine[i]];
    slot_of_token_[i] = slot_of_token_[mine[i]];
    work += pos_[i] + 1;
  }
  cp_->AddWork(work);
  dist_->attention_work.fetch_add(work, std::memory_order_relaxed);
  batch_ = BatchView{static_cast<int>(mine.size()), pos_.data(), slot_of_token_.data(), cp_seqs_.data(),
                     static_cast<int>(cp_seqs_.size()), cp_.get(), cp_slots_.data()};
  return Status::Ok();
}

// RMSNorm of the logit rows of x_ with `norm`, then the vocabulary projection.
void Transformer::Logits(const std::vector<float>& norm, const TensorView& head, float* logits) {
  const int h = c_.hidden, rows = static_cast<int>(logit_rows_.size());
  if (cp_) {
    // Each logit row's owner sends its hidden state; every rank then projects every logit row.
    cp_rows_.resize(static_cast<size_t>(rows) * h);
    cp_->GatherRows(logit_rows_, x_.data(), h, cp_rows_.data());
    if (xn_.size() < cp_rows_.size()) xn_.resize(cp_rows_.size());
    RmsNorm(cp_rows_.data(), norm.data(), c_.rms_eps, rows, h, xn_.data());
  } else {
    for (int r = 0; r < rows; ++r)
      RmsNorm(x_.data() + static_cast<size_t>(logit_rows_[r]) * h, norm.data(), c_.rms_eps, 1, h,
              xn_.data() + static_cast<size_t>(r) * h);
  }
  if (!shard_.split()) {
    MatMul(head, xn_.data(), rows, logits);
    return;
  }
  // Vocabulary parallel: rows x stride per rank (the last rank's slice zero-padded), gathered in rank order.
  const int V = c_.vocab_size, stride = shard_.vocab_stride, T = shard_.tp, nv = shard_.vocab_rows;
  const size_t slice = static_cast<size_t>(rows) * stride;
  vocab_local_.assign(slice, 0.f);
  vocab_gather_.resize(slice * T);
  if (nv > 0) {
    MatMul(head, xn_.data(), rows, vocab_gather_.data());  // rows x nv, repacked to the padded stride
    for (int r = 0; r < rows; ++r)
      std::memcpy(vocab_local_.data() + static_cast<size_t>(r) * stride, vocab_gather_.data() + static_cast<size_t>(r) * nv,
                  sizeof(float) * nv);
  }
  const Status s = dist_->tp->AllGather(vocab_local_.data(), slice * sizeof(float), vocab_gather_.data());
  if (!s.ok()) dist::AbortJob("tensor-parallel logits all-gather: " + s.ToString());
  for (int q = 0; q < T; ++q) {
    const int v0 = std::min(V, q * stride), n = std::min(stride, V - v0);
    for (int r = 0; r < rows; ++r)
      std::memcpy(logits + static_cast<size_t>(r) * V + v0, vocab_gather_.data() + (static_cast<size_t>(q) * rows + r) * stride,
                  sizeof(float) * n);
  }
}

void Transformer::FinalHidden(int total, float* hidden) {
  const int h = c_.hidden;
  if (!cp_) {
    RmsNorm(x_.data(), model_.out_norm.data(), c_.rms_eps, total, h, hidden);
    return;
  }
  cp_all_rows_.resize(total);
  for (int r = 0; r < total; ++r) cp_all_rows_[r] = r;
  cp_rows_.resize(static_cast<size_t>(total) * h);
  cp_->GatherRows(cp_all_rows_, x_.data(), h, cp_rows_.data());
  RmsNorm(cp_rows_.data(), model_.out_norm.data(), c_.rms_eps, total, h, hidden);
}

void Transformer::Embed(const TensorView& embd, int total) {
  const int h = c_.hidden;
  if (!shard_.split()) {
    for (int r = 0; r < total; ++r)
      DequantizeRow(embd.dtype, embd.row(tokens_[r]), x_.data() + static_cast<size_t>(r) * h, h);
    return;
  }
  const int v0 = shard_.vocab_begin, nv = shard_.vocab_rows;
  for (int r = 0; r < total; ++r) {
    float* out = x_.data() + static_cast<size_t>(r) * h;
    const int t = tokens_[r] - v0;
    if (t >= 0 && t < nv) DequantizeRow(embd.dtype, embd.row(t), out, h);
    else std::memset(out, 0, sizeof(float) * h);
  }
  TpAllReduce(x_.data(), total);  // one rank holds each row, the others add zeros: exact
}

Status Transformer::ForwardBatch(const SeqForward* seqs, int num_seqs, PagedKvCache& kv, float* logits, float* hidden) {
  int total = 0;
  DI_RETURN_IF_ERROR(PlanBatch(seqs, num_seqs, kv.block_size(), &total));
  Embed(model_.tok_embd, batch_.n);
  if (tbo_) LayersTbo(kv);
  else
    for (int l = 0; l < c_.n_layers; ++l) Layer(model_.layers[l], l, kv, l);
  if (hidden) FinalHidden(total, hidden);
  if (!logit_rows_.empty()) Logits(model_.out_norm, model_.lm_head, logits);
  return Status::Ok();
}

KvLayout Transformer::MtpKvLayout() const {
  KvLayout layout = lc_.kv_layout();
  layout.num_layers = std::max(1, c_.n_mtp);
  return layout;
}

Status Transformer::ForwardMtp(int k, const SeqForward* seqs, int num_seqs, const float* hidden, PagedKvCache& mtp_kv,
                               float* logits, float* out_hidden) {
  if (k < 0 || k >= static_cast<int>(model_.mtp.size()))
    return InvalidArgument("forward: the model has no MTP module " + std::to_string(k));
  int total = 0;
  DI_RETURN_IF_ERROR(PlanBatch(seqs, num_seqs, mtp_kv.block_size(), &total));
  const MtpWeights& P = model_.mtp[k];
  const int h = c_.hidden, n = batch_.n;
  mtp_in_.resize(static_cast<size_t>(max_tokens_) * 2 * h);
  Embed(P.embed, n);  // into x_, which eh_proj overwrites below
  for (int r = 0; r < n; ++r) {
    const int g = cp_ ? cp_->mine()[r] : r;  // hidden holds every row of the batch
    float* in = mtp_in_.data() + static_cast<size_t>(r) * 2 * h;
    RmsNorm(x_.data() + static_cast<size_t>(r) * h, P.enorm.data(), c_.rms_eps, 1, h, in);
    RmsNorm(hidden + static_cast<size_t>(g) * h, P.hnorm.data(), c_.rms_eps, 1, h, in + h);
  }
  if (n > 0) MatMul(P.eh_proj, mtp_in_.data(), n, x_.data());
  Layer(P.layer, k, mtp_kv);
  if (!logit_rows_.empty()) Logits(P.head_norm, P.head, logits);
  if (out_hidden && n > 0) {
    if (cp_) return InvalidArgument("forward: MTP output hidden states are not gathered under context parallelism");
    std::memcpy(out_hidden, x_.data(), sizeof(float) * static_cast<size_t>(n) * h);
  }
  return Status::Ok();
}

void Transformer::Layer(const LayerWeights& L, int l, PagedKvCache& kv, int moe_layer) {
  AttentionBlock(L, l, kv, batch_, 0);
  MlpBlock(L, moe_layer);
}

void Transformer::TpAllReduce(float* data, int rows) {
  if (!dist_ || dist_->pc.tp == 1 || rows == 0) return;
  const Status s = dist_->tp->AllReduceSum(data, static_cast<size_t>(rows) * c_.hidden);
  if (!s.ok()) dist::AbortJob("tensor-parallel all-reduce: " + s.ToString());
}

void Transformer::AttentionBlock(const LayerWeights& L, int l, PagedKvCache& kv, const BatchView& b, int row0) {
  const int n = b.n, h = c_.hidden;
  if (n == 0) {
    // An empty step (another attention group has work): nothing to attend. Under context parallelism a rank
    // with no rows of a non-empty batch still takes part in the layer's K/V exchange.
    if (b.cp && b.cp->total() > 0) b.cp->WriteKv(kv, l, nullptr, nullptr, b.cp_slots);
    return;
  }
  const size_t off = static_cast<size_t>(row0) * h;
  float *x = x_.data() + off, *xn = xn_.data() + off, *y = y_.data() + off;
  RmsNorm(x, L.attn_norm.data(), c_.rms_eps, n, h, xn);
  if (mla_) mla_->Forward(L.mla, b, l, kv, xn, y);
  else gqa_->Forward(L.gqa, b, l, kv, xn, y);
  TpAllReduce(y, n);  // tensor parallel: each rank's o_proj covers its heads
  for (size_t i = 0; i < static_cast<size_t>(n) * h; ++i) x[i] += y[i];
}

void Transformer::MlpBlock(const LayerWeights& L, int moe_layer) {
  const int n = batch_.n, h = c_.hidden;
  if (L.is_moe() && !L.moe.placement.empty()) {
    // Expert parallel: collective over every rank, even with no rows here.
    RmsNorm(x_.data(), L.ffn_norm.data(), c_.rms_eps, n, h, xn_.data());
    const bool live = moe_layer >= 0 && !placement_.empty();
    dist::Communicator& comm = *dist_->moe;
    moe_->EpBegin(live ? ep_weights_[moe_layer] : L.moe, live ? placement_[moe_layer] : L.moe.placement, xn_.data(), n, 0, comm.size(),
                  dist_->pc.tp_rank(), dist_->pc.tp, dist_->pc.moe_tp(), live ? expert_load_[moe_layer].data() : nullptr);
    // The two exchanges, timed: without two-batch overlap all of their time is exposed (the executor waits).
    const auto t0 = std::chrono::steady_clock::now();
    Status s = moe_->EpDispatch(comm);
    const auto t1 = std::chrono::steady_clock::now();
    if (s.ok()) s = moe_->EpExperts(comm.rank());
    const auto t2 = std::chrono::steady_clock::now();
    if (s.ok()) s = moe_->EpCombine(comm);
    const auto t3 = std::chrono::steady_clock::now();
    if (!s.ok()) dist::AbortJob("expert-parallel MoE: " + s.ToString());
    const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>((t1 - t0) + (t3 - t2)).count();
    dist_->moe_exchange_ns.fetch_add(ns, std::memory_order_relaxed);
    dist_->moe_exposed_ns.fetch_add(ns, std::memory_order_relaxed);
    moe_->EpEnd(y_.data());
    dist_->expert_rows.fetch_add(moe_->ep_rows_computed(), std::memory_order_relaxed);
    TpAllReduce(y_.data(), n);
    for (size_t i = 0; i < static_cast<size_t>(n) * h; ++i) x_[i] += y_[i];
    return;
  }
  if (n == 0) return;
  RmsNorm(x_.data(), L.ffn_norm.data(), c_.rms_eps, n, h, xn_.data());
  if (L.is_moe()) moe_->Forward(L.moe, xn_.data(), n, y_.data());
  else mlp_->Forward(L.mlp, xn_.data(), n, y_.data());
  TpAllReduce(y_.data(), n);  // tensor parallel: each rank's down projection covers its FFN slice
  for (size_t i = 0; i < static_cast<size_t>(n) * h; ++i) x_[i] += y_[i];
}

Status Transformer::BenchAttention(int l, const SeqForward* seqs, int num_seqs, PagedKvCache& kv) {
  if (l < 0 || l >= c_.n_layers) return InvalidArgument("bench: no layer " + std::to_string(l));
  int total = 0;
  DI_RETURN_IF_ERROR(PlanBatch(seqs, num_seqs, kv.block_size(), &total));
  Embed(model_.tok_embd, batch_.n);
  AttentionBlock(model_.layers[l], l, kv, batch_, 0);
  return Status::Ok();
}

StatusOr<int> Transformer::BenchMoe(int l, const float* xn, int n) {
  if (l < 0 || l >= c_.n_layers || !model_.layers[l].is_moe()) return InvalidArgument("bench: layer " + std::to_string(l) + " is not a MoE layer");
  if (n <= 0 || n > max_tokens_) return OutOfRange("bench: batch outside [1, max_batch_tokens]");
  moe_->Forward(model_.layers[l].moe, xn, n, y_.data());
  return moe_->DistinctExperts(n);
}

}  // namespace deepinfer
