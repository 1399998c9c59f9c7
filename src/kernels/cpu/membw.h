// Measures sustainable read bandwidth (bytes/s) with the compute pool: the decode roofline's denominator.
#pragma once
#include <cstddef>

namespace deepinfer {

// Reads a buffer of `bytes` (>> last-level cache) `reps` times with all pool threads; returns the best GB/s.
double MeasureReadBandwidthGBs(size_t bytes = size_t{1} << 30, int reps = 5);

// Peak matmul FLOP/s of the kernels' inner instruction on all pool threads: vdpbf16ps on AVX512-BF16 machines,
// f32 FMA otherwise; independent accumulators in registers, no memory traffic. The prefill roofline.
double MeasurePeakGflops(bool bf16);

}  // namespace deepinfer
