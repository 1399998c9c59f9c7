// Two-batch overlap (SGLang's name and flag; DeepSeek's "dual micro-batch overlap", research/moe_parallel.md 4):
// under expert parallelism a MoE layer spends part of its time in two exchanges (dispatch, combine) in which a
// rank only waits for the network. Splitting each forward's batch into two micro-batches A and B lets one's
// exchange run on the communication stream (dist/comm_stream.h) while the other computes:
//
//   layer l:  attn(A) begin(A) >dispatch(A)   [end(B) of layer l-1]   attn(B) begin(B) >dispatch(B)
//             experts(A) >combine(A)   experts(B) >combine(B)   end(A)
//
// (">" marks a submission to the stream; each wait sits as late as the data allows). dispatch(A) overlaps attn(B),
// dispatch(B) and combine(A) overlap the experts, and combine(B) overlaps the next layer's attn(A).
//
// Results are bitwise those of one forward over the whole batch: every operation is row-wise or per sequence
// (the engine's batch-invariance contract), a sequence cut by the split is two consecutive chunks of itself (B's
// rows attend to A's K/V, written earlier in the same layer, as chunked prefill does), and the MoE layer picks
// routing ranks and replicas by a row's index in the whole batch. Every rank submits the same exchanges in the
// same order whatever its row count (an empty micro-batch still exchanges), which is what keeps the collectives
// on the stream matched.
#include <cstring>

#include "dist/comm_stream.h"
#include "model/transformer.h"

namespace deepinfer {

// A = the first ceil(n / 2) rows, B = the rest; a sequence across the boundary is cut into two runs.
void Transformer::SplitMicroBatches() {
  const int n = batch_.n, na = (n + 1) / 2;
  for (Micro& m : micro_) m.seqs.clear();
  for (int s = 0; s < batch_.num_seqs; ++s) {
    const AttnSeq& q = batch_.seqs[s];
    const int r0 = static_cast<int>(q.q_row), r1 = r0 + q.m;
    if (r1 <= na) {
      micro_[0].seqs.push_back(q);
    } else if (r0 >= na) {
      micro_[1].seqs.push_back({r0 - na, q.m, q.start, q.rows});
    } else {
      micro_[0].seqs.push_back({r0, na - r0, q.start, q.rows});
      micro_[1].seqs.push_back({0, r1 - na, q.start + (na - r0), q.rows});
    }
  }
  micro_[0].row0 = 0;
  micro_[1].row0 = na;
  micro_[0].moe = moe_.get();
  micro_[1].moe = moe2_.get();
  for (int i = 0; i < 2; ++i) {
    Micro& m = micro_[i];
    m.b = BatchView{i == 0 ? na : n - na, batch_.pos + m.row0, batch_.kv_slots + m.row0, m.seqs.data(),
                    static_cast<int>(m.seqs.size())};
  }
}

void Transformer::MoeBegin(const LayerWeights& L, int moe_layer, Micro& m) {  // L: its norm; experts: ep_weights_
  const int h = c_.hidden;
  const size_t off = static_cast<size_t>(m.row0) * h;
  RmsNorm(x_.data() + off, L.ffn_norm.data(), c_.rms_eps, m.b.n, h, xn_.data() + off);
  dist::Communicator* comm = dist_->moe.get();
  m.moe->EpBegin(ep_weights_[moe_layer], placement_[moe_layer], xn_.data() + off, m.b.n, m.row0, comm->size(), dist_->pc.tp_rank(),
                 dist_->pc.tp, dist_->pc.moe_tp(), expert_load_[moe_layer].data());
  MoeMlp* moe = m.moe;
  m.ticket = dist_->moe_stream->Submit([moe, comm] { return moe->EpDispatch(*comm); });
}

void Transformer::MoeExperts(Micro& m) {
  Status s = dist_->moe_stream->Wait(m.ticket);
  if (s.ok()) s = m.moe->EpExperts(dist_->moe->rank());
  if (!s.ok()) dist::AbortJob("expert-parallel MoE (two-batch overlap): " + s.ToString());
  dist_->expert_rows.fetch_add(m.moe->ep_rows_computed(), std::memory_order_relaxed);
  MoeMlp* moe = m.moe;
  dist::Communicator* comm = dist_->moe.get();
  m.ticket = dist_->moe_stream->Submit([moe, comm] { return moe->EpCombine(*comm); });
}

void Transformer::MoeEnd(Micro& m) {
  const Status s = dist_->moe_stream->Wait(m.ticket);
  if (!s.ok()) dist::AbortJob("expert-parallel MoE (two-batch overlap): " + s.ToString());
  const int h = c_.hidden, n = m.b.n;
  const size_t off = static_cast<size_t>(m.row0) * h;
  m.moe->EpEnd(y_.data() + off);
  TpAllReduce(y_.data() + off, n);
  float *x = x_.data() + off, *y = y_.data() + off;
  for (size_t i = 0; i < static_cast<size_t>(n) * h; ++i) x[i] += y[i];
}

void Transformer::LayersTbo(PagedKvCache& kv) {
  SplitMicroBatches();
  Micro &a = micro_[0], &b = micro_[1];
  bool b_pending = false;  // B's MoE output of the previous layer is still on its way back
  for (int l = 0; l < c_.n_layers; ++l) {
    const LayerWeights& L = model_.layers[l];
    if (!L.is_moe() || L.moe.placement.empty()) {
      // A dense layer has no exchange to hide: the whole batch at once, as without overlap.
      if (b_pending) MoeEnd(b);
      b_pending = false;
      Layer(L, l, kv, l);
      continue;
    }
    AttentionBlock(L, l, kv, a.b, a.row0);
    MoeBegin(L, l, a);
    if (b_pending) MoeEnd(b);
    AttentionBlock(L, l, kv, b.b, b.row0);
    MoeBegin(L, l, b);
    MoeExperts(a);
    MoeExperts(b);
    MoeEnd(a);
    b_pending = true;
  }
  if (b_pending) MoeEnd(b);
}

}  // namespace deepinfer
