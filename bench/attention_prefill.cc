// Prefill attention microbenchmark: one layer's PagedAttention over an N-token prompt fed in the engine's
// 512-token chunks (scheduler max_batched_tokens), with the Llama-3.2-1B shape by default (32 query heads, 8 K/V
// heads, head_dim 64) and a paged cache whose 16-position blocks are shuffled. Reports milliseconds per prompt
// token for the layer and the causal attention GFLOP/s (4 * head_dim * heads per (query, key) pair).
//   build/bench_attention_prefill [N=2048] [threads=2] [kv=bf16|f16|f32] [heads=32] [kv_heads=8] [head_dim=64] [decode]
// With "decode": one query row at position N-1 (batch-1 decode after N-1 cached tokens), ms per call.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/dispatch.h"
#include "tensor/dtype.h"

using namespace deepinfer;

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 2048, threads = argc > 2 ? std::atoi(argv[2]) : 2;
  const std::string kv = argc > 3 ? argv[3] : "bf16";
  const int nh = argc > 4 ? std::atoi(argv[4]) : 32, nkv = argc > 5 ? std::atoi(argv[5]) : 8,
            hd = argc > 6 ? std::atoi(argv[6]) : 64;
  const bool decode = argc > 7 && std::string(argv[7]) == "decode";
  const DType dt = kv == "f32" ? DType::kF32 : kv == "f16" ? DType::kF16 : DType::kBF16;
  if (n < 1 || threads < 1 || nh < 1 || nkv < 1 || nh % nkv || hd < 1 || (kv != "f32" && kv != "f16" && kv != "bf16")) {
    std::fprintf(stderr, "usage: %s [N] [threads] [bf16|f16|f32] [heads] [kv_heads] [head_dim]\n", argv[0]);
    return 2;
  }
  SetComputeThreads(threads);
  constexpr int kChunk = 512, kBlock = 16;
  const int64_t kvdim = static_cast<int64_t>(nkv) * hd, esize = dt == DType::kF32 ? 4 : 2;
  // Paged layout: position p lives in block perm[p / 16] (blocks shuffled), slot p % 16.
  const int nblocks = (n + kBlock - 1) / kBlock;
  std::vector<int> perm(nblocks);
  for (int i = 0; i < nblocks; ++i) perm[i] = i;
  std::mt19937 rng(1);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> rows(n);
  for (int p = 0; p < n; ++p) rows[p] = perm[p / kBlock] * kBlock + p % kBlock;
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<uint8_t> k(static_cast<size_t>(nblocks) * kBlock * kvdim * esize), v(k.size());
  for (uint8_t* buf : {k.data(), v.data()})
    for (int64_t i = 0; i < static_cast<int64_t>(nblocks) * kBlock * kvdim; ++i) {
      const float x = nd(rng);
      if (dt == DType::kF32) std::memcpy(buf + 4 * i, &x, 4);
      else {
        const uint16_t h = dt == DType::kBF16 ? F32ToBF16(x) : F32ToF16(x);
        std::memcpy(buf + 2 * i, &h, 2);
      }
    }
  std::vector<float> q(static_cast<size_t>(kChunk) * nh * hd), out(q.size());
  for (float& x : q) x = nd(rng);
  const AttnShape shape{nh, nkv, hd, hd, static_cast<int>(kvdim), static_cast<int>(kvdim)};
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  // Wall time and process CPU time (this VM is shared: CPU time is the steadier figure when others run).
  auto cpu_now = [] {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
  };
  double best = 1e30, best_cpu = 1e30;
  if (decode) {
    const AttnSeq seq{0, 1, n - 1, rows.data()};
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int it = 0; it < 200; ++it) PagedAttention(q.data(), &seq, 1, k.data(), v.data(), dt, shape, scale, out.data());
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 200);
    }
    std::printf("attention decode ctx=%d threads=%d kv=%s heads=%d/%d hd=%d isa=%s: %.1f us/token/layer\n", n, threads,
                kv.c_str(), nh, nkv, hd, Kernels().name, best * 1e6);
    return 0;
  }
  for (int rep = 0; rep < (n >= 4096 ? 1 : 3); ++rep) {  // one pass at long prompts (minutes on 2 cores)
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_now();
    for (int start = 0; start < n; start += kChunk) {
      const AttnSeq seq{0, std::min(kChunk, n - start), start, rows.data()};
      PagedAttention(q.data(), &seq, 1, k.data(), v.data(), dt, shape, scale, out.data());
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    best_cpu = std::min(best_cpu, cpu_now() - c0);
  }
  const double pairs = 0.5 * static_cast<double>(n) * (n + 1);
  std::printf("attention prefill N=%d threads=%d kv=%s heads=%d/%d hd=%d isa=%s: %.3f ms/token/layer (cpu %.3f), %.1f GFLOP/s (per cpu-second %.1f)\n",
              n, threads, kv.c_str(), nh, nkv, hd, Kernels().name, best * 1e3 / n, best_cpu * 1e3 / n,
              4.0 * hd * nh * pairs / best / 1e9, 4.0 * hd * nh * pairs / best_cpu / 1e9);
  return 0;
}
