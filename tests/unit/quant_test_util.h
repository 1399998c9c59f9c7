// Random blocks of the GGUF block types, for the quantized-kernel tests (unit and ggml parity).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/dtype.h"

namespace deepinfer::testing {

// The new block types (beyond q8_0/q4_0) the loader and kernels accept as weights.
inline std::vector<DType> NewWeightTypes() {
  return {DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL, DType::kQ2_K,
          DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_XS, DType::kMXFP4};
}

// Byte offsets of a block's f16 scale fields (d, m, dmin, s).
inline std::vector<int> F16Fields(DType t) {
  switch (t) {
    case DType::kQ4_0: case DType::kQ8_0: case DType::kQ5_0: case DType::kIQ4_NL: case DType::kIQ4_XS: return {0};
    case DType::kQ4_1: case DType::kQ5_1: case DType::kQ8_1: case DType::kQ4_K: case DType::kQ5_K: return {0, 2};
    case DType::kQ2_K: return {80, 82};
    case DType::kQ3_K: return {108};
    case DType::kQ6_K: return {208};
    default: return {};
  }
}

// n blocks of random bytes: every bit pattern of the quant and scale bytes is a valid block. The f16 scale
// fields are redrawn as finite values (a NaN/Inf scale makes every element of its block NaN/Inf, in ggml as
// here, and NaN is never bitwise comparable): with `moderate`, |scale| in [2^-8, 2^-3) so products stay in a
// range a tolerance can be stated for; otherwise any finite f16, subnormals included. q8_K's f32 d is drawn the
// same way; mxfp4's exponent byte is drawn below 0xFF (2^-9..2^-4 when moderate).
inline std::vector<uint8_t> RandomBlocks(DType t, size_t n, uint32_t seed, bool moderate) {
  std::mt19937 rng(seed);
  const auto& info = GetDTypeInfo(t);
  std::vector<uint8_t> b(n * info.block_bytes);
  for (auto& v : b) v = static_cast<uint8_t>(rng());
  for (size_t i = 0; i < n; ++i) {
    uint8_t* blk = b.data() + i * info.block_bytes;
    for (int off : F16Fields(t)) {
      uint16_t h;
      do {
        h = static_cast<uint16_t>(rng());
        if (moderate) h = static_cast<uint16_t>((h & 0x83ff) | ((7 + rng() % 5) << 10));
      } while (((h >> 10) & 0x1f) == 0x1f);
      std::memcpy(blk + off, &h, 2);
    }
    // mxfp4's E8M0 exponent: 0xFF is NaN in the OCP spec (ggml reads it as 2^127); moderate: scales 2^-9..2^-4.
    if (t == DType::kMXFP4) {
      do {
        blk[0] = static_cast<uint8_t>(moderate ? 119 + rng() % 6 : rng());
      } while (blk[0] == 0xFF);
    }
    if (t == DType::kQ8_K) {
      const float d = std::ldexp(1.f + (rng() % 1000) / 1000.f, -7 - static_cast<int>(rng() % 4)) * (rng() & 1 ? -1 : 1);
      std::memcpy(blk, &d, 4);
    }
  }
  return b;
}

}  // namespace deepinfer::testing
