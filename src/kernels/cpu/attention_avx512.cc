// AVX-512 attention kernels (AttendRows, AttendRowsBf16Dot, see isa_kernels.h). Built with AVX-512 (+BF16) flags; only called when
// the CPU has them.
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/avx512_loads.inc"
#include "kernels/cpu/isa_kernels.h"

// The query-row-blocked kernel (attention_portable.inc's AVX2 tiles, built here with the AVX-512 flags: the same
// arithmetic, so the same results as the AVX2 table) under its own namespace; AttendRows below calls it.
#define DI_ISA_NS isa_avx512_blocked
#include "kernels/cpu/attention_portable.inc"
#undef DI_ISA_NS

namespace deepinfer {
namespace isa_avx512 {

namespace {
constexpr int kMaxAttendHeads = 8;  // heads per register block

// NB heads that share one K/V head, in one pass over the cached rows: each K/V row is loaded once per block and
// feeds NB independent FMA chains (one per head), which hides the FMA latency a single head's chain is bound by.
// Per head the arithmetic is exactly the single-head order (lanes over d, rows in order), so the result does not
// depend on how heads are blocked.
template <class L, int NB>
void ScoresBlock(const float* q, int hd_k, const uint8_t* k, const int32_t* rows, int len, int64_t k_row_bytes,
                 float scale, float* scores, float* mx) {
  const int full = hd_k / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (hd_k - full)) - 1);
  for (int h = 0; h < NB; ++h) mx[h] = -3.4e38f;
  for (int p = 0; p < len; ++p) {
    const uint8_t* kr = k + rows[p] * k_row_bytes;
    __m512 acc[NB];
    for (int h = 0; h < NB; ++h) acc[h] = _mm512_setzero_ps();
    for (int d = 0; d < full; d += 16) {
      const __m512 kv = L::Load(kr, d);
      for (int h = 0; h < NB; ++h) acc[h] = _mm512_fmadd_ps(_mm512_loadu_ps(q + h * hd_k + d), kv, acc[h]);
    }
    if (tail) {
      const __m512 kv = L::Tail(kr, full, tail);
      for (int h = 0; h < NB; ++h)
        acc[h] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, q + h * hd_k + full), kv, acc[h]);
    }
    for (int h = 0; h < NB; ++h) {
      const float sc = _mm512_reduce_add_ps(acc[h]) * scale;
      scores[static_cast<int64_t>(h) * len + p] = sc;
      mx[h] = sc > mx[h] ? sc : mx[h];
    }
  }
}

template <class L, int NB>
void ValuesBlock(const float* scores, const float* inv, const uint8_t* v, const int32_t* rows, int len,
                 int64_t v_row_bytes, int hd_v, float* out) {
  const int vfull = hd_v / 16 * 16;
  const __mmask16 vtail = static_cast<__mmask16>((1u << (hd_v - vfull)) - 1);
  for (int d = 0; d < hd_v; d += 16) {
    const __mmask16 m = d + 16 <= hd_v ? static_cast<__mmask16>(0xffff) : vtail;
    __m512 acc[NB];
    for (int h = 0; h < NB; ++h) acc[h] = _mm512_setzero_ps();
    for (int p = 0; p < len; ++p) {
      const __m512 vv = L::Tail(v + rows[p] * v_row_bytes, d, m);
      for (int h = 0; h < NB; ++h)
        acc[h] = _mm512_fmadd_ps(_mm512_set1_ps(scores[static_cast<int64_t>(h) * len + p]), vv, acc[h]);
    }
    for (int h = 0; h < NB; ++h) _mm512_mask_storeu_ps(out + h * hd_v + d, m, _mm512_mul_ps(acc[h], _mm512_set1_ps(inv[h])));
  }
}

