// Dequantization of ggml's k-quants and the other GGUF block types (q4_1, q5_0, q5_1, iq4_nl, iq4_xs), and the
// activation quantizations their products use (q8_1, q8_K). Each follows ggml's reference definition
// (ggml-quants.c) operation for operation, so values are bitwise those of ggml's to_float; the unit and ggml
// parity tests check that on random blocks.
#include <cmath>
#include <cstring>

#include "tensor/dtype.h"
#include "tensor/quant_blocks.h"

namespace deepinfer {

const int8_t kIQ4NLValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
const int8_t kMXFP4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

void KQuantScaleMin(int j, const uint8_t* q, uint8_t* sc, uint8_t* mn) {
  if (j < 4) {
    *sc = q[j] & 63;
    *mn = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *mn = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void Q3KScales(const uint8_t* packed, int8_t* out16) {
  constexpr uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
  uint32_t aux[4];
  std::memcpy(aux, packed, 12);
  const uint32_t tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
  aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
  aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
  aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
  std::memcpy(out16, aux, 16);
}

namespace {

void DequantQ4_1(const BlockQ4_1* b, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i, y += 32) {
    const float d = F16ToF32(b[i].d), m = F16ToF32(b[i].m);
    for (int j = 0; j < 16; ++j) {
      y[j] = (b[i].qs[j] & 0x0F) * d + m;
      y[j + 16] = (b[i].qs[j] >> 4) * d + m;
    }
  }
}

template <class B, bool kMin>
void DequantQ5(const B* b, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i, y += 32) {
    const float d = F16ToF32(b[i].d);
    uint32_t qh;
    std::memcpy(&qh, b[i].qh, 4);
    for (int j = 0; j < 16; ++j) {
      const uint8_t xh0 = ((qh >> j) << 4) & 0x10, xh1 = (qh >> (j + 12)) & 0x10;
      if constexpr (kMin) {
        const float m = F16ToF32(b[i].m);
        y[j] = ((b[i].qs[j] & 0x0F) | xh0) * d + m;
        y[j + 16] = ((b[i].qs[j] >> 4) | xh1) * d + m;
      } else {
        y[j] = (((b[i].qs[j] & 0x0F) | xh0) - 16) * d;
        y[j + 16] = (((b[i].qs[j] >> 4) | xh1) - 16) * d;
      }
    }
  }
}

// ggml's dequantize_row_mxfp4: the int8 grid value times the scale, one rounding (exact unless it overflows).
void DequantMXFP4(const BlockMXFP4* b, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i, y += 32) {
    const float d = E8M0HalfToF32(b[i].e);
    for (int j = 0; j < 16; ++j) {
      y[j] = kMXFP4Values[b[i].qs[j] & 0xf] * d;
      y[j + 16] = kMXFP4Values[b[i].qs[j] >> 4] * d;
    }
  }
}

void DequantIQ4NL(const BlockIQ4_NL* b, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i, y += 32) {
    const float d = F16ToF32(b[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * kIQ4NLValues[b[i].qs[j] & 0xf];
      y[j + 16] = d * kIQ4NLValues[b[i].qs[j] >> 4];
    }
  }
}

void DequantQ2K(const BlockQ2_K* b, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(b[i].d), min = F16ToF32(b[i].dmin);
    const uint8_t* q = b[i].qs;
    int is = 0;
    for (int n = 0; n < kQK_K; n += 128, q += 32) {
      int shift = 0;
      for (int j = 0; j < 4; ++j, shift += 2) {
        uint8_t sc = b[i].scales[is++];
        float dl = d * (sc & 0xF), ml = min * (sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<int8_t>((q[l] >> shift) & 3) - ml;
        sc = b[i].scales[is++];
        dl = d * (sc & 0xF), ml = min * (sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<int8_t>((q[l + 16] >> shift) & 3) - ml;
      }
    }
  }
}

void DequantQ3K(const BlockQ3_K* b, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i) {
    const float d_all = F16ToF32(b[i].d);
    int8_t scales[16];
    Q3KScales(b[i].scales, scales);
    const uint8_t* q = b[i].qs;
    const uint8_t* hm = b[i].hmask;
    uint8_t m = 1;
    int is = 0;
    for (int n = 0; n < kQK_K; n += 128, q += 32) {
      int shift = 0;
      for (int j = 0; j < 4; ++j, shift += 2, m = static_cast<uint8_t>(m << 1)) {
        float dl = d_all * (scales[is++] - 32);
        for (int l = 0; l < 16; ++l)
          *y++ = dl * (static_cast<int8_t>((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
        dl = d_all * (scales[is++] - 32);
        for (int l = 0; l < 16; ++l)
          *y++ = dl * (static_cast<int8_t>((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
      }
    }
  }
}

void DequantQ4K(const BlockQ4_K* b, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(b[i].d), min = F16ToF32(b[i].dmin);
    const uint8_t* q = b[i].qs;
    int is = 0;
    for (int j = 0; j < kQK_K; j += 64, q += 32, is += 2) {
      uint8_t sc, m;
      KQuantScaleMin(is, b[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      KQuantScaleMin(is + 1, b[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
    }
  }
}

void DequantQ5K(const BlockQ5_K* b, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(b[i].d), min = F16ToF32(b[i].dmin);
    const uint8_t* ql = b[i].qs;
    const uint8_t* qh = b[i].qh;
    int is = 0;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < kQK_K; j += 64, ql += 32, is += 2) {
      uint8_t sc, m;
      KQuantScaleMin(is, b[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = min * m;
      KQuantScaleMin(is + 1, b[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = min * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      u1 = static_cast<uint8_t>(u1 << 2);
      u2 = static_cast<uint8_t>(u2 << 2);
    }
  }
}

void DequantQ6K(const BlockQ6_K* b, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(b[i].d);
    const uint8_t* ql = b[i].ql;
    const uint8_t* qh = b[i].qh;
    const int8_t* sc = b[i].scales;
    for (int n = 0; n < kQK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int8_t q1 = static_cast<int8_t>((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int8_t q2 = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int8_t q3 = static_cast<int8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int8_t q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}

void DequantQ8K(const BlockQ8_K* b, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i)
    for (int j = 0; j < kQK_K; ++j) *y++ = b[i].d * b[i].qs[j];
}

void DequantQ8_1(const BlockQ8_1* b, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(b[i].d);
    for (int j = 0; j < 32; ++j) *y++ = b[i].qs[j] * d;
  }
}

void DequantIQ4XS(const BlockIQ4_XS* b, float* y, size_t nb) {
  for (size_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(b[i].d);
    const uint8_t* qs = b[i].qs;
    for (int ib = 0; ib < 8; ++ib, qs += 16, y += 32) {
      const int ls = ((b[i].scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((b[i].scales_h >> 2 * ib) & 3) << 4);
      const float dl = d * (ls - 32);
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * kIQ4NLValues[qs[j] & 0xf];
        y[j + 16] = dl * kIQ4NLValues[qs[j] >> 4];
      }
    }
  }
}

}  // namespace

bool DequantizeBlocks(DType t, const void* src, float* dst, size_t n) {
  switch (t) {
    case DType::kQ4_1: DequantQ4_1(static_cast<const BlockQ4_1*>(src), dst, n / 32); return true;
    case DType::kQ5_0: DequantQ5<BlockQ5_0, false>(static_cast<const BlockQ5_0*>(src), dst, n / 32); return true;
    case DType::kQ5_1: DequantQ5<BlockQ5_1, true>(static_cast<const BlockQ5_1*>(src), dst, n / 32); return true;
    case DType::kQ8_1: DequantQ8_1(static_cast<const BlockQ8_1*>(src), dst, n / 32); return true;
    case DType::kIQ4_NL: DequantIQ4NL(static_cast<const BlockIQ4_NL*>(src), dst, n / 32); return true;
    case DType::kMXFP4: DequantMXFP4(static_cast<const BlockMXFP4*>(src), dst, n / 32); return true;
    case DType::kQ2_K: DequantQ2K(static_cast<const BlockQ2_K*>(src), dst, n / kQK_K); return true;
    case DType::kQ3_K: DequantQ3K(static_cast<const BlockQ3_K*>(src), dst, n / kQK_K); return true;
    case DType::kQ4_K: DequantQ4K(static_cast<const BlockQ4_K*>(src), dst, n / kQK_K); return true;
    case DType::kQ5_K: DequantQ5K(static_cast<const BlockQ5_K*>(src), dst, n / kQK_K); return true;
    case DType::kQ6_K: DequantQ6K(static_cast<const BlockQ6_K*>(src), dst, n / kQK_K); return true;
    case DType::kQ8_K: DequantQ8K(static_cast<const BlockQ8_K*>(src), dst, n / kQK_K); return true;
    case DType::kIQ4_XS: DequantIQ4XS(static_cast<const BlockIQ4_XS*>(src), dst, n / kQK_K); return true;
    default: return false;
  }
}


void QuantizeActivationsQ8_1(const float* x, BlockQ8_1* y, size_t n) {
  // ggml's x86 quantize_row_q8_1: scale amax/127, round half to even, s = d * (sum of the integers).
  for (size_t k = 0; k < n / 32; ++k, x += 32) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.f;
    y[k].d = F32ToF16(d);
    const float id = amax != 0.f ? 127.f / amax : 0.f;
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      y[k].qs[j] = static_cast<int8_t>(NearestOrZero(x[j] * id));
      sum += y[k].qs[j];
    }
    y[k].s = F32ToF16(d * static_cast<float>(sum));
  }
}

void QuantizeActivationsQ8_K(const float* x, BlockQ8_K* y, size_t n) {
  // ggml's quantize_row_q8_K_ref: the scale comes from the signed value of largest magnitude (-127 / max), so
  // that value maps to -127 and the others round half to even (ggml's nearest_int), clamped to 127.
  for (size_t k = 0; k < n / kQK_K; ++k, x += kQK_K) {
    float amax = 0, max = 0;
    for (int j = 0; j < kQK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.f) {
      y[k].d = 0;
      std::memset(y[k].qs, 0, sizeof(y[k].qs));
      std::memset(y[k].bsums, 0, sizeof(y[k].bsums));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < kQK_K; ++j) {
      const int v = NearestOrZero(iscale * x[j]);
      y[k].qs[j] = static_cast<int8_t>(v < 127 ? v : 127);
    }
    for (int j = 0; j < kQK_K / 16; ++j) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += y[k].qs[j * 16 + i];
      y[k].bsums[j] = static_cast<int16_t>(sum);
    }
    y[k].d = 1 / iscale;
  }
}

DType ActivationDotType(DType weight) {
  switch (weight) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ8_0_X16:
    case DType::kQ5_0:
    case DType::kIQ4_NL:
    case DType::kMXFP4:
    case DType::kMXFP4_X16: return DType::kQ8_0;
    case DType::kQ4_1:
    case DType::kQ5_1: return DType::kQ8_1;
    case DType::kQ4_K_X16:
    case DType::kQ6_K_X16:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kIQ4_XS: return DType::kQ8_K;
    default: return DType::kInvalid;
  }
}

}  // namespace deepinfer
