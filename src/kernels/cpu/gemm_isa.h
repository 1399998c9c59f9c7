// Per-ISA GEMM slice kernels behind MatMul's runtime dispatch. Each computes, for weight rows [n0, n1):
//   y[i * ldy + n] = dot(x[i * K ...], W[n])  for i in [0, m)
// `xq` is x converted for the weight type: q8_0 blocks for q8_0/q4_0 weights (always), bf16 for bf16 weights
// (AVX512-BF16 kernel only); null otherwise.
#pragma once
#include <cstdint>

#include "tensor/tensor.h"

namespace deepinfer {
namespace isa_avx512 {
void GemmSlice(const TensorView& w, const float* x, const void* xq, int m, float* y, int ldy, int64_t n0, int64_t n1);
}
namespace isa_avx2 {
void GemmSlice(const TensorView& w, const float* x, const void* xq, int m, float* y, int ldy, int64_t n0, int64_t n1);
}
namespace isa_scalar {
void GemmSlice(const TensorView& w, const float* x, const void* xq, int m, float* y, int ldy, int64_t n0, int64_t n1);
}
}  // namespace deepinfer
