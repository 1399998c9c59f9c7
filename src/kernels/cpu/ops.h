// Elementwise and normalization kernels of the transformer block (f32 activations).
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/ops.h"
#include "tensor/dtype.h"

namespace deepinfer {

// y[i] = x[i] / sqrt(mean(x^2) + eps) * w, for m rows of n. y may alias x.
void RmsNorm(const float* x, const float* w, float eps, int m, int n, float* y);

// Rotates `n_heads` heads of `head_dim` in each of m rows (row stride = n_heads * head_dim), row i at pos[i].
void ApplyRope(const RopeTable& t, float* x, int m, int n_heads, int head_dim, const int32_t* pos);

// out[i] = silu(gate[i]) * up[i]
void SwiGLU(const float* gate, const float* up, float* out, int64_t n);
void GeGLU(const float* gate, const float* up, float* out, int64_t n);  // out = gelu_tanh(gate) * up
void SwiGluOai(const float* gate, const float* up, float* out, int64_t n);  // gpt-oss's clamped SwiGLU (kernels/ops.h)
// In-place softmax over n values; returns nothing, handles -inf.
void Softmax(float* x, int n);
// log-softmax into out.
void LogSoftmax(const float* x, float* out, int n);

}  // namespace deepinfer
