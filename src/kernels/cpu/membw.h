// Measures sustainable read bandwidth (bytes/s) with the compute pool: the decode roofline's denominator.
#pragma once
#include <cstddef>

namespace deepinfer {

// Reads a buffer of `bytes` (>> last-level cache) `reps` times with all pool threads; returns the best GB/s.
double MeasureReadBandwidthGBs(size_t bytes = size_t{1} << 30, int reps = 5);

}  // namespace deepinfer
