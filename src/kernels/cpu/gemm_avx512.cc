// AVX-512 GEMM slice kernels. Built with AVX-512 (+BF16) flags; only called when the CPU has them.
// Register tiles of RX x-rows by RW weight rows accumulate in zmm registers over K (dot-product form), which
// serves decode (m = 1, streaming weights) and prefill (x block kept in L2, weight tile in L1) alike.
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/avx512_loads.inc"
#include "kernels/cpu/isa_kernels.h"
#define DI_ISA_NS isa_avx512
#include "kernels/cpu/quant_dot_portable.inc"
#undef DI_ISA_NS
#include "kernels/cpu/kquant_vnni_avx512.inc"

namespace deepinfer {
namespace isa_avx512 {
namespace {

#ifndef DI_MAX_RX
#define DI_MAX_RX 4
#endif
#ifndef DI_MAX_RW
#define DI_MAX_RW 4
#endif
constexpr int kMaxRX = DI_MAX_RX, kMaxRW = DI_MAX_RW;
#ifndef DI_PREFETCH_TILES
#define DI_PREFETCH_TILES 2
#endif
constexpr int kPrefetchTiles = DI_PREFETCH_TILES;

struct Args {
  const GemmWeights* w;
  const float* x;
  const void* xq;  // x converted for the weight type (bf16 or q8_0 blocks), or null
  float* y;
  int ldy;
  int64_t k;
  int first_x = 0;  // first x row of the current block: the pass that brings each weight tile in from memory
};

// Software prefetch for a tile: 1 = into L1 (one x row: decode, bandwidth bound), 2 = into L2 (the first pass
// over this weight tile when more x tiles follow; an L1 prefetch would evict the x tile), 0 = none (a later pass,
// or too close to the end of the matrix).
inline int PrefetchMode(const Args& a, int64_t n, int i, int rx, int rw) {
  if (i != a.first_x || n + (kPrefetchTiles + 1) * rw > a.w->rows) return 0;
  return rx == 1 ? 1 : 2;
}

// One line of each of the RW rows at byte offset `off` (past the tile: `ahead` is added by the caller), into L1
// (mode 1) or L2 (mode 2).
template <int RW>
inline void PrefetchRows(const uint8_t* const* wr, int64_t off, int mode) {
  for (int r = 0; r < RW; ++r) {
    const char* line = reinterpret_cast<const char*>(wr[r]) + off;
    if (mode == 1) _mm_prefetch(line, _MM_HINT_T0);
    else _mm_prefetch(line, _MM_HINT_T1);
  }
}

// The 16 lanes summed as (j, j + 8), (j, j + 4), (j, j + 2), (0, 1): GCC's _mm512_reduce_add_ps tree, written out
// so the order does not depend on a compiler's header; portable_dot.inc's ReduceAdd16 is the same tree.
inline float ReduceAdd512(__m512 v) {
  const __m256 h8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  const __m128 h4 = _mm_add_ps(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
  const __m128 h2 = _mm_add_ps(h4, _mm_movehl_ps(h4, h4));
  return _mm_cvtss_f32(_mm_add_ss(h2, _mm_movehdup_ps(h2)));
}

template <class L, int RX, int RW>
void TileF32(const Args& a, int64_t n, int i) {
  __m512 acc[RX][RW];
  const uint8_t* wr[RW];
  const float* xr[RX];
  for (int r = 0; r < RW; ++r) wr[r] = a.w->row(n + r);
  for (int s = 0; s < RX; ++s) {
    xr[s] = a.x + (i + s) * a.k;
    for (int r = 0; r < RW; ++r) acc[s][r] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  // The rows kPrefetchTiles tiles ahead, one 64-byte line per row per line read, as TileDpBF16 does: f16 rows
  // of K = 2048 are exactly one 4 KiB page, where hardware prefetchers stop (f16 decode trailed llama.cpp).
  const int64_t ahead = static_cast<int64_t>(kPrefetchTiles) * RW * static_cast<int64_t>(a.w->row_bytes);
  const int prefetch = PrefetchMode(a, n, i, RX, RW);
  constexpr int64_t kLineElems = 64 / L::kBytes;
  if constexpr (L::kBytes == 2) {
    // 16-bit weights a whole 64-byte line per load (two 32-byte loads per line ran ~15% slower in decode, where
    // the loads are what waits); the FMAs are the 16-element loop's, in its order.
    for (; k + 32 <= a.k; k += 32) {
      __m512 lo[RW], hi[RW];
      if (prefetch) PrefetchRows<RW>(wr, k * L::kBytes + ahead, prefetch);
      for (int r = 0; r < RW; ++r) L::Load32(wr[r], k, &lo[r], &hi[r]);
      for (int s = 0; s < RX; ++s) {
        const __m512 x0 = _mm512_loadu_ps(xr[s] + k), x1 = _mm512_loadu_ps(xr[s] + k + 16);
        for (int r = 0; r < RW; ++r) acc[s][r] = _mm512_fmadd_ps(x0, lo[r], acc[s][r]);
        for (int r = 0; r < RW; ++r) acc[s][r] = _mm512_fmadd_ps(x1, hi[r], acc[s][r]);
      }
    }
  }
  for (; k + 16 <= a.k; k += 16) {
    __m512 wv[RW];
    if (prefetch && k % kLineElems == 0) PrefetchRows<RW>(wr, k * L::kBytes + ahead, prefetch);
    for (int r = 0; r < RW; ++r) wv[r] = L::Load(wr[r], k);
    for (int s = 0; s < RX; ++s) {
      __m512 xv = _mm512_loadu_ps(xr[s] + k);
      for (int r = 0; r < RW; ++r) acc[s][r] = _mm512_fmadd_ps(xv, wv[r], acc[s][r]);
    }
  }
  if (k < a.k) {
    __mmask16 m = TailMask16(a.k - k);
    __m512 wv[RW];
    for (int r = 0; r < RW; ++r) wv[r] = L::Tail(wr[r], k, m);
    for (int s = 0; s < RX; ++s) {
      __m512 xv = _mm512_maskz_loadu_ps(m, xr[s] + k);
      for (int r = 0; r < RW; ++r) acc[s][r] = _mm512_fmadd_ps(xv, wv[r], acc[s][r]);
    }
  }
  for (int s = 0; s < RX; ++s)
    for (int r = 0; r < RW; ++r) a.y[static_cast<int64_t>(i + s) * a.ldy + n + r] = ReduceAdd512(acc[s][r]);
}

// bf16 x bf16 -> f32 with vdpbf16ps: 32 products per instruction, pairs summed in f32.
template <int RX, int RW>
void TileDpBF16(const Args& a, int64_t n, int i) {
  __m512 acc[RX][RW];
  const uint16_t* wr[RW];
  const uint16_t* xr[RX];
  for (int r = 0; r < RW; ++r) wr[r] = reinterpret_cast<const uint16_t*>(a.w->row(n + r));
  for (int s = 0; s < RX; ++s) {
    xr[s] = static_cast<const uint16_t*>(a.xq) + (i + s) * a.k;
    for (int r = 0; r < RW; ++r) acc[s][r] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  // Rows are often exactly one 4 KiB page (K = 2048 bf16) and hardware prefetchers stop at page boundaries, so
  // the pass that first reads a weight tile fetches the rows kPrefetchTiles tiles ahead in software (see
  // PrefetchMode). Measured on the V2-Lite-shaped MoE layer: +10-25% at 8-64 tokens (docs/benchmarks.md).
  const int64_t ahead = static_cast<int64_t>(kPrefetchTiles) * RW * a.k;
  const int prefetch = PrefetchMode(a, n, i, RX, RW);
  for (; k + 32 <= a.k; k += 32) {
    __m512bh wv[RW];
    if (prefetch == 1)
      for (int r = 0; r < RW; ++r) _mm_prefetch(reinterpret_cast<const char*>(wr[r] + k + ahead), _MM_HINT_T0);
    else if (prefetch == 2)
      for (int r = 0; r < RW; ++r) _mm_prefetch(reinterpret_cast<const char*>(wr[r] + k + ahead), _MM_HINT_T1);
    for (int r = 0; r < RW; ++r) wv[r] = (__m512bh)_mm512_loadu_si512(wr[r] + k);
    for (int s = 0; s < RX; ++s) {
      __m512bh xv = (__m512bh)_mm512_loadu_si512(xr[s] + k);
      for (int r = 0; r < RW; ++r) acc[s][r] = _mm512_dpbf16_ps(acc[s][r], xv, wv[r]);
    }
  }
  if (k < a.k) {
    __mmask32 m = static_cast<__mmask32>((1ull << (a.k - k)) - 1);
    __m512bh wv[RW];
    for (int r = 0; r < RW; ++r) wv[r] = (__m512bh)_mm512_maskz_loadu_epi16(m, wr[r] + k);
    for (int s = 0; s < RX; ++s) {
      __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(m, xr[s] + k);
      for (int r = 0; r < RW; ++r) acc[s][r] = _mm512_dpbf16_ps(acc[s][r], xv, wv[r]);
    }
  }
  for (int s = 0; s < RX; ++s)
    for (int r = 0; r < RW; ++r) a.y[static_cast<int64_t>(i + s) * a.ldy + n + r] = ReduceAdd512(acc[s][r]);
}

// Quantized weights (q8_0, q4_0) against x quantized to q8_0 blocks: integer dot per 32-element block,
// scaled by d_w * d_x, as llama.cpp computes it (so the numbers match it, and int8 math is cheap).
inline __m256i UnpackQ4(const BlockQ4_0* b) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs));
  const __m128i lo = _mm_and_si128(raw, _mm_set1_epi8(0x0f)), hi = _mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0f));
  return _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8));
}

