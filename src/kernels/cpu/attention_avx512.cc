// AVX-512 attention (AttendRows, AttendRowsBf16Dot, see isa_kernels.h): flash-style. A task's slots (query rows x
// heads of one K/V head) take the cached positions in tiles of kAttendTile, each tile once for all slots:
//   scores  S[p][slot] = q.k * scale, slots in the vector lanes (16 per register), a K row's element (pair)
//           broadcast from the tile's rows, copied next to each other (bf16 as stored);
//   softmax online: per slot the running max m and sum l, rescaled by alpha = exp(m_old - m_new) per tile;
//   values  O[slot][dv] = O * alpha + sum_p P[p] * V[p][dv], dv in the lanes, P broadcast.
// Tasks of at most kMaxByPosition slots (decode rows: 4 or 8 query heads per K/V head, which would fill a quarter or
// half of the slot lanes) score with the positions in the lanes instead (ScoreByPosition, on a transposed K tile):
// the same products in the same order per (slot, position), so the same bits.
// Nothing grows with the context (no per-position scores), and every slot's arithmetic (the order of its dot, of
// its tiles, of its positions inside a tile) depends only on its own range of positions, never on which slots
// share the task: results are bitwise independent of row blocking, head grouping and thread count (tests).
// Sliding windows: slot s sees [lo, len), lo = max(0, len - window); tiles stay at absolute multiples of
// kAttendTile and the task starts at the tile holding the first row's lo; a tile's active slots are [sa, sb)
// (len > the tile's start, lo < its end), the others untouched; scores outside [lo, len) are -inf (P = 0).
// Positions of that first tile below the first row's lo are zero K and V rows, never read (their cache blocks may
// have been freed). Sinks, per slot after the last tile: m' = max(m, sink), alpha = exp(m - m'),
// l = fma(l, alpha, exp(sink - m')), out = (o * alpha) * (1 / l); without one out = o * (1 / l)
// (attention_portable.inc computes the same, lane for lane).
// A bf16 cache on AVX512-BF16 runs both products on vdpbf16ps: q is already rounded to bf16 (PagedAttention's
// dot-type rule), K pairs are used as stored; P is split into two bf16 parts, hi = bf16(P) and
// lo = bf16(P - hi), so P's representation error is ~2^-17 relative (an f32 path's order of error, not bf16's
// 2^-9), at two vdpbf16ps per pair of positions (still twice the f32 FMA rate per product).
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "kernels/cpu/avx512_loads.inc"
#include "kernels/cpu/isa_kernels.h"

namespace deepinfer {
namespace isa_avx512 {

namespace {
constexpr int kVec = 16;       // f32 lanes per register
constexpr int kDvChunk = 64;   // output elements per value-tile pass (4 registers); hd_v is padded to it
constexpr int kMaxSlotBlock = 5;
constexpr int kMaxByPosition = 8;  // tasks of at most this many slots score with positions in the lanes

inline int RoundUp(int x, int m) { return (x + m - 1) / m * m; }

// exp(x) for x <= 0 (and -inf -> exactly 0; 0 -> exactly 1), Cephes' expf polynomial (~1 ulp), lane-wise.
inline __m512 ExpNonPositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-127.f));  // exp(-127) underflows to 0 in the final scale
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  return _mm512_scalef_ps(p, n);
}

// Per-call state, carved out of AttendArgs::scratch (AttendOnlineScratchFloats). Slots are s = row * nh + head;
// "words" are bf16 pairs (kPair) or f32 elements.
struct Flash {
  int ns, nsp, nv, nk, hdvp;   // slots, slots padded to 16, slot vectors, K words per row, hd_v padded to 64
  uint32_t* qw;                 // [nk][nsp] the queries transposed (bf16 pairs or f32 bits)
  float* s;                     // [kAttendTile][nsp] scores, then P (f32)
  uint32_t* ph;                 // [kAttendTile / 2][nsp] P as bf16 pairs (hi, lo parts), kPair
  uint32_t* pl;
  uint32_t* vt;                 // kPair: [kAttendTile / 2][hdvp] V pairs of positions; else [kAttendTile][hdvp] f32
  float* kt;                    // [kAttendTile][hd_k] the tile's K rows (bf16 pairs as stored, or f32)
  float* o;                     // [ns][hdvp] unnormalized outputs
  float* m;                     // [nsp] running max, sum, this tile's rescale
  float* l;
  float* alpha;
  float* tmax;                  // [nsp] this tile's largest score per slot (ScoreTile keeps it)
  int32_t* len;                 // [nsp] positions each slot sees: [lo, len) (0 for padding lanes)
  int32_t* lo;
};

