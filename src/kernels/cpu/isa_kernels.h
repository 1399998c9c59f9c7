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

// A multiply-add with one rounding where the unit has FMA units (AVX2, AVX-512: what the AVX-512 kernels do, so
// those ISAs give the same bits); the scalar unit, built for CPUs without them, multiplies then adds (libm's fmaf,
// the exact alternative, made its f32 prefill 20x slower). A macro, not an inline function (see above).
#if defined(__FMA__)
#define DI_FMA(a, b, c) __builtin_fmaf((a), (b), (c))
#else
#define DI_FMA(a, b, c) ((a) * (b) + (c))
#endif

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

// AttendRows: a block of nr consecutive query rows of one sequence times nh query heads that share one K/V head
// (GQA group, or all heads for absorbed MLA); each (row, head) pair is a "slot". Row r sees the keys/values of
// positions [lo_r, len_r), len_r = len0 + r, lo_r = window > 0 ? max(0, len_r - window) : 0: position p lives in
// row rows[p] of the K and V storage (rows k_row_bytes / v_row_bytes apart, elements of kv_type f32/bf16/f16; k
// and v already point at the K/V head's first element). rows[p] for p < lo_0 is never read (those blocks may
// have been freed). Row r, head h: query q + r * q_stride + h * hd_k, output out + r * o_stride + h * hd_v;
// scores = q.k (hd_k) * scale, softmax (with sinks[h] as one more logit in the denominator when sinks is set),
// out = sum scores * v (hd_v). K and V may be the same storage (MLA: the latent is both). K and V are read in
// tiles of kAttendTile positions at absolute multiples of it, each used by every slot whose range meets it, with
// an online softmax per tile (`scratch` holds AttendOnlineScratchFloats(...) floats). Each slot's result is
// bitwise independent of nr, nh and the slot's place in the block, and the same on every ISA
// (attention_portable.inc computes the AVX-512 kernel's arithmetic), except the AVX-512 vdpbf16ps path for bf16
// caches, whose products and P rounding are its own.
struct AttendArgs {
  const float* q;
  int64_t q_stride;
  float* out;
  int64_t o_stride;
  int nr, nh;
  const uint8_t* k;
  const uint8_t* v;
  DType kv_type;
  const int32_t* rows;  // position p's K/V row is rows[p - rows_first]; no position below rows_first is read
  int rows_first;
  int len0;
  int64_t k_row_bytes, v_row_bytes;
  int hd_k, hd_v;
  float scale;
  int window;          // 0: every position up to the row's own
  const float* sinks;  // nh logits (head h: sinks[h]), or nullptr
  float* scratch;
};
constexpr int kAttendTile = 64;        // positions per K/V tile
constexpr int kMaxAttendSlots = 128;   // nr * nh at most
// Every kernel runs an online softmax and keeps no per-position scores: the scratch does not grow with the context.
constexpr int64_t AttendOnlineScratchFloats(int slots, int hd_k, int hd_v) {
  const int64_t padded = (slots + 15) / 16 * 16, hdvp = (hd_v + 63) / 64 * 64;
  return padded * (hd_k + 2 * kAttendTile + 6) + static_cast<int64_t>(kAttendTile) * (hdvp + hd_k) + slots * hdvp + 16 * 13;
}
using AttendRowsFn = void (*)(const AttendArgs& a);
// Activations to the dot type of quantized weights, n elements (whole blocks): bitwise QuantizeActivationsQ8_0 /
// QuantizeActivationsQ8_K (dtype.h), which are the scalar and AVX2 tables' entries.
using QuantizeQ8_0Fn = void (*)(const float* x, BlockQ8_0* y, size_t n);
using QuantizeQ8_KFn = void (*)(const float* x, BlockQ8_K* y, size_t n);

// Each ISA's entry points, of the types above (gemm_<isa>.cc and attention_<isa>.cc define them).
namespace isa_avx512 {
void GemmSlice(const GemmWeights& w, const float* x, const void* xq, int m, float* y, int ldy, int64_t n0, int64_t n1);
void AttendRows(const AttendArgs& a);
// Variants for CPUs with AVX-512 extensions, chosen by the dispatch table. GemmSliceVnni: q8_0/q4_0 tiles on
// AVX512-VNNI vpdpbusd, bitwise the results of GemmSlice. AttendRowsBf16Dot: a bf16 cache's scores and values on
// AVX512-BF16 vdpbf16ps (f32/f16 caches as AttendRows).
void GemmSliceVnni(const GemmWeights& w, const float* x, const void* xq, int m, float* y, int ldy, int64_t n0, int64_t n1);
void AttendRowsBf16Dot(const AttendArgs& a);
// kQ4_K_X16 weights (dtype.h) at small m on AVX512-VNNI: rows [n0, n1), whole 16-row groups of the matrix (n0 and n1
// multiples of 16, n1 <= rows / 16 * 16); x is quantized to q8_K. Bitwise what GemmSliceVnni computes for the same
// rows as q4_K.
void Q4KX16Decode(const GemmWeights& w, const float* x, const void* xq, int m, float* y, int ldy, int64_t n0, int64_t n1);
// kQ6_K_X16 likewise (bitwise GemmSliceVnni's q6_K results).
void Q6KX16Decode(const GemmWeights& w, const float* x, const void* xq, int m, float* y, int ldy, int64_t n0, int64_t n1);
// kQ8_0_X16 weights on AVX512-VNNI at any m, whole groups as above; x is quantized to q8_0. Bitwise what
// GemmSliceVnni computes for the same rows as q8_0.
void Q8X16Gemm(const GemmWeights& w, const float* x, const void* xq, int m, float* y, int ldy, int64_t n0, int64_t n1);
// kMXFP4_X16 likewise (bitwise GemmSliceVnni's MXFP4 results).
void MxX16Gemm(const GemmWeights& w, const float* x, const void* xq, int m, float* y, int ldy, int64_t n0, int64_t n1);
// One regrouped group (kQ4_K_X16, kQ6_K_X16, kQ8_0_X16, kMXFP4_X16) back in row order: the bytes dtype.h's
// Unpack functions write.
void UnpackX16(DType t, const uint8_t* group, int64_t k, uint8_t* out);
void QuantizeQ8_0(const float* x, BlockQ8_0* y, size_t n);
void QuantizeQ8_K(const float* x, BlockQ8_K* y, size_t n);
}  // namespace isa_avx512
namespace isa_avx2 {
void GemmSlice(const GemmWeights& w, const float* x, const void* xq, int m, float* y, int ldy, int64_t n0, int64_t n1);
void AttendRows(const AttendArgs& a);
}  // namespace isa_avx2
namespace isa_scalar {
void GemmSlice(const GemmWeights& w, const float* x, const void* xq, int m, float* y, int ldy, int64_t n0, int64_t n1);
void AttendRows(const AttendArgs& a);
}  // namespace isa_scalar

}  // namespace deepinfer
