// The token layout of one forward call, which every layer of it shares: n token rows in batch order, each with
// its position and the physical KV row it writes, and the attention view per sequence (which cached rows it
// reads). Built once per call by the transformer (PlanBatch).
#pragma once
#include <cstdint>

#include "kernels/cpu/attention.h"

namespace deepinfer {

struct BatchView {
  int n = 0;                        // token rows
  const int32_t* pos = nullptr;     // n positions
  const int32_t* kv_slots = nullptr;  // n physical KV rows (written)
  const AttnSeq* seqs = nullptr;    // per sequence: its rows of the batch and the KV rows it attends to
  int num_seqs = 0;
};

}  // namespace deepinfer
