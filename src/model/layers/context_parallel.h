// Context parallelism (--cp C): the C ranks of an attention group share each forward's token rows. Every rank
// runs the group's schedule (like tensor-parallel ranks) and keeps a full copy of the group's K/V cache; per
// forward each rank computes only its share of the rows (projections, attention queries, MLP), and each layer's
// new K/V rows are all-gathered so every rank writes the whole batch's K/V before attending. The rows a rank
// owns:
//   balanced   a run of n >= 2C rows of one sequence (a prefill chunk) is cut into 2C pieces; rank i takes
//              pieces i and 2C-1-i (head-tail), so the causal attention work (query x key pairs) is equal per
//              rank: an early piece with few keys pairs with a late piece with many;
//   contiguous a run of n >= C rows is cut into C consecutive pieces, piece i to rank i (the naive split, kept
//              to show the imbalance the balanced one removes: the last rank's queries see the most keys);
//   short runs (decode rows, chunks shorter than the pieces) go row by row round-robin over the ranks.
// Every rank computes the same assignment for every rank, so no plan is exchanged. Why all-gather and not a
// ring: decode reads every position's K/V, so gathered K/V is already where decode needs it (no second
// redistribution, no distributed softmax merge), the traffic per layer is one K/V row per token in the cache dtype (MLA: one latent
// row of 576 values; bf16 halves f32), and rows and results stay bitwise those of one process (each row's arithmetic is
// unchanged; only who computes it changes). The cost is memory: the KV cache is not divided by C.
#pragma once
#include <cstdint>
#include <vector>

#include "dist/communicator.h"
#include "kernels/ops.h"
#include "kv/paged_kv_cache.h"

namespace deepinfer {

enum class CpSplit { kBalanced, kContiguous };

// One forward's assignment of rows to the C ranks, and the K/V exchange of each layer.
class ContextParallel {
 public:
  ContextParallel(dist::Communicator* comm, CpSplit split) : comm_(comm), split_(split) {}
  int ranks() const { return comm_->size(); }
  int rank() const { return comm_->rank(); }

  // Assigns the rows of a batch whose sequences have seq_rows[s] consecutive rows each (batch order), as the
  // header comment says.
  void Plan(const std::vector<int>& seq_rows);
  const std::vector<int32_t>& mine() const { return mine_; }  // global rows this rank computes, increasing
  int total() const { return static_cast<int>(owner_.size()); }
  int owner(int row) const { return owner_[row]; }
  int local(int row) const { return local_[row]; }  // index of a global row in mine(), -1 if another rank's

  // Writes the whole batch's K/V rows of layer l: this rank's n = mine().size() rows (k: n x kv.k_row_elems(),
  // v: n x kv.v_row_elems() or null) are all-gathered over the C ranks and every row is stored at its slot
  // (slots: the KV slot of each global row). Collective: every rank of the group calls it once per layer.
  // A failed exchange is returned (the ranks are then out of step: the caller ends the job).
  Status WriteKv(PagedKvCache& kv, int l, const float* k, const float* v, const int32_t* slots);
  // out (rows.size() x width) = the rows `rows` (global indices) of the batch, each sent by its owner from x
  // (this rank's rows, mine().size() x width). Collective.
  Status GatherRows(const std::vector<int32_t>& rows, const float* x, int width, float* out);

  // Attention work of this rank's rows since creation: query x key pairs (a row at position p attends p + 1
  // keys), summed over forwards (per layer it is the same).
  int64_t attention_work() const { return work_; }
  int64_t bytes_sent() const { return comm_->bytes_sent(); }
  void AddWork(int64_t pairs) { work_ += pairs; }

 private:
  dist::Communicator* comm_;
  CpSplit split_;
  std::vector<int32_t> mine_, owner_, local_;
  std::vector<std::vector<int32_t>> slots_of_rank_;
  std::vector<float> send_;
  std::vector<uint8_t> kv_send_, recv_;
  std::vector<size_t> sizes_;
  int64_t work_ = 0;
};

// This rank's attention view of a planned batch: for each maximal run of consecutive rows of one sequence it
// owns, one AttnSeq (q_row in local rows, start the run's first position). seqs: the batch's global view (q_row =
// the sequence's first global row, rows = its KV rows by position).
void LocalAttnSeqs(const ContextParallel& cp, const AttnSeq* seqs, int num_seqs, std::vector<AttnSeq>* out);

}  // namespace deepinfer