// Pieces both q8_0/q4_0 tiles share. Software prefetch of the rows kPrefetchTiles tiles ahead (PrefetchMode),
// one 64-byte line per row every ~2 blocks.
template <bool kQ4, int RX, int RW>
struct QPrefetch {
  static constexpr int64_t kBlockBytes = kQ4 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  int mode;
  int64_t ahead, next_line = 0;
  QPrefetch(const Args& a, int64_t n, int i)
      : mode(PrefetchMode(a, n, i, RX, RW)),
        ahead(static_cast<int64_t>(kPrefetchTiles) * RW * static_cast<int64_t>(a.w->row_bytes)) {}
  void Step(const uint8_t* const* wr, int64_t b) {
    if (!mode || (b + 1) * kBlockBytes <= next_line) return;
    PrefetchRows<RW>(wr, next_line + ahead, mode);
    next_line += 64;
  }
};

// Block b of a weight row as 32 signed bytes, and its scale.
template <bool kQ4>
inline __m256i LoadQBlock(const uint8_t* row, int64_t b, float* d) {
  if constexpr (kQ4) {
    const auto* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
    *d = _cvtsh_ss(blk->d);
    return UnpackQ4(blk);
  } else {
    const auto* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
    *d = _cvtsh_ss(blk->d);
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs));
  }
}

