#include "kernels/cpu/gemm.h"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <atomic>
#include <cstring>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu/dispatch.h"

namespace deepinfer {
namespace {

// Activations are converted to the weight's "dot type" before the product, as llama.cpp (and HF in 16-bit
// precision) do: bf16/f16 weights see x rounded to bf16/f16, quantized weights see x quantized to q8_0 blocks.
// The rounding is the same on every ISA, so results differ across ISAs only in summation order.
struct PreparedX {
  const float* x;        // x, or x rounded through the 16-bit type
  const void* xq;        // bf16 (the table's bf16_dot) or q8_0 blocks; null otherwise
  std::vector<float> rounded;
  std::vector<uint16_t> half;
  std::vector<BlockQ8_0> q8;
  std::vector<BlockQ8_1> q8_1;
  std::vector<BlockQ8_K> q8_k;
};

// fn(begin, end) over [0, count) units: split over `pool` when it is given and each thread gets at least
// min_units (the conversions below are per element or per block, so any split gives the same bytes).
template <class F>
void ForUnits(ThreadPool* pool, size_t count, size_t min_units, const F& fn) {
  if (!pool || pool->size() < 2 || count < 2 * min_units) {
    fn(size_t{0}, count);
    return;
  }
  pool->Run([&](int tid, int nt) {
    auto [b, e] = ThreadPool::Range(count, tid, nt);
    if (b < e) fn(b, e);
  });
}

// F16C (CPUID.1:ECX bit 29) on a CPU whose OS saves AVX state (clang's __builtin_cpu_supports has no "f16c").
bool CpuHasF16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
}

// x rounded to f16 and back. The F16C instructions only, no shared inline code (see isa_kernels.h).
__attribute__((target("avx2,f16c"))) void RoundThroughF16Avx2(const float* x, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
  for (; i < n; ++i) out[i] = F16ToF32(F32ToF16(x[i]));
}

// pool: convert x on the compute pool (the caller is not one of its workers), or null to convert here.
void Prepare(const KernelTable& kt, const TensorView& w, const float* x, int m, PreparedX* p, ThreadPool* pool = nullptr) {
  const size_t n = static_cast<size_t>(m) * w.cols();
  constexpr size_t kMinElems = 16384;  // per thread, below which a pool dispatch costs more than it saves
  p->x = x;
  p->xq = nullptr;
  switch (w.dtype) {
    case DType::kBF16: {
      p->half.resize(n);
      uint16_t* half = p->half.data();
      ForUnits(pool, n, kMinElems, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) half[i] = F32ToBF16(x[i]);
      });
      if (kt.bf16_dot) {
        p->xq = p->half.data();
      } else {
        p->rounded.resize(n);
        for (size_t i = 0; i < n; ++i) p->rounded[i] = BF16ToF32(p->half[i]);
        p->x = p->rounded.data();
      }
      break;
    }
    case DType::kF16: {
      p->rounded.resize(n);
      float* rounded = p->rounded.data();
      // On the pool, 8 at a time with F16C where the CPU has it: both
      // are IEEE round-to-nearest-even conversions, so the values are the scalar ones (this ran serially on the
      // caller, ~9% of a 32-row f16 decode step).
      static const bool f16c = CpuHasF16c();
      ForUnits(pool, n, kMinElems, [&](size_t b, size_t e) {
        if (f16c) RoundThroughF16Avx2(x + b, rounded + b, e - b);
        else
          for (size_t i = b; i < e; ++i) rounded[i] = F16ToF32(F32ToF16(x[i]));
      });
      p->x = rounded;
      break;
    }
    default:
      // Quantized weights: x in the type's ggml vec_dot_type. Rows are whole blocks (K % 32 == 0, K % 256 == 0
      // for q8_K), so each x row starts a block.
      switch (ActivationDotType(w.dtype)) {
        case DType::kQ8_0:
          p->q8.resize(n / 32);
          ForUnits(pool, n / 32, kMinElems / 32,
                   [&](size_t b, size_t e) { kt.quantize_q8_0(x + b * 32, p->q8.data() + b, (e - b) * 32); });
          p->xq = p->q8.data();
          break;
        case DType::kQ8_1:
          p->q8_1.resize(n / 32);
          ForUnits(pool, n / 32, kMinElems / 32,
                   [&](size_t b, size_t e) { QuantizeActivationsQ8_1(x + b * 32, p->q8_1.data() + b, (e - b) * 32); });
          p->xq = p->q8_1.data();
          break;
        case DType::kQ8_K:
          p->q8_k.resize(n / kQK_K);
          ForUnits(pool, n / kQK_K, kMinElems / kQK_K, [&](size_t b, size_t e) {
            kt.quantize_q8_k(x + b * kQK_K, p->q8_k.data() + b, (e - b) * kQK_K);
          });
          p->xq = p->q8_k.data();
          break;
        default:
          break;
      }
      break;
  }
}

