// Internal to src/tensor: the block types dequantized by quant_blocks.cc (see dtype.h for the public API).
#pragma once
#include <cstddef>

#include "tensor/dtype.h"

namespace deepinfer {

// Dequantizes n elements of a type quant_blocks.cc handles (q4_1, q5_0, q5_1, q8_1, iq4_nl, the k-quants, q8_K,
// iq4_xs, mxfp4); false for any other type.
bool DequantizeBlocks(DType t, const void* src, float* dst, size_t n);

}  // namespace deepinfer
