// Causal attention over paged K/V: the driver that splits (block of query rows, K/V head, block of heads) tasks
// over the compute pool and calls the active ISA's AttendRows kernel (isa_kernels.h) on each.
#pragma once
#include <cstdint>

#include "tensor/dtype.h"

namespace deepinfer {

// One sequence's slice of a batched attention call: query rows [q_row, q_row + m) of q/out sit at absolute
// positions start .. start+m-1; position p's K/V live in row rows[p] of the layer's K/V storage.
struct AttnSeq {
  int64_t q_row;
  int m;
  int start;
  const int32_t* rows;  // start + m entries
};
// Head layout of an attention call. Query head h reads K/V head h / (n_heads / n_kv); its K is hd_k elements at
// kv_head * hd_k within a K row of k_row_elems, its V hd_v elements at kv_head * hd_v within a V row. Standard
// attention: hd_k = hd_v = head_dim, rows of n_kv * head_dim. MLA (absorbed): n_kv = 1, K row = [latent, rope
// key] (hd_k = kv_lora + rope), V = the latent inside the same row (hd_v = kv_lora, v_base = k_base).
struct AttnShape {
  int n_heads, n_kv, hd_k, hd_v;
  int k_row_elems, v_row_elems;
};
// Causal attention over paged K/V (kv_type f32, bf16 or f16) for several sequences at once; row i of a sequence
// sees positions [0, start + i]. q: rows of n_heads * hd_k; out: rows of n_heads * hd_v. Parallel over blocks of
// (rows, heads), statically partitioned by cost; every output is bitwise independent of the blocking and threads.
void PagedAttention(const float* q, const AttnSeq* seqs, int num_seqs, const void* k_base, const void* v_base,
                    DType kv_type, const AttnShape& shape, float scale, float* out);

}  // namespace deepinfer