// FP8 with block scales: dequantize 16 weight rows at a time (fp8 x scale, in f32) into a thread-local buffer and
// run the f32 tile kernel on them: the weights are read once at 1 byte per element and never exist as a full
// f32/bf16 copy, and each output is the same dot product the f32 kernel computes on those f32 values.
void Fp8Slice(const KernelTable& kt, const TensorView& t, const PreparedX& p, int m, float* y, int ldy, int64_t n0,
              int64_t n1) {
  constexpr int64_t kRows = 16;
  const int64_t k = t.cols();
  thread_local std::vector<float> buf;
  buf.resize(static_cast<size_t>(kRows * k));
  const uint8_t* base = static_cast<const uint8_t*>(t.data);
  for (int64_t r0 = n0; r0 < n1; r0 += kRows) {
    const int64_t rows = std::min(kRows, n1 - r0);
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* src = base + (r0 + r) * k;
      const float* sc = t.block_scale + ((t.scale_row0 + r0 + r) / TensorView::kFp8Block) * t.scale_cols;
      float* dst = buf.data() + r * k;
      for (int64_t c = 0; c < k; ++c) dst[c] = Fp8E4M3ToF32(src[c]) * sc[c / TensorView::kFp8Block];
    }
    const GemmWeights w{DType::kF32, reinterpret_cast<const uint8_t*>(buf.data()), static_cast<size_t>(k) * 4, rows, k};
    kt.gemm_slice(w, p.x, nullptr, m, y + r0, ldy, 0, rows);
  }
}

// The most x rows a regrouped type's layout kernel takes (larger batches: the table's gemm_slice on the layout).
// The k-quant layout kernels take up to 4 x rows per pass over a group (each weight load unpacked once for them,
// the group read from memory once). Past 12 (q4_K) / 8 (q6_K) x rows the panels, built from each group in
// registers with the next group prefetched while the tiles run, take less time: streamed, two threads, 8192 x 2048
// q4_K and 2048 x 8192 q6_K (bench_gemv ... x16), even at 12 / 8 rows, 7-13% less at 14 / 10, 14-25% less at 20.
// q8_0 and MXFP4: the groups are the panels, for every m.
int MaxLayoutRows(DType t) {
  return t == DType::kQ4_K_X16 ? 12 : t == DType::kQ6_K_X16 ? 8 : 1 << 30;
}

// Regrouped weights: whole groups on the table's kernel for the layout (KernelTable::LayoutKernel); anything else
// (a table without the kernel, a range that cuts a group) as plain rows: each group is put back in row order in a
// thread-local buffer, up to 4 groups at a time, and run as the plain type. Rows past the last whole group are plain rows as
// stored. Every row is the same dot product either way (the layout kernels are bitwise the plain ones).
void RegroupedSlice(const KernelTable& kt, const TensorView& t, const PreparedX& p, int m, float* y, int ldy,
                    int64_t n0, int64_t n1) {
  constexpr int64_t kG = kQ4KX16Rows;
  const RegroupedLayout& layout = *RegroupedLayoutOf(t.dtype);
  const GemmSliceFn layout_kernel = kt.LayoutKernel(t.dtype);
  const int64_t rows = t.rows(), k = t.cols(), grouped = rows / kG * kG;
  const GemmWeights w{t.dtype, static_cast<const uint8_t*>(t.data), t.row_bytes(), rows, k};
  if (layout_kernel) {
    const int64_t a0 = (n0 + kG - 1) / kG * kG, a1 = std::min(n1, grouped) / kG * kG;
    if (a0 < a1) {
      if (n0 < a0) RegroupedSlice(kt, t, p, m, y, ldy, n0, a0);
      if (m <= MaxLayoutRows(t.dtype)) layout_kernel(w, p.x, p.xq, m, y, ldy, a0, a1);
      else kt.gemm_slice(w, p.x, p.xq, m, y, ldy, a0, a1);
      if (a1 < n1) RegroupedSlice(kt, t, p, m, y, ldy, a1, n1);
      return;
    }
  }
  const GemmWeights plain{layout.plain, w.data, w.row_bytes, rows, k};
  if (n0 >= grouped) return kt.gemm_slice(plain, p.x, p.xq, m, y, ldy, n0, n1);
  thread_local std::vector<uint8_t> buf;
  constexpr int64_t kChunk = 4 * kG;
  buf.resize(static_cast<size_t>(kChunk) * w.row_bytes);
  for (int64_t g0 = n0 / kG * kG; g0 < std::min(n1, grouped); g0 += kChunk) {
    const int64_t g1 = std::min(g0 + kChunk, grouped);
    for (int64_t g = g0; g < g1; g += kG) {
      uint8_t* out = buf.data() + (g - g0) * w.row_bytes;
      if (kt.unpack_x16) kt.unpack_x16(t.dtype, w.row(g), k, out);
      else layout.unpack(w.row(g), k, out);
    }
    const GemmWeights chunk{plain.dtype, buf.data(), w.row_bytes, g1 - g0, k};
    kt.gemm_slice(chunk, p.x, p.xq, m, y + g0, ldy, std::max(n0, g0) - g0, std::min(n1, g1) - g0);
  }
  if (n1 > grouped) kt.gemm_slice(plain, p.x, p.xq, m, y, ldy, grouped, n1);
}