// Scores against a bf16 cache with vdpbf16ps (32 products per instruction, twice the f32 FMA rate; the K row
// is used as stored, no widening). q arrives rounded to bf16 (PagedAttention applies the dot-type rule for a
// bf16 cache on every ISA), so converting it here is exact.
template <int NB>
void ScoresBlockDp(const float* q, int hd_k, const uint8_t* k, const int32_t* rows, int len, int64_t k_row_bytes,
                   float scale, float* scores, float* mx) {
  const int full = hd_k / 32 * 32, padded = full + (hd_k > full ? 32 : 0);
  const __mmask32 tail = static_cast<__mmask32>((1ull << (hd_k - full)) - 1);
  uint16_t* qb = static_cast<uint16_t*>(aligned_alloc(64, sizeof(uint16_t) * static_cast<size_t>(NB) * padded));
  for (int h = 0; h < NB; ++h)
    for (int d = 0; d < padded; d += 16) {
      const __mmask16 m = d + 16 <= hd_k ? static_cast<__mmask16>(0xffff)
                          : d < hd_k     ? static_cast<__mmask16>((1u << (hd_k - d)) - 1)
                                         : static_cast<__mmask16>(0);
      const __m256bh b = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, q + h * hd_k + d));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb + h * padded + d), (__m256i)b);
    }
  for (int h = 0; h < NB; ++h) mx[h] = -3.4e38f;
  for (int p = 0; p < len; ++p) {
    const uint16_t* kr = reinterpret_cast<const uint16_t*>(k + rows[p] * k_row_bytes);
    __m512 acc[NB];
    for (int h = 0; h < NB; ++h) acc[h] = _mm512_setzero_ps();
    for (int d = 0; d < full; d += 32) {
      const __m512bh kv = (__m512bh)_mm512_loadu_si512(kr + d);
      for (int h = 0; h < NB; ++h) acc[h] = _mm512_dpbf16_ps(acc[h], (__m512bh)_mm512_load_si512(qb + h * padded + d), kv);
    }
    if (tail) {
      const __m512bh kv = (__m512bh)_mm512_maskz_loadu_epi16(tail, kr + full);
      for (int h = 0; h < NB; ++h)
        acc[h] = _mm512_dpbf16_ps(acc[h], (__m512bh)_mm512_load_si512(qb + h * padded + full), kv);
    }
    for (int h = 0; h < NB; ++h) {
      const float sc = _mm512_reduce_add_ps(acc[h]) * scale;
      scores[static_cast<int64_t>(h) * len + p] = sc;
      mx[h] = sc > mx[h] ? sc : mx[h];
    }
  }
  free(qb);
}

// kDp: scores on vdpbf16ps (L is LoadBF16 and the CPU has AVX512-BF16).
template <class L, int NB, bool kDp>
void AttendBlock(const float* q, const uint8_t* k, const uint8_t* v, const int32_t* rows, int len, int64_t k_row_bytes,
                 int64_t v_row_bytes, int hd_k, int hd_v, float scale, float* scores, float* out) {
  float mx[NB], inv[NB];
  if constexpr (kDp)
    ScoresBlockDp<NB>(q, hd_k, k, rows, len, k_row_bytes, scale, scores, mx);
  else
    ScoresBlock<L, NB>(q, hd_k, k, rows, len, k_row_bytes, scale, scores, mx);
  for (int h = 0; h < NB; ++h) {
    float* s = scores + static_cast<int64_t>(h) * len;
    double sum = 0;
    for (int p = 0; p < len; ++p) {
      s[p] = expf(s[p] - mx[h]);
      sum += s[p];
    }
    inv[h] = static_cast<float>(1.0 / sum);
  }
  ValuesBlock<L, NB>(scores, inv, v, rows, len, v_row_bytes, hd_v, out);
}

template <class L, bool kDp>
void AttendHeadsT(const float* q, int nh, const uint8_t* k, const uint8_t* v, const int32_t* rows, int len,
                  int64_t k_row_bytes, int64_t v_row_bytes, int hd_k, int hd_v, float scale, float* scores, float* out) {
  for (int h0 = 0; h0 < nh; h0 += kMaxAttendHeads) {
    const float* qh = q + static_cast<int64_t>(h0) * hd_k;
    float* oh = out + static_cast<int64_t>(h0) * hd_v;
    const int nb = nh - h0 < kMaxAttendHeads ? nh - h0 : kMaxAttendHeads;
#define DI_BLOCK(N) \
  case N: AttendBlock<L, N, kDp>(qh, k, v, rows, len, k_row_bytes, v_row_bytes, hd_k, hd_v, scale, scores, oh); break;
    switch (nb) {
      DI_BLOCK(1) DI_BLOCK(2) DI_BLOCK(3) DI_BLOCK(4) DI_BLOCK(5) DI_BLOCK(6) DI_BLOCK(7) DI_BLOCK(8)
      default: break;
    }
#undef DI_BLOCK
  }
}

}  // namespace

// f32 and f16 caches (and bf16 where the CPU has no AVX512-BF16): the query-row-blocked kernel. A bf16 cache on
// AVX512-BF16: rows one at a time through the head-blocked vdpbf16ps kernel (scratch holds at least
// min(nh, 8) * len scores), whose bf16-pair products are not the f32 kernel's; a blocked vdpbf16ps tile is
// still to do.
void AttendRows(const AttendArgs& a) { isa_avx512_blocked::AttendRows(a); }
void AttendRowsBf16Dot(const AttendArgs& a) {
  if (a.kv_type != DType::kBF16) return isa_avx512_blocked::AttendRows(a);
  for (int r = 0; r < a.nr; ++r)
    AttendHeadsT<LoadBF16, true>(a.q + r * a.q_stride, a.nh, a.k, a.v, a.rows, a.len0 + r, a.k_row_bytes, a.v_row_bytes,
                                 a.hd_k, a.hd_v, a.scale, a.scratch, a.out + r * a.o_stride);
}

}  // namespace isa_avx512
}  // namespace deepinfer