// Sum of the 8 int32 lanes (exact: the order does not matter).
inline int32_t HSum8(__m256i v) {
  __m128i x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0x4E));
  x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0xB1));
  return _mm_cvtsi128_si32(x);
}

template <int RX, int RW>
inline void StoreQSums(const float (&acc)[RX][RW], const Args& a, int64_t n, int i) {
  for (int s = 0; s < RX; ++s)
    for (int r = 0; r < RW; ++r) a.y[static_cast<int64_t>(i + s) * a.ldy + n + r] = acc[s][r];
}

// Every q8_0 / q4_0 path of this unit computes a (weight row, x row) dot the same way, ggml's reference order:
// per 32-element block the exact integer dot s_b, then acc = fma(float(s_b), d_w * d_x, acc) block by block from
// zero. The 16-row panels below (m >= 4 on VNNI) keep 16 weight rows in the lanes of one vector, which only
// this order allows without a horizontal sum per block; here (decode, and rows past the last whole panel) each
// pair pays that sum. So a row's result does not depend on the batch or the tile it is computed in, and it is
// also what the AVX2 unit's DotQ computes.
template <bool kQ4, int RX, int RW>
void TileQ(const Args& a, int64_t n, int i) {
  float acc[RX][RW];
  const uint8_t* wr[RW];
  const BlockQ8_0* xr[RX];
  const int64_t nb = a.k / 32;
  for (int r = 0; r < RW; ++r) wr[r] = a.w->row(n + r);
  for (int s = 0; s < RX; ++s) {
    xr[s] = static_cast<const BlockQ8_0*>(a.xq) + (i + s) * nb;
    for (int r = 0; r < RW; ++r) acc[s][r] = 0.f;
  }
  const __m256i ones = _mm256_set1_epi16(1);
  QPrefetch<kQ4, RX, RW> prefetch(a, n, i);
  for (int64_t b = 0; b < nb; ++b) {
    prefetch.Step(wr, b);
    __m256i wq[RW];
    float dw[RW];
    for (int r = 0; r < RW; ++r) wq[r] = LoadQBlock<kQ4>(wr[r], b, &dw[r]);
    for (int s = 0; s < RX; ++s) {
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr[s][b].qs));
      const __m256i ax = _mm256_sign_epi8(xq, xq);
      const float dx = _cvtsh_ss(xr[s][b].d);
      for (int r = 0; r < RW; ++r) {
        const __m256i p16 = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(wq[r], xq));
        const int32_t sb = HSum8(_mm256_madd_epi16(p16, ones));
        acc[s][r] = __builtin_fmaf(static_cast<float>(sb), dw[r] * dx, acc[s][r]);
      }
    }
  }
  StoreQSums<RX, RW>(acc, a, n, i);
}

