#include "kernels/cpu/membw.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <vector>

#include "base/host_buffer.h"
#include "base/thread_pool.h"
#include "kernels/cpu/cpu_features.h"

namespace deepinfer {
namespace {

// Reads [p, p + n) with 128 bytes per step. ahead > 0: each line is also requested `ahead` bytes before it is read
// (software prefetch into L1, as the decode kernels do: StreamPrefetch, TileDpBF16), never past p + n.
__attribute__((target("avx2"))) uint64_t SumAvx2(const uint8_t* p, size_t n, size_t ahead) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    if (ahead && i + ahead + 128 <= n) {
      _mm_prefetch(reinterpret_cast<const char*>(p + i + ahead), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p + i + ahead + 64), _MM_HINT_T0);
    }
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

// ---- Peak probes -------------------------------------------------------------------------------------------
// Each probe is a loop of K independent accumulator chains of one instruction in registers (no memory
// traffic), written in inline assembly so that the instruction, the chain count and the register allocation are
// exactly what is stated here whatever the compiler does. K must cover latency x throughput: 24 zmm chains
// cover a 12-cycle latency at two instructions per cycle (vdpbf16ps, vpdpbusd and vfmadd on current AVX-512
// cores have 4-6 cycles and at most 2 per cycle), 14 ymm chains a 7-cycle latency at 2 per cycle (all 16 ymm
// registers are used: 14 chains + 2 operands). The operands are zero, so no value can overflow, turn
// subnormal or become NaN however long the loop runs (x86 FP and integer units have no data-dependent timing
// for zeros).
#define DI_CHAIN(op, r, a, b) op " %%" a ", %%" b ", %%" r "\n\t"
#define DI_ZMM24(op)                                                                                             \
  DI_CHAIN(op, "zmm0", "zmm30", "zmm31") DI_CHAIN(op, "zmm1", "zmm30", "zmm31") DI_CHAIN(op, "zmm2", "zmm30", "zmm31") \
  DI_CHAIN(op, "zmm3", "zmm30", "zmm31") DI_CHAIN(op, "zmm4", "zmm30", "zmm31") DI_CHAIN(op, "zmm5", "zmm30", "zmm31") \
  DI_CHAIN(op, "zmm6", "zmm30", "zmm31") DI_CHAIN(op, "zmm7", "zmm30", "zmm31") DI_CHAIN(op, "zmm8", "zmm30", "zmm31") \
  DI_CHAIN(op, "zmm9", "zmm30", "zmm31") DI_CHAIN(op, "zmm10", "zmm30", "zmm31") DI_CHAIN(op, "zmm11", "zmm30", "zmm31") \
  DI_CHAIN(op, "zmm12", "zmm30", "zmm31") DI_CHAIN(op, "zmm13", "zmm30", "zmm31") DI_CHAIN(op, "zmm14", "zmm30", "zmm31") \
  DI_CHAIN(op, "zmm15", "zmm30", "zmm31") DI_CHAIN(op, "zmm16", "zmm30", "zmm31") DI_CHAIN(op, "zmm17", "zmm30", "zmm31") \
  DI_CHAIN(op, "zmm18", "zmm30", "zmm31") DI_CHAIN(op, "zmm19", "zmm30", "zmm31") DI_CHAIN(op, "zmm20", "zmm30", "zmm31") \
  DI_CHAIN(op, "zmm21", "zmm30", "zmm31") DI_CHAIN(op, "zmm22", "zmm30", "zmm31") DI_CHAIN(op, "zmm23", "zmm30", "zmm31")
#define DI_YMM14(op)                                                                                             \
  DI_CHAIN(op, "ymm0", "ymm14", "ymm15") DI_CHAIN(op, "ymm1", "ymm14", "ymm15") DI_CHAIN(op, "ymm2", "ymm14", "ymm15") \
  DI_CHAIN(op, "ymm3", "ymm14", "ymm15") DI_CHAIN(op, "ymm4", "ymm14", "ymm15") DI_CHAIN(op, "ymm5", "ymm14", "ymm15") \
  DI_CHAIN(op, "ymm6", "ymm14", "ymm15") DI_CHAIN(op, "ymm7", "ymm14", "ymm15") DI_CHAIN(op, "ymm8", "ymm14", "ymm15") \
  DI_CHAIN(op, "ymm9", "ymm14", "ymm15") DI_CHAIN(op, "ymm10", "ymm14", "ymm15") DI_CHAIN(op, "ymm11", "ymm14", "ymm15") \
  DI_CHAIN(op, "ymm12", "ymm14", "ymm15") DI_CHAIN(op, "ymm13", "ymm14", "ymm15")
#define DI_ZERO_ZMM                                                                                              \
  "vpxord %%zmm0, %%zmm0, %%zmm0\n\t" "vmovdqa64 %%zmm0, %%zmm1\n\t" "vmovdqa64 %%zmm0, %%zmm2\n\t"                    \
  "vmovdqa64 %%zmm0, %%zmm3\n\t" "vmovdqa64 %%zmm0, %%zmm4\n\t" "vmovdqa64 %%zmm0, %%zmm5\n\t"                        \
  "vmovdqa64 %%zmm0, %%zmm6\n\t" "vmovdqa64 %%zmm0, %%zmm7\n\t" "vmovdqa64 %%zmm0, %%zmm8\n\t"                        \
  "vmovdqa64 %%zmm0, %%zmm9\n\t" "vmovdqa64 %%zmm0, %%zmm10\n\t" "vmovdqa64 %%zmm0, %%zmm11\n\t"                      \
  "vmovdqa64 %%zmm0, %%zmm12\n\t" "vmovdqa64 %%zmm0, %%zmm13\n\t" "vmovdqa64 %%zmm0, %%zmm14\n\t"                    \
  "vmovdqa64 %%zmm0, %%zmm15\n\t" "vmovdqa64 %%zmm0, %%zmm16\n\t" "vmovdqa64 %%zmm0, %%zmm17\n\t"                    \
  "vmovdqa64 %%zmm0, %%zmm18\n\t" "vmovdqa64 %%zmm0, %%zmm19\n\t" "vmovdqa64 %%zmm0, %%zmm20\n\t"                    \
  "vmovdqa64 %%zmm0, %%zmm21\n\t" "vmovdqa64 %%zmm0, %%zmm22\n\t" "vmovdqa64 %%zmm0, %%zmm23\n\t"                    \
  "vmovdqa64 %%zmm0, %%zmm30\n\t" "vmovdqa64 %%zmm0, %%zmm31\n\t"
#define DI_ZMM_CLOBBERS                                                                                          \
  "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",  \
      "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm30", "xmm31"

constexpr int kZmmChains = 24, kYmmChains = 14;

// iters iterations of kZmmChains vdpbf16ps (32 bf16 products + 32 adds = 64 FLOP each).
__attribute__((target("avx512f,avx512bf16"))) void Bf16Chains(int64_t iters) {
  asm volatile(DI_ZERO_ZMM ".p2align 5\n1:\n\t" DI_ZMM24("vdpbf16ps") "dec %0\n\tjnz 1b\n\tvzeroupper"
               : "+r"(iters) : : DI_ZMM_CLOBBERS);
}
// iters iterations of kZmmChains vpdpbusd (64 u8 x s8 products + their adds = 128 int8 OP each), the inner
// instruction of the quantized GEMMs on AVX512-VNNI.
__attribute__((target("avx512f,avx512vnni"))) void Int8Chains(int64_t iters) {
  asm volatile(DI_ZERO_ZMM ".p2align 5\n1:\n\t" DI_ZMM24("vpdpbusd") "dec %0\n\tjnz 1b\n\tvzeroupper"
               : "+r"(iters) : : DI_ZMM_CLOBBERS);
}
// iters iterations of kZmmChains zmm vfmadd231ps (16 FMAs = 32 FLOP each): the f32 tiles of the AVX-512 table.
__attribute__((target("avx512f"))) void Fma512Chains(int64_t iters) {
  asm volatile(DI_ZERO_ZMM ".p2align 5\n1:\n\t" DI_ZMM24("vfmadd231ps") "dec %0\n\tjnz 1b\n\tvzeroupper"
               : "+r"(iters) : : DI_ZMM_CLOBBERS);
}
// iters iterations of kYmmChains ymm vfmadd231ps (8 FMAs = 16 FLOP each): the f32 tiles of the AVX2 table.
__attribute__((target("avx2,fma"))) void Fma256Chains(int64_t iters) {
  asm volatile("vpxor %%ymm0, %%ymm0, %%ymm0\n\t"
               "vmovdqa %%ymm0, %%ymm1\n\tvmovdqa %%ymm0, %%ymm2\n\tvmovdqa %%ymm0, %%ymm3\n\tvmovdqa %%ymm0, %%ymm4\n\t"
               "vmovdqa %%ymm0, %%ymm5\n\tvmovdqa %%ymm0, %%ymm6\n\tvmovdqa %%ymm0, %%ymm7\n\tvmovdqa %%ymm0, %%ymm8\n\t"
               "vmovdqa %%ymm0, %%ymm9\n\tvmovdqa %%ymm0, %%ymm10\n\tvmovdqa %%ymm0, %%ymm11\n\tvmovdqa %%ymm0, %%ymm12\n\t"
               "vmovdqa %%ymm0, %%ymm13\n\tvmovdqa %%ymm0, %%ymm14\n\tvmovdqa %%ymm0, %%ymm15\n\t"
               ".p2align 5\n1:\n\t" DI_YMM14("vfmadd231ps") "dec %0\n\tjnz 1b\n\tvzeroupper"
               : "+r"(iters) : : "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
                 "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
}

// The clock of the calling thread while it runs the probed kind of instruction: iters iterations of 16
// dependent register adds (1 cycle each on every x86 core, and not removable at rename as an add of an immediate
// can be), each iteration also issuing 8 instructions of the probed kind on independent registers so the core
// stays in the frequency licence of that instruction mix. Returns the adds, i.e. the cycles.
#define DI_ADD16 \
  "add %%rcx, %%rax\n\tadd %%rcx, %%rax\n\tadd %%rcx, %%rax\n\tadd %%rcx, %%rax\n\tadd %%rcx, %%rax\n\tadd %%rcx, %%rax\n\t" \
  "add %%rcx, %%rax\n\tadd %%rcx, %%rax\n\tadd %%rcx, %%rax\n\tadd %%rcx, %%rax\n\tadd %%rcx, %%rax\n\tadd %%rcx, %%rax\n\t" \
  "add %%rcx, %%rax\n\tadd %%rcx, %%rax\n\tadd %%rcx, %%rax\n\tadd %%rcx, %%rax\n\t"
#define DI_ZMM8(op)                                                                                              \
  DI_CHAIN(op, "zmm0", "zmm30", "zmm31") DI_CHAIN(op, "zmm1", "zmm30", "zmm31") DI_CHAIN(op, "zmm2", "zmm30", "zmm31") \
  DI_CHAIN(op, "zmm3", "zmm30", "zmm31") DI_CHAIN(op, "zmm4", "zmm30", "zmm31") DI_CHAIN(op, "zmm5", "zmm30", "zmm31") \
  DI_CHAIN(op, "zmm6", "zmm30", "zmm31") DI_CHAIN(op, "zmm7", "zmm30", "zmm31")
#define DI_YMM8(op)                                                                                              \
  DI_CHAIN(op, "ymm0", "ymm14", "ymm15") DI_CHAIN(op, "ymm1", "ymm14", "ymm15") DI_CHAIN(op, "ymm2", "ymm14", "ymm15") \
  DI_CHAIN(op, "ymm3", "ymm14", "ymm15") DI_CHAIN(op, "ymm4", "ymm14", "ymm15") DI_CHAIN(op, "ymm5", "ymm14", "ymm15") \
  DI_CHAIN(op, "ymm6", "ymm14", "ymm15") DI_CHAIN(op, "ymm7", "ymm14", "ymm15")
#define DI_CLOCK_LOOP(vec) \
  "xor %%eax, %%eax\n\tmov $1, %%ecx\n\t.p2align 5\n1:\n\t" DI_ADD16 vec "dec %0\n\tjnz 1b\n\tvzeroupper"

__attribute__((target("avx512f,avx512bf16"))) void ClockBf16(int64_t iters) {
  asm volatile(DI_ZERO_ZMM DI_CLOCK_LOOP(DI_ZMM8("vdpbf16ps")) : "+r"(iters) : : "rax", "rcx", DI_ZMM_CLOBBERS);
}
__attribute__((target("avx512f,avx512vnni"))) void ClockInt8(int64_t iters) {
  asm volatile(DI_ZERO_ZMM DI_CLOCK_LOOP(DI_ZMM8("vpdpbusd")) : "+r"(iters) : : "rax", "rcx", DI_ZMM_CLOBBERS);
}
__attribute__((target("avx512f"))) void ClockFma512(int64_t iters) {
  asm volatile(DI_ZERO_ZMM DI_CLOCK_LOOP(DI_ZMM8("vfmadd231ps")) : "+r"(iters) : : "rax", "rcx", DI_ZMM_CLOBBERS);
}
__attribute__((target("avx2,fma"))) void ClockFma256(int64_t iters) {
  asm volatile("vpxor %%ymm0, %%ymm0, %%ymm0\n\tvmovdqa %%ymm0, %%ymm1\n\tvmovdqa %%ymm0, %%ymm2\n\t"
               "vmovdqa %%ymm0, %%ymm3\n\tvmovdqa %%ymm0, %%ymm4\n\tvmovdqa %%ymm0, %%ymm5\n\tvmovdqa %%ymm0, %%ymm6\n\t"
               "vmovdqa %%ymm0, %%ymm7\n\tvmovdqa %%ymm0, %%ymm14\n\tvmovdqa %%ymm0, %%ymm15\n\t" DI_CLOCK_LOOP(DI_YMM8("vfmadd231ps"))
               : "+r"(iters) : : "rax", "rcx", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm14", "xmm15");
}

// The calling thread's CPU time: what it actually ran, so time taken from it by other processes or tenants
// (descheduling) does not count against the probe.
double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct ProbeKind {
  void (*chains)(int64_t);
  void (*clock)(int64_t);
  int instr_per_iter;   // chains
  double ops_per_instr;  // FLOP (int8 OP) per instruction
};

ProbeKind KindOf(PeakOp op, bool zmm_fma) {
  switch (op) {
    case PeakOp::kBf16Dot: return {Bf16Chains, ClockBf16, kZmmChains, 64};
    case PeakOp::kInt8Dot: return {Int8Chains, ClockInt8, kZmmChains, 128};
    default: return zmm_fma ? ProbeKind{Fma512Chains, ClockFma512, kZmmChains, 32} : ProbeKind{Fma256Chains, ClockFma256, kYmmChains, 16};
  }
}

}  // namespace

PeakInfo MeasurePeak(PeakOp op) {
  PeakInfo info;
  const auto& cpu = DetectCpu();
  const bool ok = op == PeakOp::kBf16Dot ? cpu.avx512_bf16 : op == PeakOp::kInt8Dot ? cpu.avx512_vnni : cpu.avx2_fma;
  if (!ok) return info;
  // The f32 FMA peak of the kernels that run: zmm when the active table is AVX-512's.
  const bool zmm_fma = op == PeakOp::kF32Fma && ActiveIsa() == Isa::kAvx512;
  const ProbeKind k = KindOf(op, zmm_fma);
  ThreadPool& pool = ComputePool();
  const int nt = pool.size();
  info.threads = nt;
  info.chains = k.instr_per_iter;
  info.vector_bits = op == PeakOp::kF32Fma && !zmm_fma ? 256 : 512;
  info.ops_per_instr = k.ops_per_instr;

  // Size the runs: ~25 ms of the probe per repetition on one thread (from a 1 ms calibration on the caller).
  int64_t iters = 20000;
  for (;;) {
    const double t0 = ThreadCpuSeconds();
    k.chains(iters);
    const double s = ThreadCpuSeconds() - t0;
    if (s > 1e-3) {
      iters = std::max<int64_t>(iters, static_cast<int64_t>(iters * 0.025 / s));
      break;
    }
    iters *= 4;
  }
  // Warm-up: ~150 ms of the instruction on every thread, so clocks and any AVX-512 frequency licence have
  // settled before anything is timed.
  pool.Run([&](int, int) { k.chains(iters * 6); });

  // Repetitions, all threads at once as the kernels run. Each thread measures its rate against its own CPU
  // time, and its clock right after with the same instruction mix; the best rate and the best clock of the
  // repetitions are kept per thread.
  std::vector<double> best_rate(nt, 0), ghz(nt, 0);
  double best_wall = 0;
  constexpr int kReps = 9;
  const int64_t clock_iters = std::max<int64_t>(1000, iters * k.instr_per_iter / 2 / 16 / 4);  // ~1/4 of a rep
  using Clock = std::chrono::steady_clock;
  std::vector<Clock::time_point> w0(nt), w1(nt);
  for (int r = 0; r < kReps; ++r) {
    pool.Run([&](int tid, int) {
      w0[tid] = Clock::now();
      const double t0 = ThreadCpuSeconds();
      k.chains(iters);
      const double t1 = ThreadCpuSeconds();
      w1[tid] = Clock::now();
      k.clock(clock_iters);
      const double t2 = ThreadCpuSeconds();
      const double rate = static_cast<double>(iters) * k.instr_per_iter / (t1 - t0);  // instructions / s
      const double hz = static_cast<double>(clock_iters) * 16 / (t2 - t1);            // cycles / s
      best_rate[tid] = std::max(best_rate[tid], rate);
      ghz[tid] = std::max(ghz[tid], hz / 1e9);
    });
    // The plain figure: all threads' instructions over the wall time from the first thread's start to the last
    // one's end (what a kernel's GFLOP/s is measured with; other processes' load lowers it).
    const double wall = std::chrono::duration<double>(*std::max_element(w1.begin(), w1.end()) -
                                                      *std::min_element(w0.begin(), w0.end())).count();
    best_wall = std::max(best_wall, static_cast<double>(iters) * k.instr_per_iter * nt / wall);
  }
  double sum_rate = 0, sum_ghz = 0, ipc = 0;
  for (int t = 0; t < nt; ++t) {
    sum_rate += best_rate[t];
    sum_ghz += ghz[t];
    // Both maxima can only be lowered by interference (time stolen from the vCPU counts as CPU time, a core
    // shared with another tenant issues fewer of the instruction), so their ratio is the core's own rate.
    ipc = std::max(ipc, best_rate[t] / (ghz[t] * 1e9));
  }
  info.measured_gops = sum_rate * k.ops_per_instr / 1e9;
  info.wall_gops = best_wall * k.ops_per_instr / 1e9;
  info.instr_per_cycle = ipc;
  info.ghz = sum_ghz / nt;
  // The limit: the best throughput per cycle any thread reached x each thread's clock x work per instruction.
  // Throughput per cycle is a property of the core (how many of these it issues per cycle), so a repetition in
  // which another tenant shared a thread's core cannot lower it below what the core does; the clocks are
  // measured each time and the best kept. Never below the directly measured sum of rates.
  info.gops = std::max(info.measured_gops, ipc * sum_ghz * k.ops_per_instr);
  return info;
}

double MeasurePeakGflops(PeakOp op) { return MeasurePeak(op).gops; }

const char* PeakOpName(PeakOp op) {
  switch (op) {
    case PeakOp::kBf16Dot: return "vdpbf16ps";
    case PeakOp::kInt8Dot: return "int8 vpdpbusd";
    default: return "f32 FMA";
  }
}

std::string DescribePeak(const PeakInfo& p) {
  char b[256];
  std::snprintf(b, sizeof b, "%d threads x %.2f instr/cycle x %.2f GHz x %.0f %s/instr (%d-bit, %d chains; rates by thread CPU time %.1f, by wall time %.1f)",
                p.threads, p.instr_per_cycle, p.ghz, p.ops_per_instr, p.ops_per_instr == 128 ? "OP" : "FLOP", p.vector_bits,
                p.chains, p.measured_gops, p.wall_gops);
  return b;
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
  // The limit a decode can reach is what a core streams when it asks for lines ahead in software, as the decode
  // kernels do (the hardware prefetchers alone left a plain read ~8% below bf16 decode's own rate, so `bench
  // decode` printed 101-116% "of roofline"): the best over no prefetch and several distances (a bf16 decode's
  // two rows ahead are 8 KiB at K = 2048).
  const size_t kAhead[] = {0, 1024, 2048, 4096, 8192, 16384};
  double best = 0;
  volatile uint64_t sink = 0;
  for (int r = 0; r < reps; ++r)
    for (size_t ahead : kAhead) {
      if (!avx2 && ahead) continue;
      auto t0 = std::chrono::steady_clock::now();
      pool.Run([&](int tid, int nt) {
        auto [b, e] = ThreadPool::Range(bytes, tid, nt, 4096);
        sink = sink ^ (avx2 ? SumAvx2(buf + b, e - b, ahead) : SumScalar(buf + b, e - b));
      });
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::max(best, bytes / s / 1e9);
    }
  return best;
}

}  // namespace deepinfer
