// Elementwise and normalization kernels of the transformer block (f32 activations).
#pragma once
#include <cstdint>
#include <vector>

#include "tensor/dtype.h"

namespace deepinfer {

// y[i] = x[i] / sqrt(mean(x^2) + eps) * w, for m rows of n. y may alias x.
void RmsNorm(const float* x, const float* w, float eps, int m, int n, float* y);

enum class RopeStyle { kAdjacentPairs, kHalves };  // GGUF llama (interleaved) vs HF/NeoX (rotate_half)

// Precomputed inverse frequencies for rotary embeddings over the first rot_dim dims of each head.
// YaRN context extension (DeepSeek-V2/V3): per frequency, a ramp between interpolated (divided by factor) and
// original frequencies over the dims [low, high] found from beta_fast/beta_slow rotations at the original context;
// cos/sin scaled by mscale (HF: get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)).
struct YarnParams {
  double factor = 0;  // <= 1: off
  double original_ctx = 4096, beta_fast = 32, beta_slow = 1;
  float mscale = 1.f;  // multiplies cos and sin
};
struct RopeTable {
  RopeStyle style = RopeStyle::kHalves;
  int rot_dim = 0;
  float mscale = 1.f;
  std::vector<float> inv_freq;  // rot_dim / 2 entries, freq factors already applied
  static RopeTable Make(RopeStyle style, int rot_dim, double theta, const std::vector<float>& freq_factors,
                        const YarnParams& yarn = {});
};
// Rotates `n_heads` heads of `head_dim` in each of m rows (row stride = n_heads * head_dim), row i at pos[i].
void ApplyRope(const RopeTable& t, float* x, int m, int n_heads, int head_dim, const int32_t* pos);

// out[i] = silu(gate[i]) * up[i]
void SwiGLU(const float* gate, const float* up, float* out, int64_t n);
// In-place softmax over n values; returns nothing, handles -inf.
void Softmax(float* x, int n);
// log-softmax into out.
void LogSoftmax(const float* x, float* out, int n);

}  // namespace deepinfer
