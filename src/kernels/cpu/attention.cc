#include "kernels/cpu/attention.h"

#include <algorithm>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu/dispatch.h"

namespace deepinfer {

void PagedAttention(const float* q, const AttnSeq* seqs, int num_seqs, const void* k_base, const void* v_base,
                    DType kv_type, const AttnShape& sh, float scale, float* out) {
  const int group = sh.n_heads / sh.n_kv;
  const int64_t q_stride = static_cast<int64_t>(sh.n_heads) * sh.hd_k, o_stride = static_cast<int64_t>(sh.n_heads) * sh.hd_v;
  const size_t esize = GetDTypeInfo(kv_type).block_bytes;
  const int64_t k_row_bytes = static_cast<int64_t>(sh.k_row_elems) * static_cast<int64_t>(esize);
  const int64_t v_row_bytes = static_cast<int64_t>(sh.v_row_elems) * static_cast<int64_t>(esize);
  // Tasks are (query row, K/V head, block of the heads sharing it) over all sequences. A task's heads read each
  // cached row once (see AttendHeads); blocks are made smaller only when there are fewer tasks than threads.
  // Each output element is computed by one task in one fixed order that does not depend on the blocking, so
  // results do not depend on the partition, the thread count or what else is in the batch.
  const int nt_pool = ComputePool().size();
  int64_t total_rows = 0;
  int max_len = 0;
  for (int s = 0; s < num_seqs; ++s) {
    total_rows += seqs[s].m;
    max_len = std::max(max_len, seqs[s].start + seqs[s].m);
  }
  int hb = std::min(group, kMaxAttendHeads);
  while (hb > 1 && total_rows * sh.n_kv * ((group + hb - 1) / hb) < nt_pool) hb = (hb + 1) / 2;
  const int blocks = (group + hb - 1) / hb, per_row = sh.n_kv * blocks;
  std::vector<int64_t> first_task(static_cast<size_t>(num_seqs) + 1, 0);
  for (int s = 0; s < num_seqs; ++s) first_task[s + 1] = first_task[s] + static_cast<int64_t>(seqs[s].m) * per_row;
  const AttendHeadsFn attend = Kernels().attend_heads;  // read once, here: the workers never look it up
  // A bf16 cache is dotted with q rounded to bf16, the dot-type rule MatMul applies to bf16 weights: the same
  // inputs on every ISA, and AVX512-BF16 multiplies the stored rows directly with vdpbf16ps.
  thread_local std::vector<float> q_bf16;
  if (kv_type == DType::kBF16) {
    int64_t q_rows = 0;
    for (int s = 0; s < num_seqs; ++s) q_rows = std::max(q_rows, seqs[s].q_row + seqs[s].m);
    q_bf16.resize(static_cast<size_t>(q_rows * q_stride));
    for (size_t i = 0; i < q_bf16.size(); ++i) q_bf16[i] = BF16ToF32(F32ToBF16(q[i]));
    q = q_bf16.data();
  }
  ComputePool().Run([&](int tid, int nt) {
    auto [t0, t1] = ThreadPool::Range(static_cast<size_t>(first_task[num_seqs]), tid, nt);
    if (t0 >= t1) return;
    std::vector<float> scores(static_cast<size_t>(max_len) * hb);
    int s = static_cast<int>(std::upper_bound(first_task.begin(), first_task.end(), static_cast<int64_t>(t0)) -
                             first_task.begin()) - 1;
    for (size_t t = t0; t < t1; ++t) {
      while (static_cast<int64_t>(t) >= first_task[s + 1]) ++s;
      const AttnSeq& sq = seqs[s];
      const int64_t local = static_cast<int64_t>(t) - first_task[s];
      const int i = static_cast<int>(local / per_row), kvh = static_cast<int>(local % per_row) / blocks;
      const int h = kvh * group + static_cast<int>(local % blocks) * hb, nh = std::min(hb, (kvh + 1) * group - h);
      const int64_t row = sq.q_row + i;
      attend(q + row * q_stride + static_cast<int64_t>(h) * sh.hd_k, nh,
             static_cast<const uint8_t*>(k_base) + static_cast<size_t>(kvh) * sh.hd_k * esize,
             static_cast<const uint8_t*>(v_base) + static_cast<size_t>(kvh) * sh.hd_v * esize, kv_type, sq.rows,
             sq.start + i + 1, k_row_bytes, v_row_bytes, sh.hd_k, sh.hd_v, scale, scores.data(),
             out + row * o_stride + static_cast<int64_t>(h) * sh.hd_v);
    }
  });
}

}  // namespace deepinfer
