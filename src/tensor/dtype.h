// Element types of weights and activations, their storage layout (blocks for quantized types) and conversions.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace deepinfer {

// New types are appended before kInvalid: the values index GetDTypeInfo's table.
enum class DType : uint8_t {
  kF32, kF16, kBF16, kQ8_0, kQ4_0, kI32, kF8E4M3,
  // ggml's k-quants (256-element super-blocks) and the other GGUF block types users download.
  kQ4_1, kQ5_0, kQ5_1, kQ8_1, kQ2_K, kQ3_K, kQ4_K, kQ5_K, kQ6_K, kQ8_K, kIQ4_NL, kIQ4_XS,
  // OCP microscaling FP4 (gpt-oss and DeepSeek-V4 experts): 32 e2m1 values sharing a power-of-two scale.
  kMXFP4,
  // Raw bytes (safetensors U8): HF gpt-oss's MXFP4 expert blocks and scales, repacked by the loader.
  kU8,
  // q4_K rows regrouped in memory for the AVX512-VNNI decode kernel (RepackQ4KX16, quant_blocks.h): made by the
  // loader from q4_K matrices it copied, never read from or written to a file. Same bytes per row as q4_K.
  kQ4_K_X16,
  // q6_K likewise (RepackQ6KX16).
  kQ6_K_X16,
  // q8_0 likewise (RepackQ8_0X16).
  kQ8_0_X16,
  // MXFP4 likewise (RepackMXFP4X16).
  kMXFP4_X16,
  // 64-bit integers (safetensors I64): index tables such as DeepSeek-V4's tid2eid, narrowed by the loader.
  kI64,
  kInvalid
};

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

