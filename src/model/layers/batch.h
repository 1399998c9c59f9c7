// The token layout of one forward call, which every layer of it shares: n token rows in batch order, each with
// its position and the physical KV row it writes, and the attention view per sequence (which cached rows it
// reads). Built once per call by the transformer (PlanBatch).
#pragma once
#include <cstdint>

#include "deepinfer/status.h"
#include "kernels/ops.h"

namespace deepinfer {

class ContextParallel;

struct BatchView {
  int n = 0;                        // token rows
  const int32_t* pos = nullptr;     // n positions
  const int32_t* kv_slots = nullptr;  // n physical KV rows (written)
  const AttnSeq* seqs = nullptr;    // per sequence: its rows of the batch and the KV rows it attends to
  int num_seqs = 0;
  // Context parallelism (context_parallel.h): n, pos and seqs are this rank's share of the rows; the layers write
  // the whole batch's K/V through cp (cp_slots: the KV slot of every row of the batch). nullptr: one rank.
  ContextParallel* cp = nullptr;
  const int32_t* cp_slots = nullptr;
  // Hybrid KV cache (kv/kv_layout.h): the same rows as seen by each KV group, whose block tables differ (kv_slots,
  // seqs' KV rows, cp_slots); a layer attends through groups[its group]. nullptr: one group, this view.
  const BatchView* groups = nullptr;
  int num_groups = 0;
  const BatchView& ForGroup(int g) const { return groups ? groups[g] : *this; }
};

// Stores the batch's new K/V rows of layer l (this rank's n rows in k/v; under context parallelism every rank's,
// gathered). Defined in context_parallel.cc.
class PagedKvCache;
Status WriteBatchKv(const BatchView& b, PagedKvCache& kv, int l, const float* k, const float* v);

}  // namespace deepinfer
