// The contract between the per-ISA kernel units (gemm_*.cc, attention_*.cc, each compiled with its ISA's flags)
// and the dispatch table (dispatch.h) that is the only caller of their entry points.
//
// These translation units are compiled with ISA flags (-mavx512f...). Any inline function or template they
// instantiate may be emitted as a weak symbol that the linker then uses everywhere, so they touch no header
// inline functions or std:: templates: only plain data (GemmWeights), intrinsics and their own static helpers.
#pragma once
#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace deepinfer {

struct GemmWeights {
  DType dtype;
  const uint8_t* data;
  size_t row_bytes;
  int64_t rows;
  int64_t k;  // columns (elements per row)
  const uint8_t* row(int64_t n) const { return data + static_cast<size_t>(n) * row_bytes; }
};

// GemmSlice: for weight rows [n0, n1),
//   y[i * ldy + n] = dot(x[i * K ...], W[n])  for i in [0, m)
// `xq` is x converted for the weight type: blocks of its ggml vec_dot_type for quantized weights (always: q8_0
// for q8_0/q4_0/q5_0/iq4_nl, q8_1 for q4_1/q5_1, q8_K for the k-quants and iq4_xs), bf16 for bf16 weights
// when the table's bf16_dot is set (AVX512-BF16); null otherwise.
using GemmSliceFn = void (*)(const GemmWeights& w, const float* x, const void* xq, int m, float* y, int ldy,
                             int64_t n0, int64_t n1);

// AttendHeads: nh query heads of one row that share one K/V head (GQA group, or all heads for absorbed MLA),
// against the keys/values of positions [0, len): position p lives in row rows[p] of the K and V storage (rows
// k_row_bytes / v_row_bytes apart, elements of kv_type f32/bf16/f16; k and v already point at the K/V head's
// first element). Head h's query is q + h * hd_k, its output out + h * hd_v: scores = q.k (hd_k) * scale,
// softmax, out = sum scores * v (hd_v). K and V may be the same storage (MLA: the latent is both). `scores` is
// scratch of min(nh, kMaxAttendHeads) * len floats. Each head's result is bitwise independent of nh: heads are
// computed in blocks that read each K/V row once, with every head's sums in the single-head order.
constexpr int kMaxAttendHeads = 8;
using AttendHeadsFn = void (*)(const float* q, int nh, const void* k, const void* v, DType kv_type,
                               const int32_t* rows, int len, int64_t k_row_bytes, int64_t v_row_bytes, int hd_k,
                               int hd_v, float scale, float* scores, float* out);

// Each ISA's entry points, of the types above (gemm_<isa>.cc and attention_<isa>.cc define them).
namespace isa_avx512 {
void GemmSlice(const GemmWeights& w, const float* x, const void* xq, int m, float* y, int ldy, int64_t n0, int64_t n1);
void AttendHeads(const float* q, int nh, const void* k, const void* v, DType kv_type, const int32_t* rows, int len,
                 int64_t k_row_bytes, int64_t v_row_bytes, int hd_k, int hd_v, float scale, float* scores, float* out);
// Variants for CPUs with AVX-512 extensions, chosen by the dispatch table. GemmSliceVnni: q8_0/q4_0 tiles on
// AVX512-VNNI vpdpbusd, bitwise the results of GemmSlice. AttendHeadsBf16Dot: a bf16 cache's scores on
// AVX512-BF16 vdpbf16ps (f32/f16 caches as AttendHeads).
void GemmSliceVnni(const GemmWeights& w, const float* x, const void* xq, int m, float* y, int ldy, int64_t n0, int64_t n1);
void AttendHeadsBf16Dot(const float* q, int nh, const void* k, const void* v, DType kv_type, const int32_t* rows,
                        int len, int64_t k_row_bytes, int64_t v_row_bytes, int hd_k, int hd_v, float scale,
                        float* scores, float* out);
}  // namespace isa_avx512
namespace isa_avx2 {
void GemmSlice(const GemmWeights& w, const float* x, const void* xq, int m, float* y, int ldy, int64_t n0, int64_t n1);
void AttendHeads(const float* q, int nh, const void* k, const void* v, DType kv_type, const int32_t* rows, int len,
                 int64_t k_row_bytes, int64_t v_row_bytes, int hd_k, int hd_v, float scale, float* scores, float* out);
}  // namespace isa_avx2
namespace isa_scalar {
void GemmSlice(const GemmWeights& w, const float* x, const void* xq, int m, float* y, int ldy, int64_t n0, int64_t n1);
void AttendHeads(const float* q, int nh, const void* k, const void* v, DType kv_type, const int32_t* rows, int len,
                 int64_t k_row_bytes, int64_t v_row_bytes, int hd_k, int hd_v, float scale, float* scores, float* out);
}  // namespace isa_scalar

}  // namespace deepinfer