// The same product on CPUs with AVX512-VNNI (Ice Lake, Zen 4 and later): x is offset to unsigned (x + 128, an
// XOR of the sign bit) so one vpdpbusd per (x row, weight row) replaces sign + maddubs + madd, starting from
// -128 * (sum of the block's weights in each 4-byte group). The block's integer dot is exactly TileQ's, and the
// float step the same, so the results are bitwise identical. Its own function: the target attribute must not
// let the compiler emit VNNI in code that runs on AVX-512 CPUs without it.
template <bool kQ4, int RX, int RW>
__attribute__((target("avx512vnni"))) void TileQVnni(const Args& a, int64_t n, int i) {
  float acc[RX][RW];
  const uint8_t* wr[RW];
  const BlockQ8_0* xr[RX];
  const int64_t nb = a.k / 32;
  for (int r = 0; r < RW; ++r) wr[r] = a.w->row(n + r);
  for (int s = 0; s < RX; ++s) {
    xr[s] = static_cast<const BlockQ8_0*>(a.xq) + (i + s) * nb;
    for (int r = 0; r < RW; ++r) acc[s][r] = 0.f;
  }
  const __m256i ones_u8 = _mm256_set1_epi8(1), sign_bit = _mm256_set1_epi8(static_cast<char>(0x80));
  QPrefetch<kQ4, RX, RW> prefetch(a, n, i);
  for (int64_t b = 0; b < nb; ++b) {
    prefetch.Step(wr, b);
    __m256i wq[RW], base[RW];
    float dw[RW];
    for (int r = 0; r < RW; ++r) {
      wq[r] = LoadQBlock<kQ4>(wr[r], b, &dw[r]);
      // -128 * (w0 + w1 + w2 + w3) per 4-byte group: cancels the +128 offset of x.
      base[r] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), ones_u8, wq[r]), 7));
    }
    for (int s = 0; s < RX; ++s) {
      const __m256i xu = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xr[s][b].qs)), sign_bit);
      const float dx = _cvtsh_ss(xr[s][b].d);
      for (int r = 0; r < RW; ++r) {
        const int32_t sb = HSum8(_mm256_dpbusd_epi32(base[r], xu, wq[r]));
        acc[s][r] = __builtin_fmaf(static_cast<float>(sb), dw[r] * dx, acc[s][r]);
      }
    }
  }
  StoreQSums<RX, RW>(acc, a, n, i);
}

using TileFn = void (*)(const Args&, int64_t, int);

template <class L>
struct F32Tiles {
  template <int RX, int RW>
  static void Fn(const Args& a, int64_t n, int i) { TileF32<L, RX, RW>(a, n, i); }
};
template <bool kQ4>
struct QTiles {
  template <int RX, int RW>
  static void Fn(const Args& a, int64_t n, int i) { TileQ<kQ4, RX, RW>(a, n, i); }
};
template <bool kQ4>
struct QTilesVnni {
  template <int RX, int RW>
  static void Fn(const Args& a, int64_t n, int i) { TileQVnni<kQ4, RX, RW>(a, n, i); }
};
struct DpTiles {
  template <int RX, int RW>
  static void Fn(const Args& a, int64_t n, int i) { TileDpBF16<RX, RW>(a, n, i); }
};

template <class T>
struct TileTable {
  TileFn fn[kMaxRX][kMaxRW];
  TileTable() { Fill<0>(); }

 private:
  template <int I>
  void Fill() {
    if constexpr (I < kMaxRX * kMaxRW) {
      fn[I / kMaxRW][I % kMaxRW] = T::template Fn<I / kMaxRW + 1, I % kMaxRW + 1>;
      Fill<I + 1>();
    }
  }
};

