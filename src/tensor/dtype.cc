#include "tensor/dtype.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "tensor/quant_blocks.h"
#include "tensor/quantize.h"

namespace deepinfer {

const DTypeInfo& GetDTypeInfo(DType t) {
  static const DTypeInfo kInfo[] = {
      {"f32", 1, 4},      {"f16", 1, 2},     {"bf16", 1, 2},    {"q8_0", 32, 34},  {"q4_0", 32, 18},
      {"i32", 1, 4},      {"f8_e4m3", 1, 1}, {"q4_1", 32, 20},  {"q5_0", 32, 22},  {"q5_1", 32, 24},
      {"q8_1", 32, 36},   {"q2_K", 256, 84}, {"q3_K", 256, 110}, {"q4_K", 256, 144}, {"q5_K", 256, 176},
      {"q6_K", 256, 210}, {"q8_K", 256, 292}, {"iq4_nl", 32, 18}, {"iq4_xs", 256, 136}, {"mxfp4", 32, 17},
      {"u8", 1, 1},       {"q4_K_x16", 256, 144}, {"q6_K_x16", 256, 210},
      {"q8_0_x16", 32, 34}, {"mxfp4_x16", 32, 17}, {"i64", 1, 8},
      {"invalid", 1, 0},
  };
  static_assert(sizeof(kInfo) / sizeof(kInfo[0]) == static_cast<size_t>(DType::kInvalid) + 1);
  return kInfo[static_cast<int>(t)];
}

DType DTypeFromName(const std::string& name) {
  for (int i = 0; i < static_cast<int>(DType::kInvalid); ++i)
    if (name == GetDTypeInfo(static_cast<DType>(i)).name) return static_cast<DType>(i);
  return DType::kInvalid;
}

float F16ToF32(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalize
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) {
        mant <<= 1;
        --exp;
      }
      u = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t F32ToF16(float f) {  // round to nearest even, with subnormals, inf and NaN
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000;
  uint32_t a = u & 0x7fffffff;
  if (a > 0x7f800000) return static_cast<uint16_t>(sign | 0x7e00);
  if (a >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);  // overflow (incl. rounding up) -> inf
  if (a < 0x38800000) {                                               // subnormal or zero in f16
    if (a < 0x33000000) return static_cast<uint16_t>(sign);
    uint32_t mant = (a & 0x7fffff) | 0x800000;
    int shift = 126 - static_cast<int>(a >> 23);  // 14 + (113 - exp)
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t h = ((a >> 13) - ((127 - 15) << 10));
  uint32_t rem = a & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float Fp8E4M3ToF32(uint8_t v) {
  const uint32_t sign = v >> 7, exp = (v >> 3) & 0xf, mant = v & 7;
  float out;
  if (exp == 0xf && mant == 7) out = std::numeric_limits<float>::quiet_NaN();
  else if (exp == 0) out = std::ldexp(static_cast<float>(mant), -9);  // subnormal: mant/8 * 2^-6
  else out = std::ldexp(1.f + static_cast<float>(mant) / 8.f, static_cast<int>(exp) - 7);
  return sign ? -out : out;
}

uint8_t F32ToFp8E4M3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::min(std::fabs(f), 448.f);
  // Nearest of the 127 non-negative finite codes, ties to even mantissa (the codes are monotonic).
  uint8_t best = 0;
  float best_err = std::fabs(a - Fp8E4M3ToF32(0));
  for (uint8_t c = 1; c < 0x7f; ++c) {
    const float err = std::fabs(a - Fp8E4M3ToF32(c));
    if (err < best_err || (err == best_err && (c & 1) == 0)) best = c, best_err = err;
  }
  return static_cast<uint8_t>(sign | best);
}

void DequantizeRow(DType t, const void* src, float* dst, size_t n) {
  switch (t) {
    case DType::kF8E4M3: {
      auto* s = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = Fp8E4M3ToF32(s[i]);
      return;
    }
    case DType::kF32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::kF16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = F16ToF32(s[i]);
      return;
    }
    case DType::kBF16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = BF16ToF32(s[i]);
      return;
    }
    case DType::kQ8_0: {
      auto* b = static_cast<const BlockQ8_0*>(src);
      for (size_t k = 0; k < n / 32; ++k) {
        float d = F16ToF32(b[k].d);
        for (int j = 0; j < 32; ++j) dst[k * 32 + j] = b[k].qs[j] * d;
      }
      return;
    }
    case DType::kQ4_0: {
      auto* b = static_cast<const BlockQ4_0*>(src);
      for (size_t k = 0; k < n / 32; ++k) {
        float d = F16ToF32(b[k].d);
        for (int j = 0; j < 16; ++j) {
          dst[k * 32 + j] = ((b[k].qs[j] & 0xf) - 8) * d;
          dst[k * 32 + j + 16] = ((b[k].qs[j] >> 4) - 8) * d;
        }
      }
      return;
    }
    case DType::kI32: {
      auto* s = static_cast<const int32_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    case DType::kI64: {
      int64_t v;
      for (size_t i = 0; i < n; ++i) {
        std::memcpy(&v, static_cast<const uint8_t*>(src) + i * 8, 8);  // safetensors data is not 8-byte aligned
        dst[i] = static_cast<float>(v);
      }
      return;
    }
    case DType::kQ4_K_X16:  // rows are interleaved in groups of 16: no row stands alone
    case DType::kQ6_K_X16:
    case DType::kQ8_0_X16:
    case DType::kMXFP4_X16:
      std::fprintf(stderr, "DequantizeRow: %s rows are not stored one by one (unpack the group first)\n", DTypeName(t));
      std::abort();
    default:
      DequantizeBlocks(t, src, dst, n);
      return;
  }
}

void QuantizeActivationsQ8_0(const float* x, BlockQ8_0* y, size_t n) {
  for (size_t k = 0; k < n / 32; ++k, x += 32) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    y[k].d = F32ToF16(amax / 127.f);
    const float id = amax != 0.f ? 127.f / amax : 0.f;
    for (int j = 0; j < 32; ++j) y[k].qs[j] = static_cast<int8_t>(NearestOrZero(x[j] * id));
  }
}

