// Weight quantizers (f32 row -> GGUF blocks) for the types llama.cpp's quantizer writes without an importance
// matrix: q4_1, q5_0, q5_1 and the k-quants q2_K..q6_K. Each follows ggml's reference algorithm (the
// quantize_row_*_ref functions llama-quantize runs when no imatrix is given: a per-sub-block scale/min search,
// then the super-block scales quantized to 4/6/8 bits and the elements re-quantized against them), with the same
// float operations in the same order, so the blocks are bitwise those llama.cpp writes
// (tests/ggml/quant_ggml_test.cc checks this against ggml itself). Not vectorised: the order of the float
// operations is the contract, and this file is compiled without FMA so none get fused.
#pragma once
#include <cstddef>

#include "tensor/dtype.h"

namespace deepinfer {

// n is a multiple of the type's block size (32 or 256). dst receives DTypeBytes(t, n) bytes.
void QuantizeRowQ4_1(const float* x, BlockQ4_1* y, size_t n);
void QuantizeRowQ5_0(const float* x, BlockQ5_0* y, size_t n);
void QuantizeRowQ5_1(const float* x, BlockQ5_1* y, size_t n);
void QuantizeRowQ2_K(const float* x, BlockQ2_K* y, size_t n);
void QuantizeRowQ3_K(const float* x, BlockQ3_K* y, size_t n);
void QuantizeRowQ4_K(const float* x, BlockQ4_K* y, size_t n);
void QuantizeRowQ5_K(const float* x, BlockQ5_K* y, size_t n);
void QuantizeRowQ6_K(const float* x, BlockQ6_K* y, size_t n);
void QuantizeRowMXFP4(const float* x, BlockMXFP4* y, size_t n);

}  // namespace deepinfer
