#include "kernels/cpu/membw.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>

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

}  // namespace

double MeasureReadBandwidthGBs(size_t bytes, int reps) {
  bytes = bytes / 4096 * 4096;
  auto* buf = static_cast<uint8_t*>(std::aligned_alloc(4096, bytes));
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
  std::free(buf);
  return best;
}

}  // namespace deepinfer