// The remaining ggml block layouts (ggml-common.h), field for field. f16 fields are stored as uint16_t.
struct BlockQ4_1 {
  uint16_t d, m;    // value = q * d + m, q in [0, 15]; nibbles as BlockQ4_0
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];    // bit j: 5th bit of element j
  uint8_t qs[16];   // low 4 bits, nibbles as BlockQ4_0; value = (q - 16) * d
};
struct BlockQ5_1 {
  uint16_t d, m;    // value = q * d + m
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ8_1 {  // activations for q4_1/q5_1 weights
  uint16_t d, s;    // s = d * sum(qs)
  int8_t qs[32];
};
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[16];   // 4-bit indices into kIQ4NLValues, nibbles as BlockQ4_0; value = d * kIQ4NLValues[q]
};
constexpr int kQK_K = 256;  // elements per k-quant super-block
struct BlockQ2_K {
  uint8_t scales[16];  // per 16 elements: low nibble scale, high nibble min
  uint8_t qs[64];      // 2-bit quants
  uint16_t d, dmin;
};
struct BlockQ3_K {
  uint8_t hmask[32];   // high bit (set: q, clear: q - 4)
  uint8_t qs[64];      // low 2 bits
  uint8_t scales[12];  // 16 6-bit scales, offset by 32
  uint16_t d;
};
struct BlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];  // 8 6-bit scales and 8 6-bit mins, one pair per 32 elements
  uint8_t qs[128];
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
struct BlockQ6_K {
  uint8_t ql[128];     // low 4 bits
  uint8_t qh[64];      // high 2 bits
  int8_t scales[16];   // per 16 elements
  uint16_t d;          // value = d * scale * (q - 32)
};
struct BlockQ8_K {     // activations for k-quant weights
  float d;
  int8_t qs[256];
  int16_t bsums[16];   // sums of qs per 16 elements
};
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;   // 2 high bits of each 32-element block's 6-bit scale (offset by 32)
  uint8_t scales_l[4]; // 4 low bits
  uint8_t qs[128];     // 4-bit indices into kIQ4NLValues
};
// MXFP4 (ggml's block_mxfp4, GGUF type 39): value = 2^(e - 128) * kMXFP4Values[q], the e2m1 grid doubled (so the
// scale is halved), nibbles laid out as BlockQ4_0's (low nibbles elements 0..15, high nibbles 16..31).
struct BlockMXFP4 {
  uint8_t e;        // E8M0 shared exponent
  uint8_t qs[16];
};
static_assert(sizeof(BlockMXFP4) == 17);
// The e2m1 values doubled (ggml's kvalues_mxfp4): 0, 1, 2, 3, 4, 6, 8, 12 and their negatives.
extern const int8_t kMXFP4Values[16];
// An E8M0 exponent byte as 2^(e - 128), half its value, matching the doubled grid (ggml's
// GGML_E8M0_TO_FP32_HALF: e = 0 and 1 give the subnormals 2^-128 and 2^-127).
inline float E8M0HalfToF32(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
static_assert(sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24 &&
              sizeof(BlockQ8_1) == 36 && sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292 &&
              sizeof(BlockIQ4_XS) == 136);
// The non-linear 4-bit grid of iq4_nl / iq4_xs (ggml's kvalues_iq4nl).
extern const int8_t kIQ4NLValues[16];
// The 6-bit (scale, min) pair j of a q4_K / q5_K super-block (ggml's get_scale_min_k4).
// Not inline: the ISA kernel units call it too (isa_kernels.h).
void KQuantScaleMin(int j, const uint8_t* q, uint8_t* sc, uint8_t* mn);
// The 16 scales of a q3_K super-block, each still offset by 32.
void Q3KScales(const uint8_t* packed, int8_t* out16);

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
// q8_1 (n a multiple of 32) and q8_K (n a multiple of 256) activations, as ggml's CPU backend quantizes them for
// q4_1/q5_1 and k-quant / iq4_xs weights.
void QuantizeActivationsQ8_1(const float* x, BlockQ8_1* y, size_t n);
void QuantizeActivationsQ8_K(const float* x, BlockQ8_K* y, size_t n);
// The activation type a weight type's products use (ggml's vec_dot_type): q8_0, q8_1, q8_K, or kInvalid for
// types multiplied in floating point.
DType ActivationDotType(DType weight);

// kQ4_K_X16: a q4_K matrix whose rows, in groups of 16 (rows past the last whole group stay q4_K rows), are
// regrouped so that the AVX512-VNNI decode kernel reads each group front to back: for every block b, for every
// quad q of rows (4q .. 4q + 3), 576 bytes: the 4 rows' first 16 bytes of block b (d, dmin, the 12 scale bytes),
// then for h = 0, 1 and L = 0..3 the 4 rows' quant bytes qs[64h + 16L, 64h + 16L + 16). The bytes are q4_K's,
// only their order differs (16 x 144 bytes per block of a group), so a group occupies the same 16 rows of memory.
constexpr int kQ4KX16Rows = 16;
// Rewrites the whole groups of a contiguous q4_K matrix (rows of k columns) in place as kQ4_K_X16.
void RepackQ4KX16(uint8_t* data, int64_t rows, int64_t k);
// One kQ4_K_X16 group (16 rows of k columns) as 16 q4_K rows, one after another, into out.
void UnpackQ4KX16(const uint8_t* group, int64_t k, uint8_t* out);
// kQ6_K_X16: a q6_K matrix regrouped likewise: per group of 16 rows, for every block b and quad q, 832 bytes: the
// 4 rows' 16 scales, then for n = 0, 1 and L = 0..3 their ql[64n + 16L, +16), then for n = 0, 1 and P = 0, 1
// their qh[32n + 16P, +16); after the last block, the group's d values, 16 per block, row 4q + L at position
// 4L + q (the order the kernel's lanes hold the rows in).
void RepackQ6KX16(uint8_t* data, int64_t rows, int64_t k);
void UnpackQ6KX16(const uint8_t* group, int64_t k, uint8_t* out);
// kQ8_0_X16: a q8_0 matrix regrouped likewise, into the 16-row panels the AVX512-VNNI q8_0 kernels multiply (lane r:
// row r): per group, for each pair of blocks (2u, 2u + 1), 1,088 bytes: for each block of the pair, for t = 0..7
// and row r, the row's quants qs[4t, 4t + 4) as unsigned bytes (w + 128, the operand vpdpbusd takes unsigned), then
// the 16 rows' d of the first block and of the second (a last odd block: 512 + 32 bytes). 34 bytes a block and row,
// as q8_0; 64-byte loads stay aligned.
void RepackQ8_0X16(uint8_t* data, int64_t rows, int64_t k);
void UnpackQ8_0X16(const uint8_t* group, int64_t k, uint8_t* out);
// kMXFP4_X16: an MXFP4 matrix regrouped likewise: per group, for each run of 4 blocks (fewer at the end), 1,088
// bytes: for each block of the run, for j = 0..3 and row r, the row's nibble bytes qs[4j, 4j + 4); then for each
// block of the run the 16 rows' E8M0 bytes. 17 bytes a block and row, as MXFP4.
void RepackMXFP4X16(uint8_t* data, int64_t rows, int64_t k);
void UnpackMXFP4X16(const uint8_t* group, int64_t k, uint8_t* out);
// The regrouped layouts above in one table: each grouped type, the plain type it is made from, and the two
// conversions. What the kernels add per layout (which kernel multiplies it, up to which batch) they key by `grouped`
// (KernelTable::LayoutKernel, gemm.cc).
struct RegroupedLayout {
  DType plain, grouped;
  void (*repack)(uint8_t* data, int64_t rows, int64_t k);
  void (*unpack)(const uint8_t* group, int64_t k, uint8_t* out);
};
// The layout whose grouped type is t, or null.
const RegroupedLayout* RegroupedLayoutOf(DType t);
// The layout plain type t regroups into, or null.
const RegroupedLayout* RegroupedLayoutFrom(DType plain);
inline bool IsRegrouped(DType t) { return RegroupedLayoutOf(t) != nullptr; }
// Converts n f32 values to type t (n a multiple of the block size). Quantization matches ggml's reference.
// Only the types CanQuantizeRow accepts; other types abort (callers check first).
void QuantizeRow(DType t, const float* src, void* dst, size_t n);
bool CanQuantizeRow(DType t);

}  // namespace deepinfer
