// Causal attention over paged K/V: the driver that splits (block of query rows, K/V head, block of heads) tasks
// over the compute pool and calls the active ISA's AttendRows kernel (isa_kernels.h) on each.
#pragma once
#include <cstdint>

#include "kernels/ops.h"
#include "tensor/dtype.h"

namespace deepinfer {

// Causal attention over paged K/V (kv_type f32, bf16 or f16) for several sequences at once; row i of a sequence
// sees positions [0, start + i]. q: rows of n_heads * hd_k; out: rows of n_heads * hd_v. Parallel over blocks of
// (rows, heads), statically partitioned by cost; every output is bitwise independent of the blocking and threads.
void PagedAttention(const float* q, const AttnSeq* seqs, int num_seqs, const void* k_base, const void* v_base,
                    DType kv_type, const AttnShape& shape, float scale, float* out);

}  // namespace deepinfer
