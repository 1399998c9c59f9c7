#include "tensor/quantize.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace deepinfer {
namespace {

// Below this a group is treated as all zeros (ggml's GROUP_MAX_EPS).
constexpr float kGroupEps = 1e-15f;

// Round half to even, as adding 1.5 * 2^23 does (|v| < 2^22, which every caller guarantees: the arguments are
// bounded by the quantization range).
inline int NearestInt(float v) {
  float s = v + 12582912.f;
  int32_t i;
  std::memcpy(&i, &s, 4);
  return (i & 0x007fffff) - 0x00400000;
}

inline int Clamp(int v, int lo, int hi) { return std::max(lo, std::min(hi, v)); }

// The element of largest magnitude (the first one on ties); *amax gets its magnitude.
inline float LargestMagnitude(const float* x, int n, float* amax) {
  float max = 0;
  *amax = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > *amax) {
      *amax = std::fabs(x[i]);
      max = x[i];
    }
  return max;
}

// Symmetric quantization of n values to [-nmax, nmax-1] (stored + nmax in L), weighting errors by x^2: the
// scale from the largest magnitude, then 18 scales around it tried, keeping the one with the best weighted
// least-squares fit. Returns the scale.
float SymmetricQuants(int n, int nmax, const float* x, int8_t* L) {
  float amax;
  const float max = LargestMagnitude(x, n, &amax);
  if (amax < kGroupEps) {
    std::fill(L, L + n, 0);
    return 0.f;
  }
  auto fit = [&](float iscale, float* sumlx, float* suml2) {
    *sumlx = 0;
    *suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const float l = static_cast<float>(Clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1));
      const float w = x[i] * x[i];
      *sumlx += w * x[i] * l;
      *suml2 += w * l * l;
    }
  };
  auto store = [&](float iscale) {
    for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(nmax + Clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1));
  };
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx, suml2;
  fit(iscale, &sumlx, &suml2);
  store(iscale);
  float scale = suml2 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    fit(iscale, &sumlx, &suml2);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      store(iscale);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// q3_K's sub-block search: the max-magnitude scale, then up to 5 passes moving single elements to the level
