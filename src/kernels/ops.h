// The op seam: the operations model layers call, behind one interface per device (CTranslate2's
// primitives<Device> and ggml's per-backend tables play this part). Layers hold an `const Ops&` for the device
// their weights live on (TensorView::device) and never include a device's kernels: kernels/cpu/ implements this
// interface with today's kernel table (CpuOps), and a second backend adds its own implementation and a case in
// OpsFor. The types here are the ops' arguments, shared by every device.
//
// Activations are f32 arrays in the device's memory; weights are TensorViews in their stored type. Every op is
// row-wise or per sequence with a fixed reduction order: results do not depend on the batch or thread count.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace deepinfer {

enum class RopeStyle { kAdjacentPairs, kHalves };  // GGUF llama (interleaved) vs HF/NeoX (rotate_half)

// Precomputed inverse frequencies for rotary embeddings over the first rot_dim dims of each head.
// YaRN context extension (DeepSeek-V2/V3): per frequency, a ramp between interpolated (divided by factor) and
// original frequencies over the dims [low, high] found from beta_fast/beta_slow rotations at the original context;
// cos/sin scaled by mscale (HF: get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)).
struct YarnParams {
  double factor = 0;  // <= 1: off
  double original_ctx = 4096, beta_fast = 32, beta_slow = 1;
  float mscale = 1.f;  // multiplies cos and sin
  // The ramp's ends rounded to whole dims (floor / ceil), as llama.cpp and transformers do by default; gpt-oss's
  // config.json says truncate: false (transformers then keeps them fractional; llama.cpp rounds regardless).
  bool truncate = true;
};
struct RopeTable {
  RopeStyle style = RopeStyle::kHalves;
  int rot_dim = 0;
  float mscale = 1.f;
  std::vector<float> inv_freq;  // rot_dim / 2 entries, freq factors already applied
  static RopeTable Make(RopeStyle style, int rot_dim, double theta, const std::vector<float>& freq_factors,
                        const YarnParams& yarn = {});
};
// One product of a MatMulMany batch: y = x * W^T with x m rows of W's columns, y m rows of W's rows.
struct MatMulJob {
  const TensorView* w;
  const float* x;
  int m;
  float* y;
};

// Per-head products on strided head slices of the same rows (MLA's W_UK and W_UV per head): for each head h in
// [0, heads), row t in [0, rows), output column j in [0, out_width):
//   y[t * y_stride + h * y_head_offset + j] = sum over c in [0, in_width) of
//                                             x[t * x_stride + h * x_head_offset + c] * W_h[j][c]
// with W_h = head_weight(h), a {out_width, in_width} view, and x converted to W_h's dot type as MatMul does.
// Nothing else in y is written.
struct HeadsMatMul {
  int heads = 0;
  int rows = 0;
  // Called once per head, from the pool's threads (concurrently): must not modify shared state.
  std::function<TensorView(int head)> head_weight;
  const float* x = nullptr;
  int64_t x_stride = 0;       // floats between rows
  int64_t x_head_offset = 0;  // floats between head h and h + 1 within a row
  int in_width = 0;           // floats of each head's input slice (W_h's columns)
  float* y = nullptr;
  int64_t y_stride = 0;       // floats between rows
  int64_t y_head_offset = 0;  // floats between head h and h + 1 within a row
  int out_width = 0;          // floats of each head's output slice (W_h's rows)
};
// One sequence's slice of a batched attention call: query rows [q_row, q_row + m) of q/out sit at absolute
// positions start .. start+m-1; position p's K/V live in row rows[p - rows_first] of the layer's K/V storage.
// rows_first: the lowest position the call may read (at most the first row's window start; 0 without a window),
// so a windowed layer's table need not reach back to position 0.
struct AttnSeq {
  int64_t q_row;
  int m;
  int start;
  const int32_t* rows;  // start + m - rows_first entries
  int rows_first = 0;
};
// Head layout of an attention call. Query head h reads K/V head h / (n_heads / n_kv); its K is hd_k elements at
// kv_head * hd_k within a K row of k_row_elems, its V hd_v elements at kv_head * hd_v within a V row. Standard
// attention: hd_k = hd_v = head_dim, rows of n_kv * head_dim. MLA (absorbed): n_kv = 1, K row = [latent, rope
// key] (hd_k = kv_lora + rope), V = the latent inside the same row (hd_v = kv_lora, v_base = k_base).
// Two options change which positions a row sees and how its softmax sums:
//   window > 0: sliding-window attention, row at position q sees [max(0, q + 1 - window), q] (llama.cpp's
//     LLAMA_SWA_TYPE_STANDARD: a key is masked when q - p >= window); 0: every position up to q.
//   sinks: one learned logit per query head (n_heads floats, gpt-oss), an extra term exp(sink - max) in the
//     softmax's denominator that no value is weighted by; nullptr: none.
struct AttnShape {
  int n_heads, n_kv, hd_k, hd_v;
  int k_row_elems, v_row_elems;
  int window = 0;
  const float* sinks = nullptr;
};
class Ops {
 public:
  virtual ~Ops() = default;
  virtual Device device() const = 0;
  // Which kernel set runs (the CPU: the ISA table chosen at start-up, e.g. "avx512"), for logs.
  virtual const char* kernels() const = 0;

