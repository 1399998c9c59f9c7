#include "kernels/cpu/membw.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "base/host_buffer.h"
#include "base/thread_pool.h"
#include "kernels/cpu/cpu_features.h"

namespace deepinfer {
namespace {

__attribute__((target("avx2"))) uint64_t SumAvx2(const uint8_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    a0 = _mm256_xor_si256(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_xor_si256(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_xor_si256(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_xor_si256(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  __m256i x = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
  return static_cast<uint64_t>(_mm256_extract_epi64(x, 0) ^ _mm256_extract_epi64(x, 3));
}

uint64_t SumScalar(const uint8_t* p, size_t n) {
  uint64_t a[4] = {};
  const auto* q = reinterpret_cast<const uint64_t*>(p);
  for (size_t i = 0; i + 4 <= n / 8; i += 4)
    for (int j = 0; j < 4; ++j) a[j] ^= q[i + j];
  return a[0] ^ a[1] ^ a[2] ^ a[3];
}

// 12 independent accumulator chains hide the instruction latency; each iteration is 12 instructions.
__attribute__((target("avx512f,avx512bf16"))) double DpBf16Flops(int64_t iters) {
  __m512 acc[12];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3c00);
  for (int64_t i = 0; i < iters; ++i)
    for (auto& c : acc) c = _mm512_dpbf16_ps(c, a, b);
  __m512 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, acc[j]);
  volatile float sink = _mm512_reduce_add_ps(s);
  (void)sink;
  return static_cast<double>(iters) * 12 * 64;  // 32 products + 32 adds per instruction
}

// The int8 dot products of the quantized GEMMs (vpdpbusd: 64 byte products and their adds per instruction).
__attribute__((target("avx512f,avx512vnni"))) double DpbusdOps(int64_t iters) {
  __m512i acc[12];
  for (auto& a : acc) a = _mm512_setzero_si512();
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-5);
  for (int64_t i = 0; i < iters; ++i)
    for (auto& c : acc) c = _mm512_dpbusd_epi32(c, a, b);
  __m512i s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_epi32(s, acc[j]);
  volatile int sink = _mm512_reduce_add_epi32(s);
  (void)sink;
  return static_cast<double>(iters) * 12 * 128;
}

__attribute__((target("avx2,fma"))) double FmaFlops(int64_t iters) {
  __m256 acc[12];
  for (auto& a : acc) a = _mm256_setzero_ps();
  const __m256 a = _mm256_set1_ps(1.0001f), b = _mm256_set1_ps(0.9999f);
  for (int64_t i = 0; i < iters; ++i)
    for (auto& c : acc) c = _mm256_fmadd_ps(c, a, b);
  __m256 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm256_add_ps(s, acc[j]);
  volatile float sink = _mm256_cvtss_f32(s);
  (void)sink;
  return static_cast<double>(iters) * 12 * 16;
}

// The f32 GEMM tiles of the AVX-512 table run on zmm FMAs: their peak, not the ymm one, is the limit there (on CPUs
// with two 512-bit FMA pipes the ymm rate is half of it).
__attribute__((target("avx512f"))) double FmaFlops512(int64_t iters) {
  __m512 acc[12];
  for (auto& a : acc) a = _mm512_setzero_ps();
  const __m512 a = _mm512_set1_ps(1.0001f), b = _mm512_set1_ps(0.9999f);
  for (int64_t i = 0; i < iters; ++i)
    for (auto& c : acc) c = _mm512_fmadd_ps(c, a, b);
  __m512 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, acc[j]);
  volatile float sink = _mm512_reduce_add_ps(s);
  (void)sink;
  return static_cast<double>(iters) * 12 * 32;
}

}  // namespace

double MeasurePeakGflops(PeakOp op) {
  const auto& cpu = DetectCpu();
  const bool ok = op == PeakOp::kBf16Dot ? cpu.avx512_bf16 : op == PeakOp::kInt8Dot ? cpu.avx512_vnni : cpu.avx2_fma;
  if (!ok) return 0;
  // The f32 FMA peak of the kernels that run: zmm when the active table is AVX-512's.
  const bool zmm_fma = op == PeakOp::kF32Fma && ActiveIsa() == Isa::kAvx512;
  ThreadPool& pool = ComputePool();
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    std::atomic<double> flops{0};
    auto t0 = std::chrono::steady_clock::now();
    pool.Run([&](int, int) {
      const double f = op == PeakOp::kBf16Dot ? DpBf16Flops(4000000)
                       : op == PeakOp::kInt8Dot ? DpbusdOps(4000000)
                       : zmm_fma                ? FmaFlops512(4000000)
                                                : FmaFlops(4000000);
      double cur = flops.load();
      while (!flops.compare_exchange_weak(cur, cur + f)) {
      }
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, flops.load() / s / 1e9);
  }
  return best;
}

const char* PeakOpName(PeakOp op) {
  switch (op) {
    case PeakOp::kBf16Dot: return "vdpbf16ps";
    case PeakOp::kInt8Dot: return "int8 vpdpbusd";
    default: return "f32 FMA";
  }
}

double MeasureReadBandwidthGBs(size_t bytes, int reps) {
  bytes = bytes / 4096 * 4096;
  // The same memory the weights live in (2 MiB transparent huge pages where allowed): with 4 KiB pages the
  // hardware prefetchers stop at every page and the probe reads well below what decode actually streams.
  auto host = HostBuffer::Allocate(bytes);
  if (!host.ok()) return 0;
  uint8_t* buf = (*host)->data();
  ThreadPool& pool = ComputePool();
  // First touch from the threads that will read (matters on NUMA machines).
  pool.Run([&](int tid, int nt) {
    auto [b, e] = ThreadPool::Range(bytes, tid, nt, 4096);
    std::memset(buf + b, tid + 1, e - b);
  });
  const bool avx2 = DetectCpu().avx2_fma;
  double best = 0;
  volatile uint64_t sink = 0;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    pool.Run([&](int tid, int nt) {
      auto [b, e] = ThreadPool::Range(bytes, tid, nt, 4096);
      sink = sink ^ (avx2 ? SumAvx2(buf + b, e - b) : SumScalar(buf + b, e - b));
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, bytes / s / 1e9);
  }
  return best;
}

}  // namespace deepinfer
