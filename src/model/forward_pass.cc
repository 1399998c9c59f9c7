#include "model/forward_pass.h"

#include <algorithm>
#include <cstring>

#include "model/shard.h"

namespace deepinfer {

ForwardPass::ForwardPass(const Model& model, const ModelConfig& lc, int max_tokens, const dist::DistContext* dist)
    : ops_(OpsFor(model.tok_embd.device)), model_(model), c_(model.config), shard_(model.shard), dist_(dist && !dist->pc.single() ? dist : nullptr),
      max_tokens_(max_tokens) {
  const size_t m = static_cast<size_t>(max_tokens_);
  // The layers run with this rank's shapes (tensor parallelism: its heads and FFN slices).
  if (c_.is_dsv4()) {
    dsv4_ = std::make_unique<Dsv4Attention>(ops_, lc, max_tokens_);
    hc_ = std::make_unique<HyperConnection>(ops_, c_.dsv4.hc, c_.hidden, c_.dsv4.hc_iters, c_.dsv4.hc_eps, c_.rms_eps, max_tokens_);
    streams_.resize(m * c_.dsv4.hc * c_.hidden);
  } else if (c_.mla) mla_ = std::make_unique<MlaAttention>(ops_, lc, max_tokens_);
  else gqa_ = std::make_unique<GqaAttention>(ops_, lc, max_tokens_, WholeNormSplitFor());
  bool any_dense = false;
  for (int l = 0; l < c_.n_layers + c_.n_mtp; ++l) any_dense = any_dense || !c_.IsMoeLayer(l);
  if (any_dense) mlp_ = std::make_unique<DenseMlp>(ops_, max_tokens_, lc.intermediate, lc.ffn_act);
  if (dist_ && dist_->pc.cp > 1)
    cp_ = std::make_unique<ContextParallel>(dist_->cp.get(), dist_->pc.cp_contiguous ? CpSplit::kContiguous : CpSplit::kBalanced);
  if (c_.n_experts > 0) moe_ = std::make_unique<MoeLayer>(ops_, model_, lc, max_tokens_, dist_);
  if (c_.n_mtp > 0) mtp_in_.resize(m * 2 * c_.mtp_hidden());
  x_.resize(m * c_.hidden);
  xn_.resize(m * c_.hidden);
  y_.resize(m * c_.hidden);
  pos_.resize(m);
}

WholeNormSplit ForwardPass::WholeNormSplitFor() const {
  WholeNormSplit s;
  if (c_.qk_norm != QkNorm::kWhole || !dist_ || dist_->pc.tp == 1) return s;
  s.tp = dist_->tp.get();
  s.q_width = c_.n_heads * c_.head_dim;
  s.k_width = c_.n_kv_heads * c_.head_dim;
  // tp > kv heads: each KV head is held by tp / kv heads ranks (one each), and summed that many times.
  s.k_replicas = dist_->pc.tp > c_.n_kv_heads ? dist_->pc.tp / c_.n_kv_heads : 1;
  return s;
}

Status ForwardPass::Plan(const SeqForward* seqs, int num_seqs, const PagedKvCache& kv, int* total_out) {
  const int bs = kv.block_size();
  const KvLayout& layout = kv.layout();
  const int G = layout.num_groups();
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

  logit_rows_.clear();
  tokens_.resize(total);
  int row = 0;
  for (int s = 0; s < num_seqs; ++s) {
    const SeqForward& q = seqs[s];
    for (int i = 0; i < q.n; ++i) {
      tokens_[row + i] = q.tokens[i];
      pos_[row + i] = q.start + i;
    }
    if (q.all_logits)
      for (int i = 0; i < q.n; ++i) logit_rows_.push_back(row + i);
    else if (q.want_logits)
      logit_rows_.push_back(row + q.n - 1);
    row += q.n;
  }
  // Per KV group: the physical K/V row of every position each sequence reads and of each token it writes. A
  // window-W group reads only [start - W + 1, ..) (the attention kernels never read below the first row's
  // window): its rows start there (AttnSeq::rows_first), and the blocks before may already be released. An
  // approximate replay's rows read from its start on (SeqForward::window_floor).
  grp_.resize(G);
  for (int g = 0; g < G; ++g) {
    GroupRows& gr = grp_[g];
    const int window = layout.window(g);
    gr.rows.clear();
    gr.seqs.clear();
    gr.slots.resize(total);
    gr.rows_begin.clear();
    gr.rows_first.clear();
    row = 0;
    for (int s = 0; s < num_seqs; ++s) {
      const SeqForward& q = seqs[s];
      const int32_t* table = q.block_table + static_cast<size_t>(g) * q.num_blocks;
      const int lo = window > 0 ? std::max({0, q.start - window + 1, q.window_floor}) : 0;
      gr.rows_begin.push_back(gr.rows.size());
      gr.rows_first.push_back(lo);
      for (int p = lo; p < q.start + q.n; ++p) {
        const int32_t b = table[p / bs];
        if (b < 0)
          return Internal("forward: KV group " + std::to_string(g) + " has no block for position " + std::to_string(p) +
                          " (window " + std::to_string(window) + ", rows from " + std::to_string(q.start) + ")");
        gr.rows.push_back(b * bs + p % bs);
      }
      for (int i = 0; i < q.n; ++i)
        gr.slots[row + i] =
            window == 0 && q.start + i < q.kv_cached_end ? -1 : gr.rows[gr.rows_begin.back() + q.start + i - lo];
      row += q.n;
    }
    row = 0;
    for (int s = 0; s < num_seqs; ++s) {  // pointers into rows are stable only after it stopped growing
      gr.seqs.push_back({row, seqs[s].n, seqs[s].start, gr.rows.data() + gr.rows_begin[s], gr.rows_first[s]});
      row += seqs[s].n;
    }
    gr.view = BatchView{total, pos_.data(), gr.slots.data(), gr.seqs.data(), static_cast<int>(gr.seqs.size())};
  }
  *total_out = total;
  if (cp_) {
    // Context parallel: keep this rank's rows (compacted in order) and the whole batch's KV slots.
    std::vector<int> seq_rows(num_seqs);
    for (int s = 0; s < num_seqs; ++s) seq_rows[s] = seqs[s].n;
    cp_->Plan(seq_rows);
    const std::vector<int32_t>& mine = cp_->mine();
    for (GroupRows& gr : grp_) {
      gr.cp_slots.assign(gr.slots.begin(), gr.slots.begin() + total);
      LocalAttnSeqs(*cp_, gr.seqs.data(), static_cast<int>(gr.seqs.size()), &gr.cp_seqs);
      for (size_t i = 0; i < mine.size(); ++i) gr.slots[i] = gr.slots[mine[i]];
      gr.view = BatchView{static_cast<int>(mine.size()), pos_.data(), gr.slots.data(), gr.cp_seqs.data(),
                          static_cast<int>(gr.cp_seqs.size()), cp_.get(), gr.cp_slots.data()};
    }
    int64_t work = 0;
    for (size_t i = 0; i < mine.size(); ++i) {
      tokens_[i] = tokens_[mine[i]];  // mine is increasing: i <= mine[i], compaction in place is safe
      pos_[i] = pos_[mine[i]];
      work += pos_[i] + 1;
    }
    cp_->AddWork(work);
    dist_->attention_work.fetch_add(work, std::memory_order_relaxed);
  }
  batch_ = grp_[0].view;
  if (G > 1) {
    grp_views_.clear();
    for (const GroupRows& gr : grp_) grp_views_.push_back(gr.view);
    batch_.groups = grp_views_.data();
    batch_.num_groups = G;
  }
  return Status::Ok();
}

// RMSNorm of the logit rows of x_ with `norm`, then the vocabulary projection.
Status ForwardPass::Logits(const std::vector<float>& norm, const TensorView& head, float* logits) {
  const int h = c_.hidden, rows = static_cast<int>(logit_rows_.size());
  if (cp_) {
    // Each logit row's owner sends its hidden state; every rank then projects every logit row.
    cp_rows_.resize(static_cast<size_t>(rows) * h);
    DI_RETURN_IF_ERROR(cp_->GatherRows(logit_rows_, x_.data(), h, cp_rows_.data()));
    if (xn_.size() < cp_rows_.size()) xn_.resize(cp_rows_.size());
    ops_.RmsNorm(cp_rows_.data(), norm.data(), c_.rms_eps, rows, h, xn_.data());
  } else {
    for (int r = 0; r < rows; ++r)
      ops_.RmsNorm(x_.data() + static_cast<size_t>(logit_rows_[r]) * h, norm.data(), c_.rms_eps, 1, h,
              xn_.data() + static_cast<size_t>(r) * h);
  }
  if (!shard_.split()) {
    ops_.MatMul(head, xn_.data(), rows, logits);
    return Status::Ok();
  }
  // Vocabulary parallel: rows x stride per rank (the last rank's slice zero-padded), gathered in rank order.
  const int V = c_.vocab_size, stride = shard_.vocab_stride, T = shard_.tp, nv = shard_.vocab_rows;
  const size_t slice = static_cast<size_t>(rows) * stride;
  vocab_local_.assign(slice, 0.f);
  vocab_gather_.resize(slice * T);
  if (nv > 0) {
    ops_.MatMul(head, xn_.data(), rows, vocab_gather_.data());  // rows x nv, repacked to the padded stride
    for (int r = 0; r < rows; ++r)
      std::memcpy(vocab_local_.data() + static_cast<size_t>(r) * stride, vocab_gather_.data() + static_cast<size_t>(r) * nv,
                  sizeof(float) * nv);
  }
  const Status s = dist_->tp->AllGather(vocab_local_.data(), slice * sizeof(float), vocab_gather_.data());
  if (!s.ok()) return Status(s.code(), "tensor-parallel logits all-gather: " + s.message());
  for (int q = 0; q < T; ++q) {
    const int v0 = std::min(V, q * stride), n = std::min(stride, V - v0);
    for (int r = 0; r < rows; ++r)
      std::memcpy(logits + static_cast<size_t>(r) * V + v0, vocab_gather_.data() + (static_cast<size_t>(q) * rows + r) * stride,
                  sizeof(float) * n);
  }
  return Status::Ok();
}

Status ForwardPass::FinalHidden(int total, float* hidden) {
  const int h = c_.hidden;
  if (c_.is_dsv4()) {
    // V4's MTP reads the streams before the head collapses them (V4 attention does not run under CP).
    std::memcpy(hidden, streams_.data(), sizeof(float) * static_cast<size_t>(total) * c_.mtp_hidden());
    return Status::Ok();
  }
  if (!cp_) {
    ops_.RmsNorm(x_.data(), model_.out_norm.data(), c_.rms_eps, total, h, hidden);
    return Status::Ok();
  }
  cp_all_rows_.resize(total);
  for (int r = 0; r < total; ++r) cp_all_rows_[r] = r;
  cp_rows_.resize(static_cast<size_t>(total) * h);
  DI_RETURN_IF_ERROR(cp_->GatherRows(cp_all_rows_, x_.data(), h, cp_rows_.data()));
  ops_.RmsNorm(cp_rows_.data(), model_.out_norm.data(), c_.rms_eps, total, h, hidden);
  return Status::Ok();
}

Status ForwardPass::Embed(const TensorView& embd) {
  const int total = batch_.n;
  const int h = c_.hidden;
  if (!shard_.split()) {
    for (int r = 0; r < total; ++r)
      ops_.MatrixRow(embd, tokens_[r], x_.data() + static_cast<size_t>(r) * h);
    return Status::Ok();
  }
  const int v0 = shard_.vocab_begin, nv = shard_.vocab_rows;
  for (int r = 0; r < total; ++r) {
    float* out = x_.data() + static_cast<size_t>(r) * h;
    const int t = tokens_[r] - v0;
    if (t >= 0 && t < nv) ops_.MatrixRow(embd, t, out);
    else std::memset(out, 0, sizeof(float) * h);
  }
  return TpAllReduce(x_.data(), total);  // one rank holds each row, the others add zeros: exact
}

Status ForwardPass::TpAllReduce(float* data, int rows) {
  if (!dist_ || dist_->pc.tp == 1 || rows == 0) return Status::Ok();
  const Status s = dist_->tp->AllReduceSum(data, static_cast<size_t>(rows) * c_.hidden);
  return s.ok() ? s : Status(s.code(), "tensor-parallel all-reduce: " + s.message());
}

void ForwardPass::Norm(const std::vector<float>& w, Rows rows) {
  const size_t off = static_cast<size_t>(rows.row0) * c_.hidden;
  if (rows.b->n > 0) ops_.RmsNorm(x_.data() + off, w.data(), c_.rms_eps, rows.b->n, c_.hidden, xn_.data() + off);
}

void ForwardPass::Scale(float s, Rows rows) {
  float* x = x_.data() + static_cast<size_t>(rows.row0) * c_.hidden;
  for (size_t i = 0; i < static_cast<size_t>(rows.b->n) * c_.hidden; ++i) x[i] *= s;
}

void ForwardPass::Input(Rows rows) {
  const size_t off = static_cast<size_t>(rows.row0) * c_.hidden;
  std::copy_n(x_.data() + off, static_cast<size_t>(rows.b->n) * c_.hidden, xn_.data() + off);
}

void ForwardPass::NormOutput(const std::vector<float>& w, Rows rows) {
  const size_t off = static_cast<size_t>(rows.row0) * c_.hidden;
  if (rows.b->n > 0) ops_.RmsNorm(y_.data() + off, w.data(), c_.rms_eps, rows.b->n, c_.hidden, y_.data() + off);
}

void ForwardPass::AddResidual(Rows rows) {
  const size_t off = static_cast<size_t>(rows.row0) * c_.hidden;
  float *x = x_.data() + off, *y = y_.data() + off;
  for (size_t i = 0; i < static_cast<size_t>(rows.b->n) * c_.hidden; ++i) x[i] += y[i];
}

Status ForwardPass::Attention(const LayerWeights& L, int l, PagedKvCache& kv, Rows rows, bool rope) {
  const BatchView& b = rows.b->ForGroup(kv.group_of(l));
  const int n = b.n;
  if (n == 0) {
    // An empty step (another attention group has work): nothing to attend. Under context parallelism a rank
    // with no rows of a non-empty batch still takes part in the layer's K/V exchange.
    if (b.cp && b.cp->total() > 0) return b.cp->WriteKv(kv, l, nullptr, nullptr, b.cp_slots);
    return Status::Ok();
  }
  const size_t off = static_cast<size_t>(rows.row0) * c_.hidden;
  if (mla_) DI_RETURN_IF_ERROR(mla_->Forward(L.mla, b, l, kv, xn_.data() + off, y_.data() + off));
  else DI_RETURN_IF_ERROR(gqa_->Forward(L.gqa, b, l, kv, rope, xn_.data() + off, y_.data() + off));
  return TpAllReduce(y_.data() + off, n);  // tensor parallel: each rank's o_proj covers its heads
}

Status ForwardPass::AttentionDsv4(const LayerWeights& L, int layer, PagedKvCache& kv, Rows rows) {
  const size_t off = static_cast<size_t>(rows.row0) * c_.hidden;
  DI_RETURN_IF_ERROR(dsv4_->Forward(L.dsv4, *rows.b, layer, kv, xn_.data() + off, y_.data() + off));
  if (rows.b->n == 0) return Status::Ok();
  return TpAllReduce(y_.data() + off, rows.b->n);  // tensor parallel: each rank's wo_b covers its output groups
}

Status ForwardPass::Mlp(const LayerWeights& L, int moe_layer) {
  const int n = batch_.n;
  if (L.is_moe()) return moe_->Forward(L, moe_layer, xn_.data(), n, y_.data(), tokens_.data());
  if (n == 0) return Status::Ok();
  mlp_->Forward(L.mlp, xn_.data(), n, y_.data());
  return TpAllReduce(y_.data(), n);  // tensor parallel: each rank's down projection covers its FFN slice
}

void ForwardPass::SplitMicroBatches() {
  const int n = batch_.n, na = (n + 1) / 2;
  const int G = batch_.groups ? batch_.num_groups : 1;
  for (int i = 0; i < 2; ++i) {
    micro_[i].seqs.resize(G);
    micro_[i].views.resize(G);
  }
  micro_[0].row0 = 0;
  micro_[1].row0 = na;
  for (int g = 0; g < G; ++g) {
    const BatchView& gb = batch_.ForGroup(g);
    for (Micro& m : micro_) m.seqs[g].clear();
    for (int s = 0; s < gb.num_seqs; ++s) {
      const AttnSeq& q = gb.seqs[s];
      const int r0 = static_cast<int>(q.q_row), r1 = r0 + q.m;
      if (r1 <= na) {
        micro_[0].seqs[g].push_back(q);
      } else if (r0 >= na) {
        micro_[1].seqs[g].push_back({r0 - na, q.m, q.start, q.rows, q.rows_first});
      } else {
        micro_[0].seqs[g].push_back({r0, na - r0, q.start, q.rows, q.rows_first});
        micro_[1].seqs[g].push_back({0, r1 - na, q.start + (na - r0), q.rows, q.rows_first});
      }
    }
    for (int i = 0; i < 2; ++i) {
      Micro& m = micro_[i];
      m.views[g] = BatchView{i == 0 ? na : n - na, batch_.pos + m.row0, gb.kv_slots + m.row0, m.seqs[g].data(),
                             static_cast<int>(m.seqs[g].size())};
    }
  }
  for (Micro& m : micro_) {
    m.b = m.views[0];
    if (G > 1) {
      m.b.groups = m.views.data();
      m.b.num_groups = G;
    }
  }
}

void ForwardPass::MoeBegin(int layer, int i) {
  const size_t off = static_cast<size_t>(micro_[i].row0) * c_.hidden;
  moe_->Begin(layer, i, xn_.data() + off, micro_[i].b.n, micro_[i].row0, tokens_.data() + micro_[i].row0);
}

Status ForwardPass::MoeExperts(int i) { return moe_->Experts(i); }

Status ForwardPass::MoeEnd(int i) { return moe_->End(i, y_.data() + static_cast<size_t>(micro_[i].row0) * c_.hidden); }

}  // namespace deepinfer