// The table is passed in, read once by the calling thread: the workers never look the active ISA up.
void Slice(const KernelTable& kt, const TensorView& t, const PreparedX& p, int m, float* y, int ldy, int64_t n0,
           int64_t n1) {
  if (t.dtype == DType::kF8E4M3) return Fp8Slice(kt, t, p, m, y, ldy, n0, n1);
  if (IsRegrouped(t.dtype)) return RegroupedSlice(kt, t, p, m, y, ldy, n0, n1);
  const GemmWeights w{t.dtype, static_cast<const uint8_t*>(t.data), t.row_bytes(), t.rows(), t.cols()};
  kt.gemm_slice(w, p.x, p.xq, m, y, ldy, n0, n1);
}

// Products are split by weight rows, but cores do not run at the same speed: on the 2-vCPU development VM one
// core computes a q4_K row 40% slower than the other from cache, and the worker wakes later than the caller
// starts. With one fixed range per thread, a thread waited for the other at nearly every product (~10% of a
// Q4_K_M decode token sat in the pool's waits, perf; prefill lost 10-20%). Each thread still owns the static range
// (ThreadPool::Range in 16-row groups) and reads it front to back, in claims of half of what is left (one
// sequential stream: handing out small chunks from one shared counter interleaved the threads' reads and cost
// 20-40% of decode speed); a thread done with its own ranges takes pieces from the back of the others'. Pieces
// hold about kStealBytes of weights, more for batches (every call re-reads its x block, and panels are
// transposed per call). Whichever thread takes a row computes it with the same kernel on the same x, and claims
// are whole 16-row groups (the decode tiles' and panels' grouping), so every output is what a static split gives.
constexpr int64_t kStealBytes = 64 << 10;
int64_t StealPieceBytes(int m) { return kStealBytes * std::min(8, std::max(1, m / 16)); }

// One thread's range of a job (see kStealBytes), in groups of 16 rows: [front, back) packed in one word (front in
// the low half), claimed from the front by its owner and from the back by the others.
struct alignas(64) RangeClaim {
  std::atomic<uint64_t> word{0};
  void Set(uint32_t front, uint32_t back) { word.store(front | static_cast<uint64_t>(back) << 32, std::memory_order_relaxed); }
  // The owner claims half of what is left (at least `least`) from the front, another thread `least` from the back;
  // false when empty.
  bool Claim(bool owner, uint32_t least, uint32_t* g0, uint32_t* g1) {
    uint64_t v = word.load(std::memory_order_relaxed);
    for (;;) {
      const uint32_t front = static_cast<uint32_t>(v), back = static_cast<uint32_t>(v >> 32);
      if (front >= back) return false;
      const uint32_t left = back - front;
      const uint32_t take = std::min(left, owner ? std::max(least, left / 2) : least);
      const uint64_t next = owner ? v + take : v - (static_cast<uint64_t>(take) << 32);
      if (word.compare_exchange_weak(v, next, std::memory_order_relaxed)) {
        *g0 = owner ? front : back - take;
        *g1 = *g0 + take;
        return true;
      }
    }
  }
};

}  // namespace

void MatMulSlice(const TensorView& w, const float* x, int m, float* y, int ldy, int64_t n0, int64_t n1) {
  const KernelTable& kt = Kernels();
  PreparedX p;
  Prepare(kt, w, x, m, &p);
  Slice(kt, w, p, m, y, ldy, n0, n1);
}