// that most improves the x^2-weighted fit. L gets levels + nmax; returns the scale.
float Q3Quants(int n, int nmax, const float* x, int8_t* L) {
  float amax;
  const float max = LargestMagnitude(x, n, &amax);
  if (amax < kGroupEps) {
    std::fill(L, L + n, 0);
    return 0.f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = Clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      if (slx <= 0) continue;
      float sl2 = suml2 - w * li * li;
      const int nl = Clamp(NearestInt(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (nl == L[i]) continue;
      slx += w * x[i] * static_cast<float>(nl);
      sl2 += w * static_cast<float>(nl) * static_cast<float>(nl);
      if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = static_cast<int8_t>(nl);
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (!changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Asymmetric quantization x ~ scale * L + min (L in [0, nmax], min <= 0) for the k-quants with mins: start
// from the range, then try nstep+1 scales (rmin + rdelta*is + nmax) / range and keep the weighted least-squares
// (scale, min) with the lowest weighted error (|e| when use_mad, else e^2). Returns the scale; *neg_min = -min.
float AffineQuants(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min, float rmin,
                   float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::fill(L, L + n, 0);
    *neg_min = -min;
    return 0.f;
  }
  auto error = [&](const uint8_t* q, float scale, float mn) {
    float e = 0;
    for (int i = 0; i < n; ++i) {
      float d = scale * static_cast<float>(q[i]) + mn - x[i];
      d = use_mad ? std::fabs(d) : d * d;
      e += w[i] * d;
    }
    return e;
  };
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(Clamp(NearestInt(iscale * (x[i] - min)), 0, nmax));
  float best = error(L, scale, min);
  uint8_t aux[32];
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = Clamp(NearestInt(iscale * (x[i] - min)), 0, nmax);
      aux[i] = static_cast<uint8_t>(l);
      const float fl = static_cast<float>(l);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;
      sum_xl += w[i] * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D <= 0) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    const float e = error(aux, this_scale, this_min);
    if (e < best) {
      std::memcpy(L, aux, static_cast<size_t>(n));
      best = e;
      scale = this_scale;
      min = this_min;
    }
  }
  *neg_min = -min;
  return scale;
}

// The 6-bit (scale, min) pairs of q4_K / q5_K, packed as KQuantScaleMin reads them.
void PackScaleMin6(const float* scales, const float* mins, float max_scale, float max_min, uint8_t* packed) {
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < 8; ++j) {
    // The rounded values go through uint8_t first (a negative one wraps, then saturates at 63), as ggml's do.
    const uint8_t ls = std::min<uint8_t>(63, static_cast<uint8_t>(NearestInt(inv_scale * scales[j])));
    const uint8_t lm = std::min<uint8_t>(63, static_cast<uint8_t>(NearestInt(inv_min * mins[j])));
    if (j < 4) {
      packed[j] = ls;
      packed[j + 4] = lm;
    } else {
      packed[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      packed[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      packed[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
}

// q4_K and q5_K share everything but the level count and the search range: per 32 elements an affine fit
// weighted by rms + |x|, 6-bit scales and mins, then every element re-quantized against the stored ones.
void AffineSuperBlock(const float* x, int nmax, float rmin, int nstep, uint16_t* d, uint16_t* dmin,
                      uint8_t* scales_packed, uint8_t* L) {
  float scales[8], mins[8], w[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) w[l] = av_x + std::fabs(xs[l]);
    scales[j] = AffineQuants(32, nmax, xs, w, L + 32 * j, &mins[j], rmin, 0.1f, nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  std::memset(scales_packed, 0, 12);
  PackScaleMin6(scales, mins, max_scale, max_min, scales_packed);
  *d = F32ToF16(max_scale / 63.f);
  *dmin = F32ToF16(max_min / 63.f);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    KQuantScaleMin(j, scales_packed, &sc, &m);
    const float dj = F16ToF32(*d) * static_cast<float>(sc);
    if (!dj) continue;  // keeps the levels of the search
    const float dm = F16ToF32(*dmin) * static_cast<float>(m);
    for (int i = 0; i < 32; ++i) L[32 * j + i] = static_cast<uint8_t>(Clamp(NearestInt((x[32 * j + i] + dm) / dj), 0, nmax));
  }
}

// Four 2-bit planes of 32 elements each per 128 (q2_K / q3_K low bits).
void Pack2Bit(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < kQK_K; j += 128)
    for (int l = 0; l < 32; ++l)
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

}  // namespace

void QuantizeRowQ4_1(const float* x, BlockQ4_1* y, size_t n) {
  for (size_t b = 0; b < n / 32; ++b, x += 32) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < 32; ++j) {
      if (x[j] < min) min = x[j];
      if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / 15, id = d ? 1.0f / d : 0.0f;
    y[b].d = F32ToF16(d);
    y[b].m = F32ToF16(min);
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - min) * id + 0.5f)));
      const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>((x[j + 16] - min) * id + 0.5f)));
      y[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

// ggml's quantize_row_mxfp4_ref: the shared exponent puts the block's largest magnitude in the grid's top
// binade (e = floor(log2(amax)) - 2 + 127, read as the halved scale 2^(e - 128)); each value takes the nearest
// grid point, the first (lowest index) on ties, as ggml's linear search does.
void QuantizeRowMXFP4(const float* x, BlockMXFP4* y, size_t n) {
  for (size_t i = 0; i < n / 32; ++i, x += 32) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j)
      if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
    const uint8_t e = amax > 0.0f ? static_cast<uint8_t>(std::floor(std::log2(amax)) - 2 + 127) : 0;
    const float d = E8M0HalfToF32(e);
    y[i].e = e;
    auto best = [d](float v) {
      int index = 0;
      float err = std::fabs(kMXFP4Values[0] * d - v);
      for (int q = 1; q < 16; ++q) {
        const float e2 = std::fabs(kMXFP4Values[q] * d - v);
        if (e2 < err) index = q, err = e2;
      }
      return static_cast<uint8_t>(index);
    };
    for (int j = 0; j < 16; ++j) y[i].qs[j] = static_cast<uint8_t>(best(x[j]) | best(x[j + 16]) << 4);
  }
}

