// One sequence's share of a batched forward (Transformer::ForwardBatch, ForwardPass::Plan).
#pragma once
#include <cstdint>

namespace deepinfer {

// Tokens at positions [start, start + n), K/V slots from its block table (which must cover position
// start + n - 1). want_logits: produce logits for its last token. A hybrid KV cache (kv/kv_layout.h) has one
// table per KV group, each num_blocks entries, one after the other from block_table (group 0 first); a
// sliding-window group's entries below the window of position `start` may be -1 (blocks already released).
struct SeqForward {
  const int32_t* tokens = nullptr;
  int n = 0;
  int start = 0;
  const int32_t* block_table = nullptr;
  int num_blocks = 0;
  bool want_logits = false;
  bool all_logits = false;  // logits for every token of the run (n rows), not only the last
  // Positions below this already hold their K/V in every full-attention (window 0) group: their rows read it and
  // do not write it (a bounded replay rebuilding a window; the blocks may be shared through the prefix cache).
  int kv_cached_end = 0;
  // Sliding-window groups read nothing below this position (an approximate replay's start, --swa-replay approx:
  // their blocks below it were never restored). 0: each row reads its whole window.
  int window_floor = 0;
};

}  // namespace deepinfer
