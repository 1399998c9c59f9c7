// Element types of weights and activations, their storage layout (blocks for quantized types) and conversions.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace deepinfer {

enum class DType : uint8_t { kF32, kF16, kBF16, kQ8_0, kQ4_0, kI32, kF8E4M3, kInvalid };

struct DTypeInfo {
  const char* name;
  int block_elems;   // elements per block (1 for plain types)
  int block_bytes;   // bytes per block
};
const DTypeInfo& GetDTypeInfo(DType t);
inline const char* DTypeName(DType t) { return GetDTypeInfo(t).name; }
// Parses "f32", "bf16", "q8_0"...; returns kInvalid when unknown.
DType DTypeFromName(const std::string& name);
// Bytes used by n elements (n must be a multiple of the block size).
inline size_t DTypeBytes(DType t, size_t n) {
  const auto& i = GetDTypeInfo(t);
  return n / i.block_elems * i.block_bytes;
}

// Quantized block layouts, bit-compatible with GGUF/ggml.
struct BlockQ8_0 {
  uint16_t d;     // f16 scale
  int8_t qs[32];  // value = qs[i] * d
};
struct BlockQ4_0 {
  uint16_t d;        // f16 scale
  uint8_t qs[16];    // element j: low nibble of qs[j] (j < 16), high nibble of qs[j-16]; value = (q - 8) * d
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18);

inline float BF16ToF32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t F32ToBF16(float f) {  // round to nearest even; NaN stays NaN
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
float F16ToF32(uint16_t h);
// FP8 E4M3 (the "fn" variant DeepSeek ships: no infinities, 0x7f/0xff are NaN, max 448). Conversion to f32 is
// exact; from f32 rounds to nearest even and saturates to +-448.
float Fp8E4M3ToF32(uint8_t v);
uint8_t F32ToFp8E4M3(float f);
uint16_t F32ToF16(float f);

// Converts n elements of `src` (type t, n a multiple of the block size) to f32.
void DequantizeRow(DType t, const void* src, float* dst, size_t n);
// Quantizes activations to q8_0 blocks the way llama.cpp's x86 kernels do (scale 127/amax, round half to
// even), so quantized matmuls see the same integers as llama.cpp. n must be a multiple of 32.
void QuantizeActivationsQ8_0(const float* x, BlockQ8_0* y, size_t n);
// Converts n f32 values to type t (n a multiple of the block size). Quantization matches ggml's reference.
void QuantizeRow(DType t, const float* src, void* dst, size_t n);

}  // namespace deepinfer