void QuantizeRow(DType t, const float* src, void* dst, size_t n) {
  switch (t) {
    case DType::kF8E4M3: {
      auto* d = static_cast<uint8_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = F32ToFp8E4M3(src[i]);
      return;
    }
    case DType::kF32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::kF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = F32ToF16(src[i]);
      return;
    }
    case DType::kBF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = F32ToBF16(src[i]);
      return;
    }
    case DType::kQ8_0: {
      auto* b = static_cast<BlockQ8_0*>(dst);
      for (size_t k = 0; k < n / 32; ++k) {
        const float* x = src + k * 32;
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
        float d = amax / 127.f, id = d ? 1.f / d : 0.f;
        b[k].d = F32ToF16(d);
        for (int j = 0; j < 32; ++j) b[k].qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
      }
      return;
    }
    case DType::kQ4_0: {
      auto* b = static_cast<BlockQ4_0*>(dst);
      for (size_t k = 0; k < n / 32; ++k) {
        const float* x = src + k * 32;
        float amax = 0, max = 0;
        for (int j = 0; j < 32; ++j)
          if (std::fabs(x[j]) > amax) {
            amax = std::fabs(x[j]);
            max = x[j];
          }
        float d = max / -8.f, id = d ? 1.f / d : 0.f;
        b[k].d = F32ToF16(d);
        for (int j = 0; j < 16; ++j) {
          int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
          int q1 = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
          b[k].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
      }
      return;
    }
    case DType::kQ4_1: return QuantizeRowQ4_1(src, static_cast<BlockQ4_1*>(dst), n);
    case DType::kQ5_0: return QuantizeRowQ5_0(src, static_cast<BlockQ5_0*>(dst), n);
    case DType::kQ5_1: return QuantizeRowQ5_1(src, static_cast<BlockQ5_1*>(dst), n);
    case DType::kQ2_K: return QuantizeRowQ2_K(src, static_cast<BlockQ2_K*>(dst), n);
    case DType::kQ3_K: return QuantizeRowQ3_K(src, static_cast<BlockQ3_K*>(dst), n);
    case DType::kQ4_K: return QuantizeRowQ4_K(src, static_cast<BlockQ4_K*>(dst), n);
    case DType::kQ5_K: return QuantizeRowQ5_K(src, static_cast<BlockQ5_K*>(dst), n);
    case DType::kQ6_K: return QuantizeRowQ6_K(src, static_cast<BlockQ6_K*>(dst), n);
    case DType::kMXFP4: return QuantizeRowMXFP4(src, static_cast<BlockMXFP4*>(dst), n);
    case DType::kI32: {
      auto* d = static_cast<int32_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = static_cast<int32_t>(src[i]);
      return;
    }
    default:
      std::fprintf(stderr, "QuantizeRow: no quantizer for %s\n", DTypeName(t));
      std::abort();
  }
}

bool CanQuantizeRow(DType t) {
  switch (t) {
    case DType::kF8E4M3:
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kMXFP4:
    case DType::kI32: return true;
    default: return false;
  }
}