template <class T>
void RunSlice(const Args& a, int m, int64_t n0, int64_t n1, size_t x_row_bytes) {
  static const TileTable<T> table;
  // Block x rows so one block stays in L2 while every weight tile of the slice passes over it.
  const int fit = static_cast<int>((256u << 10) / (x_row_bytes ? x_row_bytes : 1)) / kMaxRX * kMaxRX;
  const int xb = fit > kMaxRX ? fit : kMaxRX;
  Args block = a;
  for (int i0 = 0; i0 < m; i0 += xb) {
    const int i1 = m < i0 + xb ? m : i0 + xb;
    block.first_x = i0;
    // One x row (decode, bandwidth bound): weight rows one at a time, so each thread reads its slice as one
    // sequential stream (what hardware prefetchers follow best); +8-35% over 4 interleaved row streams. Every
    // (x row, weight row) pair is the same dot product in any tile shape, so results do not change.
    const int max_rw = m == 1 ? 1 : kMaxRW;
    for (int64_t n = n0; n < n1; n += max_rw) {
      const int rw = static_cast<int>(n1 - n < max_rw ? n1 - n : max_rw);
      for (int i = i0; i < i1; i += kMaxRX) {
        const int rx = i1 - i < kMaxRX ? i1 - i : kMaxRX;
        table.fn[rx - 1][rw - 1](block, n, i);
      }
    }
  }
}

#include "kernels/cpu/q8_0_vnni_avx512.inc"  // here: it uses LoadQBlock and the tiles' order, defined above
#include "kernels/cpu/gemv_rows16_avx512.inc"  // here: it uses NegatedBlockSums
#include "kernels/cpu/q8_0_x16_avx512.inc"     // here: it uses StreamPrefetch and QPanelTile

// kVnni: q8_0/q4_0 run on the VNNI tiles (bitwise the same results as the generic ones). Two entry points
// rather than a flag read here, so the dispatch table is where the CPU's features are looked at.
template <bool kVnni>
void GemmSliceT(const GemmWeights& w, const float* x, const void* xq, int m, float* y, int ldy, int64_t n0,
                int64_t n1) {
  Args a{&w, x, xq, y, ldy, w.k};
  const size_t xf = static_cast<size_t>(a.k) * 4;
  switch (w.dtype) {
    case DType::kF32: RunSlice<F32Tiles<LoadF32>>(a, m, n0, n1, xf); break;
    case DType::kF16: RunSlice<F32Tiles<LoadF16>>(a, m, n0, n1, xf); break;
    case DType::kBF16:
      if (xq) RunSlice<DpTiles>(a, m, n0, n1, xf / 2);
      else RunSlice<F32Tiles<LoadBF16>>(a, m, n0, n1, xf);
      break;
    case DType::kQ8_0:
    case DType::kQ4_0: {
      const bool q4 = w.dtype == DType::kQ4_0;
      int64_t done = n0;
      if constexpr (kVnni) {
        // m >= 4: whole 16-row panels; the rest (fewer than 16 rows) and small m on the one-row tiles.
        const int64_t whole = n0 + (n1 - n0) / kPanelRows * kPanelRows;
        if (m >= 4 && whole > n0) {
          if (q4) QSliceVnni<QBlockLoad<true>>(w, xq, m, y, ldy, n0, whole);
          else QSliceVnni<QBlockLoad<false>>(w, xq, m, y, ldy, n0, whole);
          done = whole;
        } else if (m < 4) {  // decode: 16 rows at a time, in their lanes (q4_0 as a grid type: GridBlock)
          done = q4 ? GridRows16Slice<DType::kQ4_0>(w, xq, m, y, ldy, n0, n1) : Q8Rows16Slice(w, xq, m, y, ldy, n0, n1);
        }
        if (done < n1) {
          if (q4) RunSlice<QTilesVnni<true>>(a, m, done, n1, xf / 4);
          else RunSlice<QTilesVnni<false>>(a, m, done, n1, xf / 4);
        }
      } else {
        if (q4) RunSlice<QTiles<true>>(a, m, n0, n1, xf / 4);
        else RunSlice<QTiles<false>>(a, m, n0, n1, xf / 4);
      }
      break;
    }
    default: {
      // k-quants at m >= 4 on VNNI: whole 16-row panels, the rest (fewer than 16 rows) on the decoded path; the
      // grid types (iq4_nl, MXFP4) on q8_0-style panels at m >= 4 and 16-row decode kernels below.
      int64_t done = n0;
      if constexpr (kVnni) {
        const int64_t whole = n0 + (n1 - n0) / kPanelRows * kPanelRows;
        if (w.dtype == DType::kQ4_K_X16 || w.dtype == DType::kQ6_K_X16) {  // whole groups (gemm.cc's RegroupedSlice)
          KQuantSliceVnni(w, xq, m, y, ldy, n0, n1);
          break;
        }
        if (m >= 4 && whole > n0 && KQuantSliceVnni(w, xq, m, y, ldy, n0, whole)) done = whole;
        else if (m < 4 && w.dtype == DType::kQ4_K) done = Q4KRows16Slice(w, xq, m, y, ldy, n0, n1);  // decode: 16 rows at a time
        else if (m < 4 && w.dtype == DType::kQ6_K) {
          Q6KDecodeSlice(w, xq, m, y, ldy, n0, n1);
          done = n1;
        } else if (m < 4 && w.dtype == DType::kQ5_0) {  // decode as a grid type with a fifth bit (GridBlock)
          done = GridRows16Slice<DType::kQ5_0>(w, xq, m, y, ldy, n0, n1);
        } else if (w.dtype == DType::kIQ4_NL || w.dtype == DType::kMXFP4) {  // the 16-entry grid types
          const bool mx = w.dtype == DType::kMXFP4;
          if (m >= 4 && whole > n0) {
            if (mx) QSliceVnni<GridBlockLoad<DType::kMXFP4>>(w, xq, m, y, ldy, n0, whole);
            else QSliceVnni<GridBlockLoad<DType::kIQ4_NL>>(w, xq, m, y, ldy, n0, whole);
            done = whole;
          } else if (m < 4) {
            done = mx ? GridRows16Slice<DType::kMXFP4>(w, xq, m, y, ldy, n0, n1)
                      : GridRows16Slice<DType::kIQ4_NL>(w, xq, m, y, ldy, n0, n1);
          }
        }
      }
      if (done < n1) QuantSlice(w, xq, m, y, ldy, done, n1);  // the other GGUF block types: portable kernels
      break;
    }
  }
}

}  // namespace

