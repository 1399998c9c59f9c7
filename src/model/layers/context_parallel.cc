#include "model/layers/context_parallel.h"

#include <cstring>

#include "model/layers/batch.h"

namespace deepinfer {

void ContextParallel::Plan(const std::vector<int>& seq_rows) {
  const int C = ranks();
  owner_.clear();
  int rr = 0;  // round-robin cursor of the short runs
  for (int n : seq_rows) {
    const int pieces = split_ == CpSplit::kBalanced ? 2 * C : C;
    if (n >= pieces) {
      // Piece sizes differ by at most one row (the first n % pieces pieces take the extra).
      for (int j = 0; j < pieces; ++j) {
        const int len = n / pieces + (j < n % pieces ? 1 : 0);
        const int r = split_ == CpSplit::kBalanced ? (j < C ? j : 2 * C - 1 - j) : j;
        owner_.insert(owner_.end(), len, r);
      }
    } else {
      for (int i = 0; i < n; ++i) owner_.push_back(rr++ % C);
    }
  }
  const int total = static_cast<int>(owner_.size());
  mine_.clear();
  local_.assign(total, -1);
  slots_of_rank_.assign(C, {});
  for (int g = 0; g < total; ++g)
    if (owner_[g] == rank()) {
      local_[g] = static_cast<int>(mine_.size());
      mine_.push_back(g);
    }
}

Status ContextParallel::WriteKv(PagedKvCache& kv, int l, const float* k, const float* v, const int32_t* slots) {
  const int C = ranks();
  const size_t kb = kv.k_row_bytes(), vb = kv.v_row_bytes();  // vb = 0: no V plane (MLA)
  const size_t n = mine_.size();
  // Per rank: its K rows, then its V rows, already in the cache dtype (the conversion Write would do, done by
  // the row's owner: the cache bytes are those of one process, and a bf16/f16 cache sends half of f32).
  kv_send_.resize(n * (kb + vb));
  kv.Encode(k, v, static_cast<int>(n), kv_send_.data(), kv_send_.data() + n * kb);
  const Status s = comm_->AllGatherV(kv_send_.data(), kv_send_.size(), &recv_, &sizes_);
  if (!s.ok()) return Status(s.code(), "context-parallel K/V all-gather: " + s.message());
  for (int r = 0; r < C; ++r) slots_of_rank_[r].clear();
  for (int g = 0; g < total(); ++g) slots_of_rank_[owner_[g]].push_back(slots[g]);
  size_t off = 0;
  for (int r = 0; r < C; ++r) {
    const size_t cnt = slots_of_rank_[r].size();
    if (sizes_[r] != cnt * (kb + vb))
      return Internal("context-parallel K/V all-gather: rank " + std::to_string(r) + " sent an unexpected row count (ranks disagree on the batch)");
    const uint8_t* base = recv_.data() + off;
    if (cnt) kv.WriteEncoded(l, base, base + cnt * kb, slots_of_rank_[r].data(), static_cast<int>(cnt));
    off += sizes_[r];
  }
  return Status::Ok();
}

Status ContextParallel::GatherRows(const std::vector<int32_t>& rows, const float* x, int width, float* out) {
  const int C = ranks();
  send_.clear();
  for (int32_t g : rows)
    if (owner_[g] == rank()) send_.insert(send_.end(), x + static_cast<size_t>(local_[g]) * width, x + static_cast<size_t>(local_[g] + 1) * width);
  const Status s = comm_->AllGatherV(send_.data(), sizeof(float) * send_.size(), &recv_, &sizes_);
  if (!s.ok()) return Status(s.code(), "context-parallel row gather: " + s.message());
  // Row j of the request comes from its owner's packed rows, in request order.
  std::vector<size_t> at(C, 0), base(C, 0);
  for (int r = 1; r < C; ++r) base[r] = base[r - 1] + sizes_[r - 1];
  for (size_t j = 0; j < rows.size(); ++j) {
    const int o = owner_[rows[j]];
    std::memcpy(out + j * width, recv_.data() + base[o] + at[o], sizeof(float) * width);
    at[o] += sizeof(float) * width;
  }
  return Status::Ok();
}

Status WriteBatchKv(const BatchView& b, PagedKvCache& kv, int l, const float* k, const float* v) {
  if (b.cp) return b.cp->WriteKv(kv, l, k, v, b.cp_slots);
  kv.Write(l, k, v, b.kv_slots, b.n);
  return Status::Ok();
}

void LocalAttnSeqs(const ContextParallel& cp, const AttnSeq* seqs, int num_seqs, std::vector<AttnSeq>* out) {
  out->clear();
  for (int s = 0; s < num_seqs; ++s) {
    const AttnSeq& q = seqs[s];
    for (int i = 0; i < q.m;) {
      const int g = static_cast<int>(q.q_row) + i;
      if (cp.owner(g) != cp.rank()) {
        ++i;
        continue;
      }
      int len = 1;
      while (i + len < q.m && cp.owner(g + len) == cp.rank()) ++len;
      out->push_back({cp.local(g), len, q.start + i, q.rows, q.rows_first});
      i += len;
    }
  }
}

}  // namespace deepinfer