namespace {
// Where byte `o` (0..143) of row r (0..15) of block b of a group lands in the kQ4_K_X16 layout (dtype.h), as a
// function of 16-byte pieces: piece 0 is the head (d, dmin, scales), pieces 1..8 the quants qs[16 (p - 1), +16).
size_t Q4KX16Offset(int64_t b, int r, int piece) {
  const int q = r / 4, i = r % 4;
  const size_t quad = static_cast<size_t>(b * 4 + q) * 576;
  if (piece == 0) return quad + 16 * i;
  const int h = (piece - 1) / 4, L = (piece - 1) % 4;
  return quad + 64 + 256 * h + 64 * L + 16 * i;
}

// Each whole 16-row group of a matrix (rows of row_bytes) rewritten in place: place(block, r, b, dst) writes block
// b of the group's row r (from a copy of the group) into the group's layout at dst.
template <class Place>
void RegroupInPlace(uint8_t* data, int64_t rows, int64_t nb, size_t block_bytes, Place place) {
  const size_t row_bytes = static_cast<size_t>(nb) * block_bytes, group = kQ4KX16Rows * row_bytes;
  std::vector<uint8_t> plain(group);
  for (int64_t g = 0; g + kQ4KX16Rows <= rows; g += kQ4KX16Rows) {
    uint8_t* dst = data + g * row_bytes;
    std::memcpy(plain.data(), dst, group);
    for (int r = 0; r < kQ4KX16Rows; ++r)
      for (int64_t b = 0; b < nb; ++b) place(plain.data() + r * row_bytes + b * block_bytes, r, b, dst);
  }
}
// One group back in row order: take(block, r, b) writes block b of row r (out: 16 rows of nb blocks).
template <class Take>
void UngroupInto(uint8_t* out, int64_t nb, size_t block_bytes, Take take) {
  for (int r = 0; r < kQ4KX16Rows; ++r)
    for (int64_t b = 0; b < nb; ++b) take(out + (r * nb + b) * block_bytes, r, b);
}
}  // namespace

void RepackQ4KX16(uint8_t* data, int64_t rows, int64_t k) {
  RegroupInPlace(data, rows, k / kQK_K, sizeof(BlockQ4_K), [](const uint8_t* blk, int r, int64_t b, uint8_t* dst) {
    for (int p = 0; p < 9; ++p) std::memcpy(dst + Q4KX16Offset(b, r, p), blk + 16 * p, 16);
  });
}

void UnpackQ4KX16(const uint8_t* group, int64_t k, uint8_t* out) {
  UngroupInto(out, k / kQK_K, sizeof(BlockQ4_K), [group](uint8_t* blk, int r, int64_t b) {
    for (int p = 0; p < 9; ++p) std::memcpy(blk + 16 * p, group + Q4KX16Offset(b, r, p), 16);
  });
}

namespace {
// kQ6_K_X16 (dtype.h): where 16-byte piece p of row r's block b lands in its group (pieces 0..7: ql, 8..11: qh,
// 12: the scales; the 2-byte d is placed apart).
size_t Q6KX16Offset(int64_t b, int r, int piece) {
  const int q = r / 4, i = r % 4;
  const size_t quad = static_cast<size_t>(b * 4 + q) * 832;
  if (piece == 12) return quad + 16 * i;
  if (piece < 8) return quad + 64 + 256 * (piece / 4) + 64 * (piece % 4) + 16 * i;
  const int p = piece - 8;
  return quad + 576 + 128 * (p / 2) + 64 * (p % 2) + 16 * i;
}
size_t Q6KX16DOffset(int64_t nb, int64_t b, int r) { return static_cast<size_t>(nb) * 4 * 832 + b * 32 + 2 * (4 * (r % 4) + r / 4); }
}  // namespace

void RepackQ6KX16(uint8_t* data, int64_t rows, int64_t k) {
  const int64_t nb = k / kQK_K;
  RegroupInPlace(data, rows, nb, sizeof(BlockQ6_K), [nb](const uint8_t* blk, int r, int64_t b, uint8_t* dst) {
    for (int p = 0; p < 13; ++p) std::memcpy(dst + Q6KX16Offset(b, r, p), blk + 16 * p, 16);
    std::memcpy(dst + Q6KX16DOffset(nb, b, r), blk + 208, 2);
  });
}

void UnpackQ6KX16(const uint8_t* group, int64_t k, uint8_t* out) {
  const int64_t nb = k / kQK_K;
  UngroupInto(out, nb, sizeof(BlockQ6_K), [group, nb](uint8_t* blk, int r, int64_t b) {
    for (int p = 0; p < 13; ++p) std::memcpy(blk + 16 * p, group + Q6KX16Offset(b, r, p), 16);
    std::memcpy(blk + 208, group + Q6KX16DOffset(nb, b, r), 2);
  });
}

