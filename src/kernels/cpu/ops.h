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

// Causal attention for the m query rows of one sequence: row i sits at absolute position start + i and sees
// keys [0, start + i]. q: m x (n_heads*hd); k_cache/v_cache: rows of (n_kv*hd) floats for positions 0..start+m-1.
// out: m x (n_heads*hd). Heads share kv heads in groups of n_heads / n_kv (GQA).
void CausalAttention(const float* q, const float* k_cache, const float* v_cache, int m, int start, int n_heads,
                     int n_kv, int hd, float scale, float* out);

// One sequence's slice of a batched attention call: query rows [q_row, q_row + m) of q/out sit at absolute
// positions start .. start+m-1; position p's K/V live in row rows[p] of the layer's K/V storage.
struct AttnSeq {
  int64_t q_row;
  int m;
  int start;
  const int32_t* rows;  // start + m entries
};
// Head layout of an attention call. Query head h reads K/V head h / (n_heads / n_kv); its K is hd_k elements at
// kv_head * hd_k within a K row of k_row_elems, its V hd_v elements at kv_head * hd_v within a V row. Standard
// attention: hd_k = hd_v = head_dim, rows of n_kv * head_dim. MLA (absorbed): n_kv = 1, K row = [latent, rope
// key] (hd_k = kv_lora + rope), V = the latent inside the same row (hd_v = kv_lora, v_base = k_base).
struct AttnShape {
  int n_heads, n_kv, hd_k, hd_v;
  int k_row_elems, v_row_elems;
};
// Causal attention over paged K/V (kv_type f32, bf16 or f16) for several sequences at once; row i of a sequence
// sees positions [0, start + i]. q: rows of n_heads * hd_k; out: rows of n_heads * hd_v. Parallel over (row,
// head) with static partitioning.
void PagedAttention(const float* q, const AttnSeq* seqs, int num_seqs, const void* k_base, const void* v_base,
                    DType kv_type, const AttnShape& shape, float scale, float* out);

}  // namespace deepinfer