  // y = x * W^T (+ bias): x m rows of K, y m rows of N (W {N, K} in its stored type).
  virtual void MatMul(const TensorView& w, const float* x, int m, float* y, const float* bias = nullptr) const = 0;
  // Independent products in one dispatch; every y is bitwise what MatMul computes.
  virtual void MatMulMany(const MatMulJob* jobs, int count) const = 0;
  // Per-head products on strided head slices (HeadsMatMul).
  virtual void MatMulHeads(const HeadsMatMul& spec) const = 0;
  // y[i] = x[i] / sqrt(mean(x^2) + eps) * w, for m rows of n. y may alias x.
  virtual void RmsNorm(const float* x, const float* w, float eps, int m, int n, float* y) const = 0;
  // Rotates n_heads heads of head_dim in each of m rows (row stride n_heads * head_dim), row i at pos[i].
  virtual void ApplyRope(const RopeTable& t, float* x, int m, int n_heads, int head_dim, const int32_t* pos) const = 0;
  // out[i] = silu(gate[i]) * up[i]
  virtual void SwiGLU(const float* gate, const float* up, float* out, int64_t n) const = 0;
  // out[i] = gelu_tanh(gate[i]) * up[i], GELU's tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  virtual void GeGLU(const float* gate, const float* up, float* out, int64_t n) const = 0;
  // gpt-oss's clamped SwiGLU (ggml's swiglu_oai): g = min(gate, 7), u = clamp(up, -7, 7),
  // out = g * sigmoid(1.702 g) * (u + 1).
  virtual void SwiGluOai(const float* gate, const float* up, float* out, int64_t n) const = 0;
  // Causal attention over paged K/V (kv_type f32, bf16 or f16) for several sequences at once; row i of a
  // sequence sees positions [0, start + i], or the last shape.window of them. q: rows of n_heads * hd_k; out: rows of n_heads * hd_v.
  virtual void PagedAttention(const float* q, const AttnSeq* seqs, int num_seqs, const void* k_base, const void* v_base,
                              DType kv_type, const AttnShape& shape, float scale, float* out) const = 0;
  // n values of row `src` (stored type t) as f32 (embedding lookups, small f32 copies of weights).
  virtual void DequantizeRow(DType t, const void* src, float* dst, size_t n) const = 0;
  // Rewrites a weight matrix that only MatMul reads, in writable memory the caller owns, into a layout these
  // ops multiply faster (the CPU: q4_K as kQ4_K_X16 where the kernels have a decode kernel for it), changing
  // w.dtype; the products stay bitwise the same. False (and w untouched) where there is none.
  virtual bool RegroupForMatMul(TensorView& w) const { (void)w; return false; }
  // Row r of a weight matrix as f32 (embedding lookups), whatever layout RegroupForMatMul gave it.
  virtual void MatrixRow(const TensorView& w, int64_t r, float* out) const { DequantizeRow(w.dtype, w.row(r), out, static_cast<size_t>(w.cols())); }
};

// The ops of device d.
const Ops& OpsFor(Device d);

}  // namespace deepinfer