// S[i][v0 .. v0 + NV) for positions p .. p + NP, whose K rows start at k0, k_stride bytes apart (rows past
// np_store repeat the last one and are not stored): words j in order, one vdpbf16ps / FMA each. Scores of
// positions a slot does not see (p >= len or p < lo) are -inf.
template <bool kPair, int NV, int NP>
void ScoreTile(const Flash& f, int v0, const uint8_t* k0, int64_t k_stride, int p, int np_store, float scale, float* s_row) {
  const uint8_t* kr[NP];
  for (int i = 0; i < NP; ++i) kr[i] = k0 + (i < np_store ? i : np_store - 1) * k_stride;
  __m512 acc[NV][NP];
  for (int v = 0; v < NV; ++v)
    for (int i = 0; i < NP; ++i) acc[v][i] = _mm512_setzero_ps();
  const uint32_t* q = f.qw + kVec * v0;
  for (int j = 0; j < f.nk; ++j, q += f.nsp) {
    __m512 qv[NV];
    for (int v = 0; v < NV; ++v) qv[v] = _mm512_loadu_ps(reinterpret_cast<const float*>(q + kVec * v));
    for (int i = 0; i < NP; ++i) {
      uint32_t w;
      memcpy(&w, kr[i] + 4 * static_cast<int64_t>(j), 4);
      if constexpr (kPair) {
        const __m512bh kb = (__m512bh)_mm512_set1_epi32(static_cast<int>(w));
        for (int v = 0; v < NV; ++v) acc[v][i] = _mm512_dpbf16_ps(acc[v][i], (__m512bh)qv[v], kb);
      } else {
        float k;
        memcpy(&k, &w, 4);
        const __m512 kb = _mm512_set1_ps(k);
        for (int v = 0; v < NV; ++v) acc[v][i] = _mm512_fmadd_ps(qv[v], kb, acc[v][i]);
      }
    }
  }
  const __m512 scl = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(-__builtin_inff());
  for (int v = 0; v < NV; ++v) {
    const __m512i len = _mm512_loadu_si512(f.len + kVec * (v0 + v)), lo = _mm512_loadu_si512(f.lo + kVec * (v0 + v));
    __m512 mx = _mm512_loadu_ps(f.tmax + kVec * (v0 + v));
    for (int i = 0; i < NP && i < np_store; ++i) {
      const __m512i pos = _mm512_set1_epi32(p + i);
      const __mmask16 sees = _mm512_mask_cmple_epi32_mask(_mm512_cmpgt_epi32_mask(len, pos), lo, pos);
      const __m512 sc = _mm512_mask_mul_ps(ninf, sees, acc[v][i], scl);
      mx = _mm512_max_ps(mx, sc);
      _mm512_storeu_ps(s_row + static_cast<int64_t>(i) * f.nsp + kVec * (v0 + v), sc);
    }
    _mm512_storeu_ps(f.tmax + kVec * (v0 + v), mx);
  }
}