void QuantizeRowQ5_0(const float* x, BlockQ5_0* y, size_t n) {
  for (size_t b = 0; b < n / 32; ++b, x += 32) {
    float amax;
    const float max = LargestMagnitude(x, 32, &amax);
    const float d = max / -16, id = d ? 1.0f / d : 0.0f;
    y[b].d = F32ToF16(d);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f)));
      const int q1 = std::min(31, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 16.5f)));
      y[b].qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + 16);
    }
    std::memcpy(y[b].qh, &qh, 4);
  }
}

void QuantizeRowQ5_1(const float* x, BlockQ5_1* y, size_t n) {
  for (size_t b = 0; b < n / 32; ++b, x += 32) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < 32; ++j) {
      if (x[j] < min) min = x[j];
      if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / 31, id = d ? 1.0f / d : 0.0f;
    y[b].d = F32ToF16(d);
    y[b].m = F32ToF16(min);
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
      const uint8_t q0 = static_cast<uint8_t>((x[j] - min) * id + 0.5f);
      const uint8_t q1 = static_cast<uint8_t>((x[j + 16] - min) * id + 0.5f);
      y[b].qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + 16);
    }
    std::memcpy(y[b].qh, &qh, 4);
  }
}

void QuantizeRowQ2_K(const float* x, BlockQ2_K* y, size_t n) {
  for (size_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    uint8_t L[kQK_K];
    float w[16], scales[16], mins[16];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) w[l] = std::fabs(x[16 * j + l]);
      scales[j] = AffineQuants(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
      const float iscale = 15.f / max_scale;
      for (int j = 0; j < 16; ++j) y[b].scales[j] = static_cast<uint8_t>(NearestInt(iscale * scales[j]));
      y[b].d = F32ToF16(max_scale / 15.f);
    } else {
      std::memset(y[b].scales, 0, 16);
      y[b].d = F32ToF16(0.f);
    }
    if (max_min > 0) {
      const float iscale = 15.f / max_min;
      for (int j = 0; j < 16; ++j) y[b].scales[j] |= static_cast<uint8_t>(NearestInt(iscale * mins[j]) << 4);
      y[b].dmin = F32ToF16(max_min / 15.f);
    } else {
      y[b].dmin = F32ToF16(0.f);
    }
    for (int j = 0; j < 16; ++j) {
      const float d = F16ToF32(y[b].d) * static_cast<float>(y[b].scales[j] & 0xF);
      if (!d) continue;
      const float dm = F16ToF32(y[b].dmin) * static_cast<float>(y[b].scales[j] >> 4);
      for (int i = 0; i < 16; ++i) L[16 * j + i] = static_cast<uint8_t>(Clamp(NearestInt((x[16 * j + i] + dm) / d), 0, 3));
    }
    Pack2Bit(L, y[b].qs);
  }
}

void QuantizeRowQ3_K(const float* x, BlockQ3_K* y, size_t n) {
  for (size_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    int8_t L[kQK_K];
    float scales[16];
    float amax = 0, max_scale = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = Q3Quants(16, 4, x + 16 * j, L + 16 * j);
      if (std::fabs(scales[j]) > amax) {
        amax = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    uint8_t* sp = y[b].scales;
    std::memset(sp, 0, 12);
    if (max_scale) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < 16; ++j) {
        // 6-bit scale + 32: low nibbles in bytes 0-7 (two per byte), high 2 bits in bytes 8-11.
        const int l = Clamp(static_cast<int8_t>(NearestInt(iscale * scales[j])), -32, 31) + 32;
        if (j < 8)
          sp[j] = static_cast<uint8_t>(l & 0xF);
        else
          sp[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
        sp[j % 4 + 8] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
      }
      y[b].d = F32ToF16(1 / iscale);
    } else {
      y[b].d = F32ToF16(0.f);
    }
    int8_t sc16[16];
    Q3KScales(sp, sc16);
    for (int j = 0; j < 16; ++j) {
      const float d = F16ToF32(y[b].d) * static_cast<float>(sc16[j] - 32);
      if (!d) continue;
      for (int i = 0; i < 16; ++i) L[16 * j + i] = static_cast<int8_t>(Clamp(NearestInt(x[16 * j + i] / d), -4, 3) + 4);
    }
    // The high bit of element j goes to bit j / 32 of hmask[j % 32]; the low 2 bits as q2_K's.
    std::memset(y[b].hmask, 0, 32);
    uint8_t low[kQK_K];
    for (int j = 0; j < kQK_K; ++j) {
      int l = L[j];
      if (l > 3) {
        y[b].hmask[j % 32] |= static_cast<uint8_t>(1 << (j / 32));
        l -= 4;
      }
      low[j] = static_cast<uint8_t>(l);
    }
    Pack2Bit(low, y[b].qs);
  }
}

