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
  // Tasks are (block of query rows of one sequence, K/V head, block of the heads sharing it). A task's slots
  // (rows x heads) share each converted K/V tile (see AttendRows); blocks are made smaller only when there are
  // fewer tasks than threads. Each output element is computed by
  // one task in one fixed order that does not depend on the blocking, so results do not depend on the
  // partition, the thread count or what else is in the batch.
  const int nt_pool = ComputePool().size();
  int max_m = 1;
  for (int s = 0; s < num_seqs; ++s) max_m = std::max(max_m, seqs[s].m);
  // The kernels keep no per-position scores (online softmax), so tasks take up to 128 slots whatever the context:
  // each K/V tile (its conversion or copy, its prefetch) then serves that many slots.
  const KernelTable& kernels = Kernels();  // read once, here: the workers never look it up
  const AttendRowsFn attend = kernels.attend_rows;
  int hb = std::min(group, kMaxAttendSlots);
  int rb = std::max(1, std::min<int>(max_m, kMaxAttendSlots / hb));
  auto num_tasks = [&](int r, int h) {
    int64_t n = 0;
    for (int s = 0; s < num_seqs; ++s) n += (seqs[s].m + r - 1) / r;
    return n * sh.n_kv * ((group + h - 1) / h);
  };
  while (rb > 1 && num_tasks(rb, hb) < nt_pool) rb = (rb + 1) / 2;
  while (hb > 1 && num_tasks(rb, hb) < nt_pool) hb = (hb + 1) / 2;
  const int blocks = (group + hb - 1) / hb, per_rb = sh.n_kv * blocks;
  // Tasks in order (sequence, K/V head, row block, head block): a thread's consecutive tasks stream the same K/V
  // head's rows (one head's K and V of an 8k context are ~2 MiB in bf16), not every head's in turn. cost[t] =
  // work up to task t (slots x positions), so each thread takes an equal share of the work: causal rows late in
  // a prompt see more positions; a windowed row reads about min(len, window) of them.
  std::vector<int64_t> first_task(static_cast<size_t>(num_seqs) + 1, 0);
  for (int s = 0; s < num_seqs; ++s)
    first_task[s + 1] = first_task[s] + static_cast<int64_t>((seqs[s].m + rb - 1) / rb) * per_rb;
  const int64_t n_tasks = first_task[num_seqs];
  std::vector<int64_t> cost_end(static_cast<size_t>(n_tasks));
  {
    int64_t acc = 0, t = 0;
    for (int s = 0; s < num_seqs; ++s)
      for (int kvh = 0; kvh < sh.n_kv; ++kvh)
        for (int r0 = 0; r0 < seqs[s].m; r0 += rb) {
          const int nr = std::min(rb, seqs[s].m - r0);
          const int len = seqs[s].start + r0 + nr;
          const int64_t w = static_cast<int64_t>(nr) * (sh.window > 0 ? std::min(len, sh.window) : len) + 64;
          for (int b = 0; b < blocks; ++b) {
            acc += w * std::min(hb, group - b * hb);
            cost_end[t++] = acc;
          }
        }
  }
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
    // Thread tid takes the tasks whose cumulative cost ends in (total * tid / nt, total * (tid + 1) / nt].
    const int64_t total = n_tasks ? cost_end.back() : 0;
    const int64_t c0 = total * tid / nt, c1 = total * (tid + 1) / nt;
    const int64_t t0 = std::upper_bound(cost_end.begin(), cost_end.end(), c0) - cost_end.begin();
    const int64_t t1 = tid + 1 == nt ? n_tasks : std::upper_bound(cost_end.begin(), cost_end.end(), c1) - cost_end.begin();
    if (t0 >= t1) return;
    std::vector<float> scratch(static_cast<size_t>(AttendOnlineScratchFloats(rb * hb, sh.hd_k, sh.hd_v)));
    int s = static_cast<int>(std::upper_bound(first_task.begin(), first_task.end(), t0) - first_task.begin()) - 1;
    for (int64_t t = t0; t < t1; ++t) {
      while (t >= first_task[s + 1]) ++s;
      const AttnSeq& sq = seqs[s];
      const int64_t local = t - first_task[s];
      const int64_t per_kvh = static_cast<int64_t>((sq.m + rb - 1) / rb) * blocks;
      const int kvh = static_cast<int>(local / per_kvh), r0 = static_cast<int>(local % per_kvh / blocks) * rb;
      const int h = kvh * group + static_cast<int>(local % blocks) * hb, nh = std::min(hb, (kvh + 1) * group - h);
      const int64_t row = sq.q_row + r0;
      AttendArgs args;
      args.q = q + row * q_stride + static_cast<int64_t>(h) * sh.hd_k;
      args.q_stride = q_stride;
      args.out = out + row * o_stride + static_cast<int64_t>(h) * sh.hd_v;
      args.o_stride = o_stride;
      args.nr = std::min(rb, sq.m - r0);
      args.nh = nh;
      args.k = static_cast<const uint8_t*>(k_base) + static_cast<size_t>(kvh) * sh.hd_k * esize;
      args.v = static_cast<const uint8_t*>(v_base) + static_cast<size_t>(kvh) * sh.hd_v * esize;
      args.kv_type = kv_type;
      args.rows = sq.rows;
      args.rows_first = sq.rows_first;
      args.len0 = sq.start + r0 + 1;
      args.k_row_bytes = k_row_bytes;
      args.v_row_bytes = v_row_bytes;
      args.hd_k = sh.hd_k;
      args.hd_v = sh.hd_v;
      args.scale = scale;
      args.window = sh.window;
      args.sinks = sh.sinks ? sh.sinks + h : nullptr;  // slot s: head h + s % nh
      args.scratch = scratch.data();
      attend(args);
    }
  });
}

}  // namespace deepinfer