void MatMul(const TensorView& w, const float* x, int m, float* y, const float* bias) {
  MatMulJob job{&w, x, m, y};
  MatMulMany(&job, 1);
  if (bias) {
    const int64_t n = w.rows();
    for (int i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) y[i * n + j] += bias[j];
  }
}

void MatMulMany(const MatMulJob* jobs, int count) {
  if (count <= 0) return;
  const KernelTable& kt = Kernels();
  ThreadPool& pool = ComputePool();
  thread_local std::vector<PreparedX> prepared;  // buffers reused across calls
  if (prepared.size() < static_cast<size_t>(count)) prepared.resize(static_cast<size_t>(count));
  for (int j = 0; j < count; ++j) Prepare(kt, *jobs[j].w, jobs[j].x, jobs[j].m, &prepared[j], &pool);
  // A lambda does not capture thread_locals: the workers get the caller's instance through p.
  const PreparedX* p = prepared.data();
  auto slice = [&, p](int j, int64_t n0, int64_t n1) {
    Slice(kt, *jobs[j].w, p[j], jobs[j].m, jobs[j].y, static_cast<int>(jobs[j].w->rows()), n0, n1);
  };
  // Small products (DeepSeek-V4's per-row attention over a few dozen keys, routers) run on the caller: waking the
  // pool costs more than they do. Which thread computes a row never changes its value.
  constexpr int64_t kSerialWork = int64_t{1} << 17;  // multiply-adds
  int64_t work = 0;
  for (int j = 0; j < count; ++j) work += int64_t{jobs[j].m} * jobs[j].w->rows() * jobs[j].w->cols();
  if (pool.size() == 1 || work < kSerialWork) {
    for (int j = 0; j < count; ++j) slice(j, 0, jobs[j].w->rows());
    return;
  }
  // Rows shared between the threads as they go (see RangeClaim).
  const int nt = pool.size();
  thread_local std::vector<RangeClaim> claims;  // [job][thread]
  if (claims.size() < static_cast<size_t>(count * nt)) claims = std::vector<RangeClaim>(static_cast<size_t>(count * nt));
  RangeClaim* rc = claims.data();
  for (int j = 0; j < count; ++j)
    for (int t = 0; t < nt; ++t) {  // the static split's ranges (Range with align 16), in groups
      auto [g0, g1] = ThreadPool::Range(static_cast<size_t>((jobs[j].w->rows() + 15) / 16), t, nt);
      rc[j * nt + t].Set(static_cast<uint32_t>(g0), static_cast<uint32_t>(g1));
    }
  pool.Run([&, rc](int tid, int) {
    auto run = [&](int j, uint32_t g0, uint32_t g1) {
      slice(j, int64_t{g0} * 16, std::min<int64_t>(jobs[j].w->rows(), int64_t{g1} * 16));
    };
    auto least = [&](int j) {
      const int64_t group_bytes = 16 * static_cast<int64_t>(jobs[j].w->row_bytes());
      return static_cast<uint32_t>(std::max<int64_t>(1, StealPieceBytes(jobs[j].m) / group_bytes));
    };
    uint32_t g0, g1;
    for (int j = 0; j < count; ++j)
      while (rc[j * nt + tid].Claim(true, least(j), &g0, &g1)) run(j, g0, g1);
    for (int v = 1; v < nt; ++v) {
      const int t = (tid + v) % nt;
      for (int j = count - 1; j >= 0; --j)
        while (rc[j * nt + t].Claim(false, least(j), &g0, &g1)) run(j, g0, g1);
    }
  });
}

void MatMulHeads(const HeadsMatMul& s) {
  const size_t in_w = static_cast<size_t>(s.in_width);
  ComputePool().Run([&](int tid, int nt) {
    auto [h0, h1] = ThreadPool::Range(static_cast<size_t>(s.heads), tid, nt);
    if (h0 >= h1) return;
    // The kernel reads x rows K floats apart, so each head's input is gathered; its output rows may be any
    // distance apart (ldy), so they are written in place.
    std::vector<float> in(static_cast<size_t>(s.rows) * in_w);
    for (size_t h = h0; h < h1; ++h) {
      for (int t = 0; t < s.rows; ++t)
        std::memcpy(in.data() + t * in_w, s.x + t * s.x_stride + static_cast<int64_t>(h) * s.x_head_offset,
                    sizeof(float) * in_w);
      MatMulSlice(s.head_weight(static_cast<int>(h)), in.data(), s.rows, s.y + static_cast<int64_t>(h) * s.y_head_offset,
                  static_cast<int>(s.y_stride), 0, s.out_width);
    }
  });
}

}  // namespace deepinfer