void QuantizeRowQ4_K(const float* x, BlockQ4_K* y, size_t n) {
  for (size_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    uint8_t L[kQK_K];
    AffineSuperBlock(x, 15, -1.f, 20, &y[b].d, &y[b].dmin, y[b].scales, L);
    // 64 elements per 32 bytes: the first 32 in the low nibbles, the next 32 in the high ones.
    for (int j = 0; j < kQK_K; j += 64)
      for (int l = 0; l < 32; ++l) y[b].qs[j / 2 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
  }
}

void QuantizeRowQ5_K(const float* x, BlockQ5_K* y, size_t n) {
  for (size_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    uint8_t L[kQK_K];
    AffineSuperBlock(x, 31, -0.5f, 15, &y[b].d, &y[b].dmin, y[b].scales, L);
    // Low nibbles as q4_K; the 5th bit of element 64*k + j (j < 32) is bit 2k of qh[j], of 64*k + 32 + j bit 2k+1.
    std::memset(y[b].qh, 0, 32);
    for (int k = 0; k < 4; ++k)
      for (int j = 0; j < 32; ++j) {
        const int l1 = L[64 * k + j], l2 = L[64 * k + 32 + j];
        y[b].qh[j] |= static_cast<uint8_t>(((l1 >> 4) << (2 * k)) | ((l2 >> 4) << (2 * k + 1)));
        y[b].qs[32 * k + j] = static_cast<uint8_t>((l1 & 0xF) | ((l2 & 0xF) << 4));
      }
  }
}

void QuantizeRowQ6_K(const float* x, BlockQ6_K* y, size_t n) {
  for (size_t b = 0; b < n / kQK_K; ++b, x += kQK_K) {
    int8_t L[kQK_K];
    float scales[16];
    float max_abs = 0, max_scale = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = SymmetricQuants(16, 32, x + 16 * j, L + 16 * j);
      if (std::fabs(scales[j]) > max_abs) {
        max_abs = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    if (max_abs < kGroupEps) {
      std::memset(&y[b], 0, sizeof(BlockQ6_K));
      continue;
    }
    const float iscale = -128.f / max_scale;
    y[b].d = F32ToF16(1 / iscale);
    for (int j = 0; j < 16; ++j) y[b].scales[j] = static_cast<int8_t>(std::min(127, NearestInt(iscale * scales[j])));
    for (int j = 0; j < 16; ++j) {
      const float d = F16ToF32(y[b].d) * static_cast<float>(y[b].scales[j]);
      if (!d) continue;
      for (int i = 0; i < 16; ++i) L[16 * j + i] = static_cast<int8_t>(Clamp(NearestInt(x[16 * j + i] / d), -32, 31) + 32);
    }
    // Per 128 elements: low nibbles of 0-31 | 64-95 << 4 and of 32-63 | 96-127 << 4; the 2 high bits of all
    // four quarters in one byte each.
    uint8_t* ql = y[b].ql;
    uint8_t* qh = y[b].qh;
    for (int j = 0; j < kQK_K; j += 128, ql += 64, qh += 32)
      for (int l = 0; l < 32; ++l) {
        const int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
        ql[l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
      }
  }
}

}  // namespace deepinfer
