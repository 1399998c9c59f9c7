// Measures sustainable read bandwidth (bytes/s) with the compute pool: the decode roofline's denominator.
#pragma once
#include <cstddef>

namespace deepinfer {

// Reads a buffer of `bytes` (>> last-level cache) `reps` times with all pool threads; returns the best GB/s.
double MeasureReadBandwidthGBs(size_t bytes = size_t{1} << 30, int reps = 5);

// The inner instruction of a GEMM family: f32 FMA (f32/f16 weights, bf16 without AVX512-BF16; zmm when the active
// kernel table is AVX-512's, ymm otherwise), vdpbf16ps (bf16 weights on AVX512-BF16), vpdpbusd (quantized weights
// on AVX512-VNNI).
enum class PeakOp { kF32Fma, kBf16Dot, kInt8Dot };
// Peak matmul (G)FLOP/s, or int8 GOP/s, of that instruction on all pool threads: independent accumulators in
// registers, no memory traffic. The prefill and batched-decode roofline. 0 when the CPU lacks the instruction.
double MeasurePeakGflops(PeakOp op);
const char* PeakOpName(PeakOp op);

}  // namespace deepinfer
