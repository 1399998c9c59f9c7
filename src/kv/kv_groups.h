// Builds a hybrid KV layout from each layer's attention window, and the bound on what one sequence holds in it.
#pragma once
#include <cstdint>
#include <vector>

#include "kv/kv_layout.h"

namespace deepinfer {

// Groups the layers of `base` by window (layer_window[l]: 0 = full attention). Every group has P planes, P = the
// smallest number of planes of any window kind, so blocks are one size; a kind of L_k planes gets ceil(L_k / P)
// groups, filled in layer order (the last one's spare planes are padding). Full-attention groups come first.
// A model with a single kind (no windows, or one window everywhere) gets today's single group, except that a
// single window kind keeps its window (its blocks still slide).
// A kind's sparse layers (base.layer_ratio / layer_elems) are packed into its planes, largest first, each into
// the first plane whose block region (block_size rows of k_elems) has room for its RowsPerBlock rows; the kind's
// other layers keep a plane each. So the packing depends on the block size.
KvLayout GroupKvLayout(const KvLayout& base, const std::vector<int>& layer_window, int block_size);

// Planes that hold no layer (padding), over all groups.
int PaddingPlanes(const KvLayout& layout);

// The most blocks one sequence of `tokens` positions holds at once: every block in a full group; in a window-W
// group the blocks from the one holding the read floor's window start to the allocation end, which runs at most
// `ahead` positions past the floor (a chunk, two with the overlap scheduler, plus speculative drafts).
int64_t MaxSeqBlocks(const KvLayout& layout, int block_size, int64_t tokens, int64_t ahead);

// Bounded replay's R (prompt tokens a prefix hit may recompute for the windowed groups): `requested` when >= 0,
// else four times the widest window; at most max_len; 0 without a full-attention group (nothing to replay onto).
int ReplayBound(const KvLayout& layout, int requested, int max_len);

// How far a sequence's block allocation may run past its read floor (MaxSeqBlocks' `ahead`): the prefill chunks in
// flight (`chunks_in_flight` x `chunk`) plus a speculative row's drafts (`spec_tokens` = k + 1; the floor of such
// a row may lag the device's start by a row). A bounded replay adds nothing: its windowed blocks are allocated
// chunk by chunk, its full-attention blocks are the prefix's own.
int64_t KvAhead(int chunks_in_flight, int64_t chunk, int64_t spec_tokens);

// The first block a window-W group must keep for a reader whose lowest query position is `floor`
// (position q reads [q - W + 1, q]).
inline int WindowKeepFrom(int window, int floor, int block_size) {
  const int lo = floor - window + 1;
  return lo > 0 ? lo / block_size : 0;
}

}  // namespace deepinfer
