// Internal to src/tensor: the block types dequantized by quant_blocks.cc (see dtype.h for the public API).
#pragma once
#include <cmath>
#include <cstddef>

#include "tensor/dtype.h"

namespace deepinfer {

// nearbyint(v) as an int (round half to even), NaN as 0: a NaN element (a NaN activation, or inf times a zero
// scale) becomes 0, which is what the x86 conversion chain gave before and what the AVX-512 quantizers give
// (activation_quant_avx512.inc); converting NaN to an integer is undefined behaviour in C++. |v| <= 127.5 otherwise.
inline int NearestOrZero(float v) { return v == v ? static_cast<int>(std::nearbyint(v)) : 0; }

// Dequantizes n elements of a type quant_blocks.cc handles (q4_1, q5_0, q5_1, q8_1, iq4_nl, the k-quants, q8_K,
// iq4_xs, mxfp4); false for any other type.
bool DequantizeBlocks(DType t, const void* src, float* dst, size_t n);

}  // namespace deepinfer
