// The model-identity digest that salts the KV tiers' keys (kv/kv_tiers.h) and is written into every stored
// file: K/V bytes are only reusable by the very model, cache format and parallel shard that produced them.
#pragma once
#include <cstdint>

#include "kv/kv_layout.h"
#include "model/model.h"
#include "tensor/dtype.h"

namespace deepinfer {

// Bumped whenever what a block's bytes mean changes without the digest's inputs changing (the KV row format,
// RoPE application, the attention kernels' numerics).
constexpr uint32_t kKvLayoutVersion = 1;

// A 64-bit digest over: the configuration fields that shape K/V (dimensions, RoPE base, style and scaling, MLA
// ranks, windows), the tokenizer's vocabulary, every weight tensor's name-free index (dtype and shape, in layer
// order) and a sample of its bytes (its first, middle and last 256: two checkpoints of one architecture differ
// there, and reading a few pages per tensor keeps start-up fast), the KV layout and dtype, the block size, the
// kernels' ISA (the bf16 paths are ISA-specific), the layout version, and the rank's shard (tp rank of tp, and
// `rank`: the rank within its attention group, 0 for one process and for --dp groups of one rank, whose K/V is
// bitwise one process's).
uint64_t ModelKvDigest(const Model& model, const KvLayout& layout, DType kv_dtype, int block_size, int rank);

}  // namespace deepinfer
