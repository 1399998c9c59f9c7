// Matrix multiply against weights in their stored type, f32 accumulation:
//   y[m][n] = sum_k x[m][k] * W[n][k]      (W is {N, K}, rows contiguous; x and y are f32, row-major)
// Work is split over the compute pool by weight rows: each thread owns a contiguous range and streams it once per
// block of x rows, and a thread done early takes rows from the back of another's range (cores differ in speed);
// outputs do not depend on who computes a row. Decode (m = 1) is a GEMV bound by memory bandwidth.
#pragma once
#include <cstdint>
#include <functional>

#include "kernels/ops.h"
#include "tensor/tensor.h"

namespace deepinfer {

// Computes y = x * W^T (+ bias when non-null). x: m*K floats, y: m*N floats (ldy = N).
void MatMul(const TensorView& w, const float* x, int m, float* y, const float* bias = nullptr);

// Independent products in one pool dispatch: each thread takes its share of every job's weight rows in turn, so
// many small matrices (a MoE layer's experts, gate and up of an MLP) cost one dispatch and one wake-up instead of
// one each. Every y is bitwise what MatMul computes.
void MatMulMany(const MatMulJob* jobs, int count);

// Single-threaded kernel on a slice of weight rows [n0, n1): y[i][n] for n in the slice. Exposed for tests.
// x is f32; it is converted to the weight type's dot type here, as MatMul does.
void MatMulSlice(const TensorView& w, const float* x, int m, float* y, int ldy, int64_t n0, int64_t n1);

// Heads are split over the compute pool in one dispatch (contiguous ranges of heads, ThreadPool::Range); each
// head's input slice is copied to a contiguous buffer and multiplied by the single-threaded MatMulSlice, so every
// output is bitwise what MatMulSlice on that head gives, whatever the thread count. y_stride must fit an int.
void MatMulHeads(const HeadsMatMul& spec);

}  // namespace deepinfer