#include "kernels/cpu/activation_quant_avx512.inc"

void GemmSlice(const GemmWeights& w, const float* x, const void* xq, int m, float* y, int ldy, int64_t n0, int64_t n1) {
  GemmSliceT<false>(w, x, xq, m, y, ldy, n0, n1);
}
void GemmSliceVnni(const GemmWeights& w, const float* x, const void* xq, int m, float* y, int ldy, int64_t n0,
                   int64_t n1) {
  GemmSliceT<true>(w, x, xq, m, y, ldy, n0, n1);
}
void Q4KX16Decode(const GemmWeights& w, const float*, const void* xq, int m, float* y, int ldy, int64_t n0,
                  int64_t n1) {
  Q4KX16DecodeSliceVnni(w, xq, m, y, ldy, n0, n1);
}
void Q6KX16Decode(const GemmWeights& w, const float*, const void* xq, int m, float* y, int ldy, int64_t n0,
                  int64_t n1) {
  Q6KX16DecodeSliceVnni(w, xq, m, y, ldy, n0, n1);
}
void Q8X16Gemm(const GemmWeights& w, const float*, const void* xq, int m, float* y, int ldy, int64_t n0, int64_t n1) {
  X16SliceVnni<Q8X16Panels>(w, xq, m, y, ldy, n0, n1);
}
void MxX16Gemm(const GemmWeights& w, const float*, const void* xq, int m, float* y, int ldy, int64_t n0, int64_t n1) {
  X16SliceVnni<MxX16Panels>(w, xq, m, y, ldy, n0, n1);
}
void UnpackX16(DType t, const uint8_t* group, int64_t k, uint8_t* out) {
  if (t == DType::kQ8_0_X16) return UnpackQ8_0X16(group, k, out);  // plain copies (and flips): dtype.h's
  if (t == DType::kMXFP4_X16) return UnpackMXFP4X16(group, k, out);
  UnpackX16Group(t == DType::kQ6_K_X16, group, k, out);
}

}  // namespace isa_avx512
}  // namespace deepinfer