// Scores with the positions in the lanes, for tasks of few slots (decode rows: 4 or 8 heads per K/V head would
// fill a quarter or half of the slot lanes). kt: the tile's K transposed, word j of position i at kt[j * 64 + i].
// Each (slot, position) score is the same chain of vdpbf16ps / FMAs over j as ScoreTile's (the same products, the
// same order), then the same scale and mask, so the bits do not depend on which form computed them. Slots
// [s0, s0 + NS); S rows of positions p .. p + np.
template <bool kPair, int NS>
void ScoreByPosition(const Flash& f, int s0, const uint32_t* kt, int p, int np, float scale) {
  const __m512 scl = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(-__builtin_inff());
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int g = 0; g < np; g += kVec) {
    __m512 acc[NS];
    for (int s = 0; s < NS; ++s) acc[s] = _mm512_setzero_ps();
    const uint32_t* q = f.qw + s0;
    for (int j = 0; j < f.nk; ++j, q += f.nsp) {
      const __m512i kv = _mm512_loadu_si512(kt + static_cast<int64_t>(j) * kAttendTile + g);
      for (int s = 0; s < NS; ++s) {
        if constexpr (kPair) {
          acc[s] = _mm512_dpbf16_ps(acc[s], (__m512bh)_mm512_set1_epi32(static_cast<int>(q[s])), (__m512bh)kv);
        } else {
          float qs;
          memcpy(&qs, q + s, 4);
          acc[s] = _mm512_fmadd_ps(_mm512_set1_ps(qs), _mm512_castsi512_ps(kv), acc[s]);
        }
      }
    }
    const __m512i pos = _mm512_add_epi32(lane, _mm512_set1_epi32(p + g));
    const int n = np - g < kVec ? np - g : kVec;
    for (int s = 0; s < NS; ++s) {
      const __mmask16 before_len = _mm512_cmpgt_epi32_mask(_mm512_set1_epi32(f.len[s0 + s]), pos);
      const __mmask16 sees = _mm512_mask_cmple_epi32_mask(before_len, _mm512_set1_epi32(f.lo[s0 + s]), pos);
      const __m512 sc = _mm512_mask_mul_ps(ninf, sees, acc[s], scl);
      f.tmax[s0 + s] = __builtin_fmaxf(f.tmax[s0 + s], _mm512_reduce_max_ps(sc));
      alignas(64) float tmp[kVec];
      _mm512_store_ps(tmp, sc);
      for (int i = 0; i < n; ++i) f.s[static_cast<int64_t>(g + i) * f.nsp + s0 + s] = tmp[i];
    }
  }
}

// O[s0 .. s0 + SB)[c0 .. c0 + 64) = O * alpha + P x V over the tile's np positions, in order of position.
template <bool kPair, int SB>
void ValueTile(const Flash& f, int s0, int c0, int np) {
  __m512 acc[SB][4];
  for (int b = 0; b < SB; ++b) {
    const float* o = f.o + static_cast<int64_t>(s0 + b) * f.hdvp + c0;
    const __m512 al = _mm512_set1_ps(f.alpha[s0 + b]);
    for (int c = 0; c < 4; ++c) acc[b][c] = _mm512_mul_ps(_mm512_loadu_ps(o + kVec * c), al);
  }
  if constexpr (kPair) {
    for (int j = 0; j < (np + 1) / 2; ++j) {
      const uint32_t* vr = f.vt + static_cast<int64_t>(j) * f.hdvp + c0;
      __m512bh vv[4];
      for (int c = 0; c < 4; ++c) vv[c] = (__m512bh)_mm512_loadu_si512(vr + kVec * c);
      for (int b = 0; b < SB; ++b) {
        const __m512bh hi = (__m512bh)_mm512_set1_epi32(static_cast<int>(f.ph[static_cast<int64_t>(j) * f.nsp + s0 + b]));
        const __m512bh lo = (__m512bh)_mm512_set1_epi32(static_cast<int>(f.pl[static_cast<int64_t>(j) * f.nsp + s0 + b]));
        for (int c = 0; c < 4; ++c) acc[b][c] = _mm512_dpbf16_ps(acc[b][c], hi, vv[c]);
        for (int c = 0; c < 4; ++c) acc[b][c] = _mm512_dpbf16_ps(acc[b][c], lo, vv[c]);
      }
    }
  } else {
    const float* vt = reinterpret_cast<const float*>(f.vt);
    for (int i = 0; i < np; ++i) {
      const float* vr = vt + static_cast<int64_t>(i) * f.hdvp + c0;
      __m512 vv[4];
      for (int c = 0; c < 4; ++c) vv[c] = _mm512_loadu_ps(vr + kVec * c);
      for (int b = 0; b < SB; ++b) {
        const __m512 w = _mm512_set1_ps(f.s[static_cast<int64_t>(i) * f.nsp + s0 + b]);
        for (int c = 0; c < 4; ++c) acc[b][c] = _mm512_fmadd_ps(w, vv[c], acc[b][c]);
      }
    }
  }
  for (int b = 0; b < SB; ++b) {
    float* o = f.o + static_cast<int64_t>(s0 + b) * f.hdvp + c0;
    for (int c = 0; c < 4; ++c) _mm512_storeu_ps(o + kVec * c, acc[b][c]);
  }
}

