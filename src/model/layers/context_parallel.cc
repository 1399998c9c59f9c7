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

void ContextParallel::WriteKv(PagedKvCache& kv, int l, const float* k, const float* v, const int32_t* slots) {
  const int C = ranks(), ke = kv.k_row_elems(), ve = kv.v_row_elems();  // ve = 0: no V plane (MLA)
  const size_t n = mine_.size();
  // Per rank: its K rows, then its V rows (f32: the cache conversion happens at the write, identically to one
  // process).
  send_.resize(n * (ke + ve));
  if (n) std::memcpy(send_.data(), k, sizeof(float) * n * ke);
  if (n && ve) std::memcpy(send_.data() + n * ke, v, sizeof(float) * n * ve);
  const Status s = comm_->AllGatherV(send_.data(), sizeof(float) * send_.size(), &recv_, &sizes_);
  if (!s.ok()) dist::AbortJob("context-parallel K/V all-gather: " + s.ToString());
  for (int r = 0; r < C; ++r) slots_of_rank_[r].clear();
  for (int g = 0; g < total(); ++g) slots_of_rank_[owner_[g]].push_back(slots[g]);
  size_t off = 0;
  for (int r = 0; r < C; ++r) {
    const int cnt = static_cast<int>(slots_of_rank_[r].size());
    if (sizes_[r] != sizeof(float) * cnt * (ke + ve)) dist::AbortJob("context-parallel K/V all-gather: rank " + std::to_string(r) + " sent an unexpected row count (ranks disagree on the batch)");
    const float* base = reinterpret_cast<const float*>(recv_.data() + off);
    if (cnt) kv.Write(l, base, ve ? base + static_cast<size_t>(cnt) * ke : nullptr, slots_of_rank_[r].data(), cnt);
    off += sizes_[r];
  }
}

void ContextParallel::GatherRows(const std::vector<int32_t>& rows, const float* x, int width, float* out) {
  const int C = ranks();
  send_.clear();
  for (int32_t g : rows)
    if (owner_[g] == rank()) send_.insert(send_.end(), x + static_cast<size_t>(local_[g]) * width, x + static_cast<size_t>(local_[g] + 1) * width);
  const Status s = comm_->AllGatherV(send_.data(), sizeof(float) * send_.size(), &recv_, &sizes_);
  if (!s.ok()) dist::AbortJob("context-parallel row gather: " + s.ToString());
  // Row j of the request comes from its owner's packed rows, in request order.
  std::vector<size_t> at(C, 0), base(C, 0);
  for (int r = 1; r < C; ++r) base[r] = base[r - 1] + sizes_[r - 1];
  for (size_t j = 0; j < rows.size(); ++j) {
    const int o = owner_[rows[j]];
    std::memcpy(out + j * width, recv_.data() + base[o] + at[o], sizeof(float) * width);
    at[o] += sizeof(float) * width;
  }
}

void WriteBatchKv(const BatchView& b, PagedKvCache& kv, int l, const float* k, const float* v) {
  if (b.cp) b.cp->WriteKv(kv, l, k, v, b.cp_slots);
  else kv.Write(l, k, v, b.kv_slots, b.n);
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
      out->push_back({cp.local(g), len, q.start + i, q.rows});
      i += len;
    }
  }
}

}  // namespace deepinfer