namespace {
// kQ8_0_X16 (dtype.h): where 4-byte piece t (qs[4t, 4t + 4)) of row r's block b lands in its group, and its d.
size_t Q8X16Offset(int64_t b, int r, int t) { return static_cast<size_t>(b / 2) * 1088 + (b % 2) * 512 + 64 * t + 4 * r; }
size_t Q8X16DOffset(int64_t nb, int64_t b, int r) {
  return static_cast<size_t>(b / 2) * 1088 + (b / 2 * 2 + 1 < nb ? 1024 : 512) + (b % 2) * 32 + 2 * r;
}
// 4 quants between q8_0's signed bytes and the layout's unsigned ones (w + 128: the sign bit flipped).
void FlipSign4(uint8_t* dst, const uint8_t* src) {
  for (int i = 0; i < 4; ++i) dst[i] = static_cast<uint8_t>(src[i] ^ 0x80);
}
}  // namespace

void RepackQ8_0X16(uint8_t* data, int64_t rows, int64_t k) {
  const int64_t nb = k / 32;
  RegroupInPlace(data, rows, nb, sizeof(BlockQ8_0), [nb](const uint8_t* blk, int r, int64_t b, uint8_t* dst) {
    std::memcpy(dst + Q8X16DOffset(nb, b, r), blk, 2);
    for (int t = 0; t < 8; ++t) FlipSign4(dst + Q8X16Offset(b, r, t), blk + 2 + 4 * t);
  });
}

void UnpackQ8_0X16(const uint8_t* group, int64_t k, uint8_t* out) {
  const int64_t nb = k / 32;
  UngroupInto(out, nb, sizeof(BlockQ8_0), [group, nb](uint8_t* blk, int r, int64_t b) {
    std::memcpy(blk, group + Q8X16DOffset(nb, b, r), 2);
    for (int t = 0; t < 8; ++t) FlipSign4(blk + 2 + 4 * t, group + Q8X16Offset(b, r, t));
  });
}

namespace {
// kMXFP4_X16 (dtype.h): where 4-byte piece j (qs[4j, 4j + 4)) of row r's block b lands in its group, and its E8M0.
size_t MxX16Offset(int64_t b, int r, int j) { return static_cast<size_t>(b / 4) * 1088 + (b % 4) * 256 + 64 * j + 4 * r; }
size_t MxX16EOffset(int64_t nb, int64_t b, int r) {
  const int64_t run = nb - b / 4 * 4 < 4 ? nb - b / 4 * 4 : 4;
  return static_cast<size_t>(b / 4) * 1088 + run * 256 + (b % 4) * 16 + r;
}
}  // namespace

void RepackMXFP4X16(uint8_t* data, int64_t rows, int64_t k) {
  const int64_t nb = k / 32;
  RegroupInPlace(data, rows, nb, sizeof(BlockMXFP4), [nb](const uint8_t* blk, int r, int64_t b, uint8_t* dst) {
    dst[MxX16EOffset(nb, b, r)] = blk[0];
    for (int j = 0; j < 4; ++j) std::memcpy(dst + MxX16Offset(b, r, j), blk + 1 + 4 * j, 4);
  });
}

void UnpackMXFP4X16(const uint8_t* group, int64_t k, uint8_t* out) {
  const int64_t nb = k / 32;
  UngroupInto(out, nb, sizeof(BlockMXFP4), [group, nb](uint8_t* blk, int r, int64_t b) {
    blk[0] = group[MxX16EOffset(nb, b, r)];
    for (int j = 0; j < 4; ++j) std::memcpy(blk + 1 + 4 * j, group + MxX16Offset(b, r, j), 4);
  });
}

namespace {
constexpr RegroupedLayout kRegroupedLayouts[] = {
    {DType::kQ4_K, DType::kQ4_K_X16, RepackQ4KX16, UnpackQ4KX16},
    {DType::kQ6_K, DType::kQ6_K_X16, RepackQ6KX16, UnpackQ6KX16},
    {DType::kQ8_0, DType::kQ8_0_X16, RepackQ8_0X16, UnpackQ8_0X16},
    {DType::kMXFP4, DType::kMXFP4_X16, RepackMXFP4X16, UnpackMXFP4X16},
};
}  // namespace

const RegroupedLayout* RegroupedLayoutOf(DType t) {
  for (const RegroupedLayout& l : kRegroupedLayouts)
    if (l.grouped == t) return &l;
  return nullptr;
}

const RegroupedLayout* RegroupedLayoutFrom(DType plain) {
  for (const RegroupedLayout& l : kRegroupedLayouts)
    if (l.plain == plain) return &l;
  return nullptr;
}

}  // namespace deepinfer