// Elements d .. d + 16 of a K/V row (lanes in m) to f32, exact for every type.
inline __m512 Load16(const uint8_t* row, DType t, int d, __mmask16 m) {
  return t == DType::kF32 ? LoadF32::Tail(row, d, m) : t == DType::kF16 ? LoadF16::Tail(row, d, m) : LoadBF16::Tail(row, d, m);
}
inline __mmask16 Mask16(int left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff) : left <= 0 ? static_cast<__mmask16>(0) : TailMask16(left);
}

template <bool kPair>
void AttendFlash(const AttendArgs& a) {
  Flash f;
  f.ns = a.nr * a.nh;
  f.nsp = RoundUp(f.ns, kVec);
  f.nv = f.nsp / kVec;
  f.nk = kPair ? a.hd_k / 2 : a.hd_k;
  f.hdvp = RoundUp(a.hd_v, kDvChunk);
  const int len_max = a.len0 + a.nr - 1;
  float* w = a.scratch;
  auto take = [&w](int64_t n) {
    float* r = w;
    w += RoundUp(static_cast<int>(n), kVec);
    return r;
  };
  f.qw = reinterpret_cast<uint32_t*>(take(static_cast<int64_t>(f.nk) * f.nsp));
  f.s = take(static_cast<int64_t>(kAttendTile) * f.nsp);
  f.ph = reinterpret_cast<uint32_t*>(take(static_cast<int64_t>(kAttendTile / 2) * f.nsp));
  f.pl = reinterpret_cast<uint32_t*>(take(static_cast<int64_t>(kAttendTile / 2) * f.nsp));
  f.vt = reinterpret_cast<uint32_t*>(take(static_cast<int64_t>(kAttendTile) * f.hdvp));
  f.kt = take(static_cast<int64_t>(kAttendTile) * a.hd_k);
  f.o = take(static_cast<int64_t>(f.ns) * f.hdvp);
  f.m = take(f.nsp);
  f.l = take(f.nsp);
  f.alpha = take(f.nsp);
  f.tmax = take(f.nsp);
  f.len = reinterpret_cast<int32_t*>(take(f.nsp));
  f.lo = reinterpret_cast<int32_t*>(take(f.nsp));

  const int hd_k = a.hd_k, nh = a.nh;
  // Few slots (decode rows: 4 or 8 heads per K/V head) score with the positions in the lanes instead.
  const bool by_position = f.ns <= kMaxByPosition;
  for (int s = 0; s < f.nsp; ++s) {
    f.len[s] = s < f.ns ? a.len0 + s / nh : 0;
    f.lo[s] = a.window > 0 && f.len[s] > a.window ? f.len[s] - a.window : 0;
    f.m[s] = -__builtin_inff();
    f.l[s] = 0.f;
  }
  memset(f.o, 0, sizeof(float) * static_cast<size_t>(f.ns) * f.hdvp);
  // Queries transposed: word j of slot s at qw[j * nsp + s]; padding slots are zero.
  for (int s = 0; s < f.nsp; ++s) {
    const float* q = s < f.ns ? a.q + (s / nh) * a.q_stride + static_cast<int64_t>(s % nh) * hd_k : nullptr;
    for (int j = 0; j < f.nk; ++j) {
      uint32_t word = 0;
      if (q && kPair) {
        uint32_t lo, hi;  // q is bf16-exact (PagedAttention rounds it): its top halves are the pair
        memcpy(&lo, q + 2 * j, 4);
        memcpy(&hi, q + 2 * j + 1, 4);
        word = (lo >> 16) | (hi & 0xffff0000u);
      } else if (q) {
        memcpy(&word, q + j, 4);
      }
      f.qw[static_cast<int64_t>(j) * f.nsp + s] = word;
    }
  }
  const int64_t esize = a.kv_type == DType::kF32 ? 4 : 2;
  const int lo0 = f.lo[0];  // no row reads below it

  for (int p0 = lo0 / kAttendTile * kAttendTile; p0 < len_max; p0 += kAttendTile) {
    const int np = len_max - p0 < kAttendTile ? len_max - p0 : kAttendTile;
    const int first = lo0 - p0 > 0 ? lo0 - p0 : 0;  // positions [p0, p0 + first): zero rows, not read
    // Active slots [sa, sb), as lengths and window starts grow with the row: s >= sa see position p0 or later
    // (the rest are done), s < sb start before the tile's end (the rest have not started: untouched).
    const int sa = p0 < a.len0 ? 0 : (p0 - a.len0 + 1) * nh;
    int sb = f.ns;
    if (a.window > 0) {
      const int64_t rows_started = static_cast<int64_t>(p0) + np + a.window - a.len0;  // rows with len0 + r - window < p0 + np
      sb = rows_started < a.nr ? (rows_started > 0 ? static_cast<int>(rows_started) : 0) * nh : f.ns;
      sb = sb > sa ? sb : sa;
    }
    const int va = sa / kVec, vb = (sb + kVec - 1) / kVec;
    // The tile's rows copied (bf16 pairs) or converted (f32, f16, or bf16 without AVX512-BF16) next to each
    // other: the score tiles then read one contiguous, L1-resident block instead of NP scattered cache rows.
    const int64_t kt_stride = kPair ? 2 * hd_k : 4 * hd_k;  // bytes per copied row
    if (by_position) {
      // Transposed instead (ScoreByPosition): 16 positions x 16 words at a time; positions past np are zero.
      uint32_t* kt = reinterpret_cast<uint32_t*>(f.kt);
      for (int i0 = 0; i0 < np; i0 += kVec)
        for (int j0 = 0; j0 < f.nk; j0 += kVec) {
          const int nw = f.nk - j0 < kVec ? f.nk - j0 : kVec;
          __m512i r[kVec];
          for (int i = 0; i < kVec; ++i) {
            if (i0 + i >= np || i0 + i < first) {
              r[i] = _mm512_setzero_si512();
              continue;
            }
            const uint8_t* src = a.k + a.rows[p0 + i0 + i - a.rows_first] * a.k_row_bytes;
            if (kPair) r[i] = _mm512_maskz_loadu_epi32(Mask16(nw), reinterpret_cast<const uint32_t*>(src) + j0);
            else r[i] = _mm512_castps_si512(Load16(src, a.kv_type, j0, Mask16(nw)));
          }
          Transpose16(r);
          for (int c = 0; c < nw; ++c) _mm512_storeu_si512(kt + static_cast<int64_t>(j0 + c) * kAttendTile + i0, r[c]);
        }
    }
    for (int i = 0; i < np && !by_position; ++i) {
      if (i < first) {
        memset(reinterpret_cast<uint8_t*>(f.kt) + i * kt_stride, 0, static_cast<size_t>(kt_stride));
        continue;
      }
      const uint8_t* src = a.k + a.rows[p0 + i - a.rows_first] * a.k_row_bytes;
      if (kPair) {
        uint16_t* dst = reinterpret_cast<uint16_t*>(f.kt) + static_cast<int64_t>(i) * hd_k;
        for (int d = 0; d < hd_k; d += 32) {
          const __mmask32 m = hd_k - d >= 32 ? ~static_cast<__mmask32>(0) : static_cast<__mmask32>((1u << (hd_k - d)) - 1);
          _mm512_mask_storeu_epi16(dst + d, m, _mm512_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(src) + d));
        }
      } else {
        float* dst = f.kt + static_cast<int64_t>(i) * hd_k;
        for (int d = 0; d < hd_k; d += kVec) _mm512_mask_storeu_ps(dst + d, Mask16(hd_k - d), Load16(src, a.kv_type, d, Mask16(hd_k - d)));
      }
    }
    // Fetch the next tile's K and V rows (paged and scattered: no hardware prefetcher predicts them). Spreading
    // the prefetches over the score tiles, into L1, measured slower.
    if (p0 + kAttendTile < len_max) {
      const int nn = len_max - p0 - kAttendTile < kAttendTile ? len_max - p0 - kAttendTile : kAttendTile;
      for (int i = 0; i < nn; ++i) {
        const char* kp = reinterpret_cast<const char*>(a.k + a.rows[p0 + kAttendTile + i - a.rows_first] * a.k_row_bytes);
        const char* vp = reinterpret_cast<const char*>(a.v + a.rows[p0 + kAttendTile + i - a.rows_first] * a.v_row_bytes);
        for (int64_t off = 0; off < hd_k * esize; off += 64) _mm_prefetch(kp + off, _MM_HINT_T1);
        for (int64_t off = 0; off < a.hd_v * esize; off += 64) _mm_prefetch(vp + off, _MM_HINT_T1);
      }
    }
    // Scores for the active slot vectors, register tiles of (slot vectors x positions).
    for (int s = kVec * va; s < f.nsp; ++s) f.tmax[s] = -__builtin_inff();
    if (by_position) {
      const uint32_t* kt = reinterpret_cast<const uint32_t*>(f.kt);
      switch (f.ns) {
        case 1: ScoreByPosition<kPair, 1>(f, 0, kt, p0, np, a.scale); break;
        case 2: ScoreByPosition<kPair, 2>(f, 0, kt, p0, np, a.scale); break;
        case 3: ScoreByPosition<kPair, 3>(f, 0, kt, p0, np, a.scale); break;
        case 4: ScoreByPosition<kPair, 4>(f, 0, kt, p0, np, a.scale); break;
        case 5: ScoreByPosition<kPair, 5>(f, 0, kt, p0, np, a.scale); break;
        case 6: ScoreByPosition<kPair, 6>(f, 0, kt, p0, np, a.scale); break;
        case 7: ScoreByPosition<kPair, 7>(f, 0, kt, p0, np, a.scale); break;
        default: ScoreByPosition<kPair, 8>(f, 0, kt, p0, np, a.scale); break;
      }
    } else {
      int v = va;
      auto run = [&](auto nv_tag, auto np_tag) {
        constexpr int NV = decltype(nv_tag)::value, NP = decltype(np_tag)::value;
        const uint8_t* kt = reinterpret_cast<const uint8_t*>(f.kt);
        for (int i = 0; i < np; i += NP)
          ScoreTile<kPair, NV, NP>(f, v, kt + i * kt_stride, kt_stride, p0 + i, np - i, a.scale, f.s + static_cast<int64_t>(i) * f.nsp);
      };
      using std::integral_constant;
      for (; vb - v >= 4; v += 4) run(integral_constant<int, 4>{}, integral_constant<int, 6>{});
      if (vb - v == 3) run(integral_constant<int, 3>{}, integral_constant<int, 8>{});
      else if (vb - v == 2) run(integral_constant<int, 2>{}, integral_constant<int, 12>{});
      else if (vb - v == 1) run(integral_constant<int, 1>{}, integral_constant<int, 12>{});
    }
    // Online softmax, vectorized over slots: new max, rescale, P = exp(S - m), sums in order of position.
    // pair_idx interleaves a vector of 32 bf16 [a0..a15, b0..b15] into pairs (a_i, b_i).
    const __m512i pair_idx = _mm512_setr_epi32(0x00100000, 0x00110001, 0x00120002, 0x00130003, 0x00140004, 0x00150005, 0x00160006,
                                               0x00170007, 0x00180008, 0x00190009, 0x001a000a, 0x001b000b, 0x001c000c, 0x001d000d,
                                               0x001e000e, 0x001f000f);
    for (int v = va; v < vb; ++v) {
      const int base = kVec * v;
      const __m512i lane = _mm512_add_epi32(_mm512_set1_epi32(base), _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
      const __mmask16 act = _mm512_cmpge_epi32_mask(lane, _mm512_set1_epi32(sa)) & _mm512_cmplt_epi32_mask(lane, _mm512_set1_epi32(sb));
      float* sv = f.s + base;
      const __m512 mt = _mm512_loadu_ps(f.tmax + base);
      const __m512 m_old = _mm512_loadu_ps(f.m + base), m_new = _mm512_max_ps(m_old, mt);
      // Inactive lanes compute exp(0): they keep m and l and are never read.
      const __m512 alpha = ExpNonPositive(_mm512_maskz_sub_ps(act, m_old, m_new));
      __m512 sum = _mm512_setzero_ps();
      for (int i = 0; i < np; i += 2) {
        float* s0 = sv + static_cast<int64_t>(i) * f.nsp;
        const __m512 e0 = ExpNonPositive(_mm512_maskz_sub_ps(act, _mm512_loadu_ps(s0), m_new));
        __m512 e1 = _mm512_setzero_ps();
        sum = _mm512_add_ps(sum, e0);
        if (i + 1 < np) {
          e1 = ExpNonPositive(_mm512_maskz_sub_ps(act, _mm512_loadu_ps(s0 + f.nsp), m_new));
          sum = _mm512_add_ps(sum, e1);
        }
        if constexpr (kPair) {
          // hi = (bf16(e0), bf16(e1)) per lane: both rounded at once, then interleaved; its halves back in f32 are
          // a shift and a mask of the pair word. lo = the rounded remainders, the same way.
          const __m512i hi = _mm512_permutexvar_epi16(pair_idx, (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
          const __m512 r0 = _mm512_sub_ps(e0, _mm512_castsi512_ps(_mm512_slli_epi32(hi, 16)));
          const __m512 r1 = _mm512_sub_ps(e1, _mm512_castsi512_ps(_mm512_and_si512(hi, _mm512_set1_epi32(static_cast<int>(0xffff0000u)))));
          const __m512i lo = _mm512_permutexvar_epi16(pair_idx, (__m512i)_mm512_cvtne2ps_pbh(r1, r0));
          _mm512_storeu_si512(f.ph + static_cast<int64_t>(i / 2) * f.nsp + base, hi);
          _mm512_storeu_si512(f.pl + static_cast<int64_t>(i / 2) * f.nsp + base, lo);
        } else {
          _mm512_storeu_ps(s0, e0);
          if (i + 1 < np) _mm512_storeu_ps(s0 + f.nsp, e1);
        }
      }
      _mm512_storeu_ps(f.l + base, _mm512_mask_fmadd_ps(_mm512_loadu_ps(f.l + base), act, alpha, sum));
      _mm512_storeu_ps(f.m + base, _mm512_mask_mov_ps(m_old, act, m_new));
      _mm512_storeu_ps(f.alpha + base, alpha);
    }
    // The V tile: kPair interleaves positions 2j and 2j + 1 element by element (a missing 2j + 1 is zero);
    // otherwise rows converted to f32. Both padded with zeros to hdvp.
    if constexpr (kPair) {
      const __m512i even = _mm512_setr_epi32(0x00200000, 0x00210001, 0x00220002, 0x00230003, 0x00240004, 0x00250005, 0x00260006,
                                             0x00270007, 0x00280008, 0x00290009, 0x002a000a, 0x002b000b, 0x002c000c, 0x002d000d,
                                             0x002e000e, 0x002f000f);
      const __m512i odd = _mm512_add_epi16(even, _mm512_set1_epi16(16));
      for (int j = 0; j < (np + 1) / 2; ++j) {
        const uint16_t* r0 =
            2 * j >= first ? reinterpret_cast<const uint16_t*>(a.v + a.rows[p0 + 2 * j - a.rows_first] * a.v_row_bytes) : nullptr;
        const uint16_t* r1 = 2 * j + 1 < np && 2 * j + 1 >= first
                                 ? reinterpret_cast<const uint16_t*>(a.v + a.rows[p0 + 2 * j + 1 - a.rows_first] * a.v_row_bytes)
                                 : nullptr;
        uint32_t* dst = f.vt + static_cast<int64_t>(j) * f.hdvp;
        for (int d = 0; d < f.hdvp; d += 32) {
          const int left = a.hd_v - d;
          const __mmask32 m = left >= 32 ? ~static_cast<__mmask32>(0) : left <= 0 ? 0 : static_cast<__mmask32>((1u << left) - 1);
          const __m512i x0 = r0 ? _mm512_maskz_loadu_epi16(m, r0 + d) : _mm512_setzero_si512();
          const __m512i x1 = r1 ? _mm512_maskz_loadu_epi16(m, r1 + d) : _mm512_setzero_si512();
          _mm512_storeu_si512(dst + d, _mm512_permutex2var_epi16(x0, even, x1));
          _mm512_storeu_si512(dst + d + 16, _mm512_permutex2var_epi16(x0, odd, x1));
        }
      }
    } else {
      float* vt = reinterpret_cast<float*>(f.vt);
      for (int i = 0; i < np; ++i) {
        float* dst = vt + static_cast<int64_t>(i) * f.hdvp;
        if (i < first) {
          memset(dst, 0, sizeof(float) * static_cast<size_t>(f.hdvp));
          continue;
        }
        const uint8_t* vr = a.v + a.rows[p0 + i - a.rows_first] * a.v_row_bytes;
        for (int d = 0; d < f.hdvp; d += kVec) _mm512_storeu_ps(dst + d, Load16(vr, a.kv_type, d, Mask16(a.hd_v - d)));
      }
    }
    // Values for the active slots, blocks of up to kMaxSlotBlock slots x 64 outputs.
    for (int c0 = 0; c0 < f.hdvp; c0 += kDvChunk) {
      int s = sa;
      for (; sb - s >= kMaxSlotBlock; s += kMaxSlotBlock) ValueTile<kPair, kMaxSlotBlock>(f, s, c0, np);
      switch (sb - s) {
        case 4: ValueTile<kPair, 4>(f, s, c0, np); break;
        case 3: ValueTile<kPair, 3>(f, s, c0, np); break;
        case 2: ValueTile<kPair, 2>(f, s, c0, np); break;
        case 1: ValueTile<kPair, 1>(f, s, c0, np); break;
        default: break;
      }
    }
  }
  for (int s = 0; s < f.ns; ++s) {
    float* out = a.out + (s / nh) * a.o_stride + static_cast<int64_t>(s % nh) * a.hd_v;
    const float* o = f.o + static_cast<int64_t>(s) * f.hdvp;
    if (!a.sinks) {
      const float inv = 1.f / f.l[s];
      for (int d = 0; d < a.hd_v; d += kVec)
        _mm512_mask_storeu_ps(out + d, Mask16(a.hd_v - d), _mm512_mul_ps(_mm512_loadu_ps(o + d), _mm512_set1_ps(inv)));
      continue;
    }
    // The sink: one more term of the denominator, exp(sink - m') after the rescale to the new max m' (computed in
    // broadcast lanes, so bitwise the portable kernel's scalar ExpNonPositive).
    const __m512 m = _mm512_set1_ps(f.m[s]), sink = _mm512_set1_ps(a.sinks[s % nh]), m_new = _mm512_max_ps(m, sink);
    const __m512 al = ExpNonPositive(_mm512_sub_ps(m, m_new));
    const __m512 l = _mm512_fmadd_ps(_mm512_set1_ps(f.l[s]), al, ExpNonPositive(_mm512_sub_ps(sink, m_new)));
    const __m512 inv = _mm512_set1_ps(1.f / _mm512_cvtss_f32(l));
    for (int d = 0; d < a.hd_v; d += kVec)
      _mm512_mask_storeu_ps(out + d, Mask16(a.hd_v - d), _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(o + d), al), inv));
  }
}

}  // namespace

// AVX-512 without BF16 (and caches other than bf16, or odd head dims): f32 FMAs on rows converted exactly.
void AttendRows(const AttendArgs& a) { AttendFlash<false>(a); }
void AttendRowsBf16Dot(const AttendArgs& a) {
  if (a.kv_type == DType::kBF16 && a.hd_k % 2 == 0) return AttendFlash<true>(a);
  AttendFlash<false>(a);
}

}  // namespace isa_avx512
}  // namespace deepinfer
