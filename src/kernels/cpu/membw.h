// Measures sustainable read bandwidth (bytes/s) with the compute pool: the decode roofline's denominator.
#pragma once
#include <cstddef>
#include <string>

namespace deepinfer {

// Reads a buffer of `bytes` (>> last-level cache) with all pool threads, `reps` times at each of several software
// prefetch distances (none included); returns the best GB/s.
double MeasureReadBandwidthGBs(size_t bytes = size_t{1} << 30, int reps = 3);

// The inner instruction of a GEMM family: f32 FMA (f32/f16 weights, bf16 without AVX512-BF16; zmm when the active
// kernel table is AVX-512's, ymm otherwise), vdpbf16ps (bf16 weights on AVX512-BF16), vpdpbusd (quantized weights
// on AVX512-VNNI).
enum class PeakOp { kF32Fma, kBf16Dot, kInt8Dot };
// The throughput limit of that instruction on all pool threads, which is how the kernels use them. Each thread
// runs independent accumulator chains in registers (no memory traffic; 24 zmm chains, or 14 ymm for the AVX2 f32
// FMA, enough for latency x throughput on any current core), after a warm-up that lets clocks and AVX-512
// frequency licences settle, 9 times; rates are taken against each thread's own CPU time, so descheduling by
// other processes does not lower them. Each thread also measures its clock (16 dependent register adds per
// iteration, 1 cycle each, interleaved with the same instruction). The limit is
//   max(sum of the threads' best measured rates, best instructions/cycle any thread reached x sum of the
//       threads' clocks) x work per instruction,
// so a repetition in which another tenant shared a core cannot pull it down. gops is 0 when the CPU lacks the
// instruction. See docs/benchmarks.md ("How the limits are measured").
struct PeakInfo {
  double gops = 0;             // the limit: GFLOP/s (int8: GOP/s)
  double measured_gops = 0;    // sum over threads of the best rate by thread CPU time
  double wall_gops = 0;        // all threads' work over wall time, best repetition (the old, load-sensitive figure)
  double instr_per_cycle = 0;  // best per thread
  double ghz = 0;              // mean of the threads' best clocks
  double ops_per_instr = 0;    // FLOP (int8 OP) per instruction
  int threads = 0, chains = 0, vector_bits = 0;
};
PeakInfo MeasurePeak(PeakOp op);
// MeasurePeak(op).gops: the prefill and batched-decode roofline.
double MeasurePeakGflops(PeakOp op);
// "2 threads x 2.00 instr/cycle x 3.70 GHz x 64 FLOP/instr (512-bit, 24 chains; ...)"
std::string DescribePeak(const PeakInfo& p);
const char* PeakOpName(PeakOp op);

}  // namespace deepinfer
