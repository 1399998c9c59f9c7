// The GGUF block types beyond q8_0/q4_0 (q4_1, q5_0, q5_1, iq4_nl, q2_K..q6_K, iq4_xs): block layouts,
// hand-decoded blocks, and the GEMM/GEMV kernels against a double-precision reference on every ISA (one the
// CPU lacks fails, isa_test_util.h), with batch and thread invariance. Bitwise parity of dequantization and
// activation quantization with ggml itself is in tests/ggml/quant_ggml_test.cc (it needs the library
// node-llama-cpp ships).
#include <algorithm>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "base/thread_pool.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/gemm.h"
#include "kernels/ops.h"
#include "isa_test_util.h"
#include "quant_test_util.h"
#include "test_util.h"

namespace deepinfer {
namespace {

using testing::AvailableIsas;
using testing::IsaGuard;
using testing::NewWeightTypes;
using testing::RandomBlocks;
using testing::RandomVec;

TEST(QuantTypesTest, BlockSizesAreGgmls) {
  // ggml-common.h: type sizes in bytes per block of QK elements.
  const struct { DType t; int elems, bytes; const char* name; } kWant[] = {
      {DType::kQ4_1, 32, 20, "q4_1"},   {DType::kQ5_0, 32, 22, "q5_0"},   {DType::kQ5_1, 32, 24, "q5_1"},
      {DType::kQ8_1, 32, 36, "q8_1"},   {DType::kIQ4_NL, 32, 18, "iq4_nl"}, {DType::kQ2_K, 256, 84, "q2_K"},
      {DType::kQ3_K, 256, 110, "q3_K"}, {DType::kQ4_K, 256, 144, "q4_K"}, {DType::kQ5_K, 256, 176, "q5_K"},
      {DType::kQ6_K, 256, 210, "q6_K"}, {DType::kQ8_K, 256, 292, "q8_K"}, {DType::kIQ4_XS, 256, 136, "iq4_xs"},
      {DType::kMXFP4, 32, 17, "mxfp4"}};
  for (const auto& w : kWant) {
    EXPECT_EQ(GetDTypeInfo(w.t).block_elems, w.elems) << w.name;
    EXPECT_EQ(GetDTypeInfo(w.t).block_bytes, w.bytes) << w.name;
    EXPECT_STREQ(DTypeName(w.t), w.name);
    EXPECT_EQ(DTypeFromName(w.name), w.t);
  }
}

// Hand-built blocks, decoded from the format's description (not from the code under test).
TEST(QuantTypesTest, Q4KHandBuiltBlock) {
  BlockQ4_K b{};
  b.d = F32ToF16(0.5f);
  b.dmin = F32ToF16(0.25f);
  // Sub-block 0: scale 3, min 2 (6 bits in scales[0], scales[4]); sub-block 5: scale 0x2a = 42, min 0x31 = 49,
  // split as low 4 bits in scales[9] (scale) / high nibble (min), high 2 bits in the top bits of scales[1] / [5].
  b.scales[0] = 3;
  b.scales[4] = 2;
  b.scales[9] = (0x31 & 0xF) << 4 | (0x2a & 0xF);
  b.scales[1] = (0x2a >> 4) << 6;
  b.scales[5] = (0x31 >> 4) << 6;
  b.qs[0] = 0x7b;   // element 0 = low nibble 11 (sub-block 0); element 32 = high nibble 7 (sub-block 1)
  b.qs[64 + 5] = 0xe0;  // element 2*64 + 32 + 5 = 165 (sub-block 5) = high nibble 14
  float y[256];
  DequantizeRow(DType::kQ4_K, &b, y, 256);
  EXPECT_EQ(y[0], 0.5f * 3 * 11 - 0.25f * 2);
  EXPECT_EQ(y[32], 0.f);  // sub-block 1: scale 0, min 0
  EXPECT_EQ(y[165], 0.5f * 42 * 14 - 0.25f * 49);
  EXPECT_EQ(y[160], -0.25f * 49);
}

TEST(QuantTypesTest, Q6KHandBuiltBlock) {
  BlockQ6_K b{};
  b.d = F32ToF16(0.125f);
  for (int i = 0; i < 16; ++i) b.scales[i] = static_cast<int8_t>(i - 8);
  // Element 64 + 17 (first half, third quarter, l = 17): low 4 bits = high nibble of ql[17], high 2 bits =
  // bits 4-5 of qh[17]; q = 0x3f - 32 = 31; scale index 17/16 + 4 = 5.
  b.ql[17] = 0xf0;
  b.qh[17] = 0x30;
  float y[256];
  DequantizeRow(DType::kQ6_K, &b, y, 256);
  EXPECT_EQ(y[81], 0.125f * (5 - 8) * 31);
  EXPECT_EQ(y[0], 0.125f * (0 - 8) * -32);  // all-zero bits: q = -32
}

// MXFP4 from the OCP microscaling spec (not from the code under test): e2m1 codes 0..7 are 0, 0.5, 1, 1.5, 2, 3,
// 4, 6 (bit 3 the sign), times the block scale 2^(e - 127).
TEST(QuantTypesTest, MXFP4HandBuiltBlock) {
  BlockMXFP4 b{};
  b.e = 127 + 3;      // scale 8
  b.qs[0] = 0xf5;     // element 0: code 5 = 3 -> 24; element 16: code 15 = -6 -> -48
  b.qs[7] = 0x9a;     // element 7: code 10 = -1 -> -8; element 23: code 9 = -0.5 -> -4
  float y[32];
  DequantizeRow(DType::kMXFP4, &b, y, 32);
  EXPECT_EQ(y[0], 24.f);
  EXPECT_EQ(y[16], -48.f);
  EXPECT_EQ(y[7], -8.f);
  EXPECT_EQ(y[23], -4.f);
  EXPECT_EQ(y[1], 0.f);
  b.e = 0;            // scale 2^-127, a subnormal: code 1 -> 2^-128
  b.qs[1] = 0x01;
  DequantizeRow(DType::kMXFP4, &b, y, 32);
  EXPECT_EQ(y[1], std::ldexp(1.f, -128));
}

// Reference: W dequantized, x quantized to the weight type's vec_dot_type and dequantized (so the reference sees
// exactly the values the kernel multiplies), products summed in double. Also returns sum |w x| per output, the
// scale of the kernel's f32 rounding.
void Reference(DType t, const std::vector<uint8_t>& wb, int64_t n, int64_t k, const std::vector<float>& x, int m,
               std::vector<double>* y, std::vector<double>* mag) {
  std::vector<float> w(n * k), xd(x.size());
  for (int64_t r = 0; r < n; ++r) DequantizeRow(t, wb.data() + r * DTypeBytes(t, k), w.data() + r * k, k);
  const DType at = ActivationDotType(t);
  std::vector<uint8_t> xq(DTypeBytes(at, x.size()));
  if (at == DType::kQ8_K) QuantizeActivationsQ8_K(x.data(), reinterpret_cast<BlockQ8_K*>(xq.data()), x.size());
  else if (at == DType::kQ8_1) QuantizeActivationsQ8_1(x.data(), reinterpret_cast<BlockQ8_1*>(xq.data()), x.size());
  else QuantizeActivationsQ8_0(x.data(), reinterpret_cast<BlockQ8_0*>(xq.data()), x.size());
  DequantizeRow(at, xq.data(), xd.data(), x.size());
  y->assign(static_cast<size_t>(m) * n, 0);
  mag->assign(static_cast<size_t>(m) * n, 0);
  for (int i = 0; i < m; ++i)
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t j = 0; j < k; ++j) {
        const double p = static_cast<double>(xd[i * k + j]) * w[r * k + j];
        (*y)[i * n + r] += p;
        (*mag)[i * n + r] += std::fabs(p);
      }
      // q4_1/q5_1 x q8_1: the format's product takes sum_j m_w * x_j from the activation block's stored
      // s = f16(d_x * sum q_x) (ggml's vec_dot), not from the dequantized x: m_w * (s - d_x * sum q_x) per block.
      if (at == DType::kQ8_1)
        for (int64_t b = 0; b < k / 32; ++b) {
          const auto& xb = reinterpret_cast<const BlockQ8_1*>(xq.data())[i * (k / 32) + b];
          uint16_t mh;
          std::memcpy(&mh, wb.data() + r * DTypeBytes(t, k) + b * GetDTypeInfo(t).block_bytes + 2, 2);
          double sum_q = 0;
          for (int j = 0; j < 32; ++j) sum_q += xb.qs[j];
          (*y)[i * n + r] += static_cast<double>(F16ToF32(mh)) * (F16ToF32(xb.s) - static_cast<double>(F16ToF32(xb.d)) * sum_q);
        }
    }
}

class QuantGemmTest : public ::testing::TestWithParam<DType> {};

// Random weight blocks for the GEMM tests. q8_0 quants of -128 become -127: ggml's quantizer never writes
// -128 (it rounds x / (amax / 127)), and the sign trick of the AVX2-style kernels (ggml's own, and this
// project's AVX-512 tiles without VNNI) cannot negate it; every other byte is kept.
std::vector<uint8_t> GemmBlocks(DType t, size_t n, uint32_t seed) {
  auto b = RandomBlocks(t, n, seed, true);
  if (t == DType::kQ8_0)
    for (size_t i = 0; i < n; ++i)
      for (int j = 0; j < 32; ++j) {
        int8_t& q = reinterpret_cast<BlockQ8_0*>(b.data())[i].qs[j];
        if (q == -128) q = -127;
      }
  return b;
}

// Rows not a multiple of any tile (1, 5, 17, 33), K of 1 and 3 blocks (k-quants: 256, 768; legacy: 32, 224),
// m = 1, 3, 17, 64. Tolerance: |y - ref| <= 1e-5 * sum |w x| + 1e-30. The kernel's integer sums are exact; what
// remains is f32 rounding of the per-block scale products and of the running sum over at most 7 blocks (a few
// ulps of the magnitude).
TEST_P(QuantGemmTest, MatchesDoubleReferenceOnEveryIsa) {
  IsaGuard guard;
  const DType t = GetParam();
  const int blk = GetDTypeInfo(t).block_elems;
  for (int64_t n : {1, 5, 17, 33})
    for (int64_t k : {int64_t{blk}, int64_t{blk} * (blk == 32 ? 7 : 3)})
      for (int m : {1, 3, 17, 64}) {
        const auto wb = GemmBlocks(t, static_cast<size_t>(n * k / blk), static_cast<uint32_t>(n * 131 + k + m));
        const auto x = RandomVec(static_cast<size_t>(m) * k, static_cast<uint32_t>(m * 7 + k));
        std::vector<double> ref, mag;
        Reference(t, wb, n, k, x, m, &ref, &mag);
        TensorView w{t, {n, k}, wb.data(), wb.size()};
        for (Isa isa : AvailableIsas()) {
          SetIsa(isa);
          std::vector<float> y(static_cast<size_t>(m) * n, NAN);
          MatMulSlice(w, x.data(), m, y.data(), static_cast<int>(n), 0, n);
          for (size_t i = 0; i < y.size(); ++i)
            ASSERT_NEAR(y[i], ref[i], 1e-5 * mag[i] + 1e-30)
                << DTypeName(t) << " " << IsaName(isa) << " n=" << n << " k=" << k << " m=" << m << " i=" << i;
        }
      }
}

// A row's output is bitwise the same whatever m (one x row or 64), whichever slice of weight rows computes it,
// and whatever the thread count.
TEST_P(QuantGemmTest, BatchSliceAndThreadInvariantBitwise) {
  IsaGuard guard;
  const DType t = GetParam();
  const int blk = GetDTypeInfo(t).block_elems;
  const int64_t n = 37, k = blk == 32 ? 160 : 512;
  const int m = 17;
  const auto wb = GemmBlocks(t, static_cast<size_t>(n * k / blk), 99);
  const auto x = RandomVec(static_cast<size_t>(m) * k, 100);
  TensorView w{t, {n, k}, wb.data(), wb.size()};
  for (Isa isa : AvailableIsas()) {
    SetIsa(isa);
    SetComputeThreads(1);
    std::vector<float> all(static_cast<size_t>(m) * n);
    MatMul(w, x.data(), m, all.data());
    SetComputeThreads(2);
    std::vector<float> two(all.size());
    MatMul(w, x.data(), m, two.data());
    SetComputeThreads(0);
    EXPECT_EQ(all, two) << DTypeName(t) << " " << IsaName(isa);
    for (int i = 0; i < m; ++i) {
      std::vector<float> one(n);
      MatMul(w, x.data() + i * k, 1, one.data());
      ASSERT_EQ(0, std::memcmp(one.data(), all.data() + i * n, n * 4)) << DTypeName(t) << " " << IsaName(isa) << " row " << i;
      std::vector<float> part(n, NAN);  // rows [5, 20) alone
      MatMulSlice(w, x.data() + i * k, 1, part.data(), static_cast<int>(n), 5, 20);
      ASSERT_EQ(0, std::memcmp(part.data() + 5, all.data() + i * n + 5, 15 * 4)) << DTypeName(t) << " " << IsaName(isa);
    }
  }
}

// The k-quant integer sums are exact on every ISA (AVX-512 takes 64 quants a step, offsetting signed types to
// unsigned bytes and taking the offset back through x's block sums; AVX2 uses the sign trick 32 at a time), and
// the f32 steps per block are the same expressions, so AVX-512 and AVX2 give the same bits.
TEST_P(QuantGemmTest, Avx512EqualsAvx2Bitwise) {
  IsaGuard guard;
  DEEPINFER_REQUIRE_CPU(testing::CpuFeature::kAvx512, "comparing AVX-512 with AVX2 bitwise");
  const DType t = GetParam();
  const int blk = GetDTypeInfo(t).block_elems;
  // 77 rows: on two threads, slices of 48 and 29 rows, so the VNNI panels run in pairs, alone, and next to a
  // 13-row remainder on the decoded path.
  const int64_t n = 77, k = blk == 32 ? 224 : 768;
  const auto wb = GemmBlocks(t, static_cast<size_t>(n * k / blk), 4242);
  // m = 1 and 3 take the direct (no decode pass) paths of q4_K / q6_K; m = 9 and 17 the decoded one, or the
  // k-quants' VNNI panels (x tiles of 4 and 1 rows) where the CPU has AVX512-VNNI.
  for (int m : {1, 3, 9, 17}) {
    auto x = RandomVec(static_cast<size_t>(m) * k, 4343);
    for (size_t i = 0; i < static_cast<size_t>(k); ++i) x[i] = i % 2 ? 1e3f : -1e3f;  // row 0: extreme bytes
    TensorView w{t, {n, k}, wb.data(), wb.size()};
    std::vector<float> a(static_cast<size_t>(m) * n), b(a.size());
    SetIsa(Isa::kAvx2);
    MatMul(w, x.data(), m, a.data());
    SetIsa(Isa::kAvx512);
    MatMul(w, x.data(), m, b.data());
    ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << DTypeName(t) << " m " << m;
    // and the generic AVX-512 kernels (the VNNI panels off)
    if (testing::CpuRuns(testing::CpuFeature::kAvx512Vnni, std::string("comparing ") + DTypeName(t) + "'s VNNI panels with its generic AVX-512 kernels")) {
      const bool was = SetVnni(false);
      MatMul(w, x.data(), m, b.data());
      SetVnni(was);
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << DTypeName(t) << " m " << m << " without VNNI";
    }
  }
}

// Decode (m = 1) at K of many blocks: the 16-row path (gemv_rows16_avx512.inc) at 9-10 units per row, and past 32
// units, where it folds four units per row first (a partial last group included): each x row alone must give
// bitwise what the AVX2 unit computes and what the same row gives inside a batch of 5 (panels on VNNI). 35 rows:
// two 16-row groups and a 3-row remainder.
TEST_P(QuantGemmTest, LongRowsDecodeEqualsBatchAndAvx2Bitwise) {
  IsaGuard guard;
  DEEPINFER_REQUIRE_CPU(testing::CpuFeature::kAvx512, "comparing AVX-512 with AVX2 bitwise");
  const DType t = GetParam();
  const int blk = GetDTypeInfo(t).block_elems;
  for (int64_t k : {int64_t{blk} * (blk == 32 ? 19 : 9), int64_t{blk} * (blk == 32 ? 67 : 33)}) {
    const int64_t n = 35;  // q8_0: 19 / 67 blocks = 10 / 34 units (two blocks each); k-quants: 9 / 33 units
    const int m = 5;
    const auto wb = GemmBlocks(t, static_cast<size_t>(n * k / blk), 777);
    auto x = RandomVec(static_cast<size_t>(m) * k, 778);
    for (int64_t i = 0; i < k; ++i) x[k + i] = i % 3 ? 1e3f : -1e3f;  // row 1: extreme quantized bytes
    TensorView w{t, {n, k}, wb.data(), wb.size()};
    SetIsa(Isa::kAvx2);
    std::vector<float> ref(static_cast<size_t>(m) * n);
    MatMul(w, x.data(), m, ref.data());
    SetIsa(Isa::kAvx512);
    std::vector<float> batch(ref.size());
    MatMul(w, x.data(), m, batch.data());
    ASSERT_EQ(0, std::memcmp(ref.data(), batch.data(), ref.size() * 4)) << DTypeName(t) << " batch of " << m;
    for (int i = 0; i < m; ++i) {
      std::vector<float> one(n);
      MatMul(w, x.data() + i * k, 1, one.data());
      ASSERT_EQ(0, std::memcmp(one.data(), ref.data() + i * n, n * 4)) << DTypeName(t) << " x row " << i << " alone, k " << k;
    }
  }
}

// Products share their rows out among the threads as they go (each owns a range and claims half of what is left
// from its front; a thread done takes pieces of ~64 KiB from the back of the others': gemm.cc): every row must be
// written with the bits of the single-threaded slice, at batch 1 and 3 (decode paths) and 17 (panels), with 1 to 4
// threads on this machine's cores (so that some run late and lose rows to the others), for row counts around the
// 16-row groups (fewer groups than threads included) and for ~2,000 rows of K = 2,048 (pieces of 1-3 groups, so
// owners claim several times and thieves take several pieces), alone and in one MatMulMany. A row computed twice
// gives the same bits and is not detected here.
TEST_P(QuantGemmTest, RowsSharedAcrossThreadsBitwise) {
  const DType t = GetParam();
  const int blk = GetDTypeInfo(t).block_elems;
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 256}, {10, 256}, {17, 256}, {40, 256}, {257, 256},
                                                           {1100, 256}, {2003, 2048}};
  std::vector<std::vector<uint8_t>> wbs;
  std::vector<TensorView> ws;
  for (auto [n, k] : shapes) wbs.push_back(GemmBlocks(t, static_cast<size_t>(n * k / blk), static_cast<uint32_t>(n + 5)));
  for (size_t i = 0; i < shapes.size(); ++i)
    ws.push_back(TensorView{t, {shapes[i].first, shapes[i].second}, wbs[i].data(), wbs[i].size()});
  for (int m : {1, 3, 17}) {
    std::vector<std::vector<float>> xs, ref(ws.size());
    for (size_t i = 0; i < ws.size(); ++i) {
      xs.push_back(RandomVec(static_cast<size_t>(m * shapes[i].second), static_cast<uint32_t>(m + 11 + i)));
      ref[i].assign(static_cast<size_t>(m * shapes[i].first), NAN);
      MatMulSlice(ws[i], xs[i].data(), m, ref[i].data(), static_cast<int>(shapes[i].first), 0, shapes[i].first);
    }
    for (int threads : {1, 2, 3, 4}) {
      SetComputeThreads(threads);
      for (int rep = 0; rep < 2; ++rep) {
        std::vector<std::vector<float>> y(ws.size());
        std::vector<MatMulJob> jobs;
        for (size_t i = 0; i < ws.size(); ++i) {
          y[i].assign(ref[i].size(), NAN);
          if (i % 2) MatMul(ws[i], xs[i].data(), m, y[i].data());  // alone, and the others in one MatMulMany
          else jobs.push_back(MatMulJob{&ws[i], xs[i].data(), m, y[i].data()});
        }
        MatMulMany(jobs.data(), static_cast<int>(jobs.size()));
        for (size_t i = 0; i < ws.size(); ++i)
          ASSERT_EQ(0, std::memcmp(ref[i].data(), y[i].data(), ref[i].size() * 4))
              << DTypeName(t) << " rows " << shapes[i].first << " m " << m << " threads " << threads;
      }
    }
    SetComputeThreads(0);
  }
}

// kQ4_K_X16, kQ6_K_X16, kQ8_0_X16 and kMXFP4_X16 (dtype.h), what the loader makes of q4_K / q6_K / q8_0 / MXFP4
// matrices where the kernels have kernels for them (Ops::RegroupForMatMul; AVX-512 with VNNI): the layout holds the plain type's bytes
// (q8_0's quants with the sign bit flipped; a group back in row order is the original), and every product on it is
// bitwise the plain product on the same ISA: k-quant batches of up to 20 / 16 on the layout kernels (Q4KX16Group,
// Q6KX16Group; 2-4 x rows per pass: the RX kernels) where the table has them, larger ones (33, 40, 72) on the panels;
// q8_0 and MXFP4 every batch on the stored panels (X16SliceVnni; 72: panels built from the groups); without them the plain kernels after putting groups back
// in row order (AVX-512: UnpackX16); ranges that cut a group, the rows past the last whole group, 1-3 threads, K of
// 3 and 33 blocks (q8_0 / MXFP4 also 24: a count the pairs / runs of 4 divide), x rows with extreme quantized bytes (the kernels' int16 pair sums
// at their bounds), and on AVX-512 with VNNI off.
class RegroupedTest : public ::testing::TestWithParam<DType> {};

struct RegroupedOps {
  DType grouped;
  void (*repack)(uint8_t* data, int64_t rows, int64_t k);
  void (*unpack)(const uint8_t* group, int64_t k, uint8_t* out);
};
RegroupedOps RegroupedOf(DType t) {
  if (t == DType::kQ4_K) return {DType::kQ4_K_X16, RepackQ4KX16, UnpackQ4KX16};
  if (t == DType::kQ6_K) return {DType::kQ6_K_X16, RepackQ6KX16, UnpackQ6KX16};
  if (t == DType::kQ8_0) return {DType::kQ8_0_X16, RepackQ8_0X16, UnpackQ8_0X16};
  return {DType::kMXFP4_X16, RepackMXFP4X16, UnpackMXFP4X16};
}

TEST_P(RegroupedTest, RegroupedEqualsPlainBitwise) {
  IsaGuard guard;
  const DType t = GetParam();
  const RegroupedOps ops = RegroupedOf(t);
  const DType rt = ops.grouped;
  const int64_t n = 53, blk = GetDTypeInfo(t).block_elems;  // three 16-row groups and 5 rows past them
  const std::vector<int64_t> ks = blk == 32 ? std::vector<int64_t>{96, 768, 33 * 32} : std::vector<int64_t>{768, 33 * 256};
  for (int64_t k : ks) {
    const size_t row_bytes = DTypeBytes(t, static_cast<size_t>(k));
    const auto wb = GemmBlocks(t, static_cast<size_t>(n * k / blk), static_cast<uint32_t>(k + 17));
    std::vector<uint8_t> rb = wb;
    ops.repack(rb.data(), n, k);
    ASSERT_NE(0, std::memcmp(rb.data(), wb.data(), 16 * row_bytes)) << "the first group was not regrouped";
    ASSERT_EQ(0, std::memcmp(rb.data() + 48 * row_bytes, wb.data() + 48 * row_bytes, 5 * row_bytes)) << "the rows past the groups moved";
    std::vector<uint8_t> back(16 * row_bytes);
    for (int g = 0; g < 3; ++g) {
      ops.unpack(rb.data() + g * 16 * row_bytes, k, back.data());
      ASSERT_EQ(0, std::memcmp(back.data(), wb.data() + g * 16 * row_bytes, back.size())) << "group " << g;
    }
    const TensorView plain{t, {n, k}, wb.data(), wb.size()};
    const TensorView grouped{rt, {n, k}, rb.data(), rb.size()};
    // Rows looked up (a regrouped embedding): the plain row's values, in a group or past the groups.
    for (int64_t r : {0, 5, 17, 47, 48, 52}) {
      std::vector<float> a(static_cast<size_t>(k)), b(a.size());
      DequantizeRow(t, plain.row(r), a.data(), a.size());
      OpsFor(Device::kCpu).MatrixRow(grouped, r, b.data());
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << DTypeName(rt) << " row " << r;
    }
    for (Isa isa : AvailableIsas()) {
      SetIsa(isa);
      for (int vnni = 1; vnni >= 0; --vnni) {
        if (!vnni && isa != Isa::kAvx512) continue;
        const bool was = SetVnni(vnni != 0);
        for (int m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 33, 40, 72}) {
          auto x = RandomVec(static_cast<size_t>(m) * k, static_cast<uint32_t>(m * 7 + k));
          for (int64_t i = 0; i < k; ++i) x[i] = i % 3 ? 1e3f : -1e3f;  // row 0: extreme quantized bytes
          if (m > 1)
            for (int64_t i = 0; i < k; ++i) x[k + i] = i % 5 == 1 ? -1e3f : 1e3f;
          std::vector<float> want(static_cast<size_t>(m) * n), got(want.size(), NAN);
          MatMul(plain, x.data(), m, want.data());
          for (int threads : {1, 2, 3}) {
            SetComputeThreads(threads);
            std::fill(got.begin(), got.end(), NAN);
            MatMul(grouped, x.data(), m, got.data());
            ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4)) << DTypeName(rt) << " " << IsaName(isa)
                << (vnni ? "" : " without VNNI") << " k " << k << " m " << m << " threads " << threads;
          }
          SetComputeThreads(0);
          for (auto [r0, r1] : {std::pair<int64_t, int64_t>{5, 40}, {16, 48}, {32, 53}, {47, 50}}) {
            std::fill(got.begin(), got.end(), NAN);
            MatMulSlice(grouped, x.data(), m, got.data(), static_cast<int>(n), r0, r1);
            for (int i = 0; i < m; ++i)
              ASSERT_EQ(0, std::memcmp(want.data() + i * n + r0, got.data() + i * n + r0, (r1 - r0) * 4))
                  << DTypeName(rt) << " " << IsaName(isa) << " k " << k << " m " << m << " rows [" << r0 << ", " << r1 << ")";
          }
        }
        SetVnni(was);
      }
    }
  }
}
INSTANTIATE_TEST_SUITE_P(Regrouped, RegroupedTest, ::testing::Values(DType::kQ4_K, DType::kQ6_K, DType::kQ8_0, DType::kMXFP4),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(DTypeName(i.param)); });

// Each ISA's activation quantizers (the table entries MatMul uses) give the reference loops' blocks bitwise
// (tests/ggml checks those, and the table entries, against ggml on random rows), also on what random rows miss:
// NaN and infinite elements, the largest magnitude twice with both signs (q8_K takes the first one's sign), exact
// ties, zero and all-NaN blocks, scales that are f16 subnormals or overflow f16.
TEST(QuantTypesTest, TableActivationQuantizersEqualReferenceBitwise) {
  IsaGuard guard;
  const size_t n = 10 * kQK_K;
  std::vector<float> x = RandomVec(n, 4242);
  float* b = x.data();
  for (int j = 0; j < kQK_K; ++j) b[kQK_K + j] = 0;                      // block 1: zeros
  b[2 * kQK_K + 5] = NAN;                                                // block 2: a NaN, an inf
  b[2 * kQK_K + 100] = -INFINITY;
  b[3 * kQK_K + 10] = 3, b[3 * kQK_K + 200] = -3;                        // block 3: +max first
  b[4 * kQK_K + 10] = -3, b[4 * kQK_K + 200] = 3;                        // block 4: -max first
  for (int j = 0; j < kQK_K; ++j) b[5 * kQK_K + j] = (j % 9 - 4) * 0.5f;  // block 5: exact ties,
  b[5 * kQK_K] = -127;                                                   // scale 1 (q8_K, first q8_0 block)
  for (int j = 0; j < kQK_K; ++j) b[6 * kQK_K + j] *= 1e-3f;             // block 6: subnormal f16 q8_0 scales
  for (int j = 0; j < kQK_K; ++j) b[7 * kQK_K + j] = NAN;                // block 7: all NaN
  for (int j = 0; j < kQK_K; ++j) b[8 * kQK_K + j] *= 1e10f;             // block 8: q8_0 scale past f16
  b[9 * kQK_K + 7] = NAN;                                                // block 9: NaN first, then a max
  std::vector<BlockQ8_0> ref0(n / 32), got0(n / 32);
  std::vector<BlockQ8_K> refk(n / kQK_K), gotk(n / kQK_K);
  QuantizeActivationsQ8_0(x.data(), ref0.data(), n);
  QuantizeActivationsQ8_K(x.data(), refk.data(), n);
  for (Isa isa : AvailableIsas()) {
    SetIsa(isa);
    Kernels().quantize_q8_0(x.data(), got0.data(), n);
    Kernels().quantize_q8_k(x.data(), gotk.data(), n);
    for (size_t i = 0; i < ref0.size(); ++i)
      ASSERT_EQ(0, std::memcmp(&ref0[i], &got0[i], sizeof(BlockQ8_0))) << IsaName(isa) << " q8_0 block " << i;
    for (size_t i = 0; i < refk.size(); ++i)
      ASSERT_EQ(0, std::memcmp(&refk[i], &gotk[i], sizeof(BlockQ8_K))) << IsaName(isa) << " q8_K block " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(AllNewTypes, QuantGemmTest, ::testing::ValuesIn(NewWeightTypes()),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });
// q8_0 and q4_0: the 16-row VNNI panels (m >= 4) and the one-row tiles share the AVX2 unit's order (an exact
// integer dot per block, then one fma per block), so the same bitwise checks apply.
INSTANTIATE_TEST_SUITE_P(LegacyTypes, QuantGemmTest, ::testing::Values(DType::kQ8_0, DType::kQ4_0),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

}  // namespace
}  // namespace deepinfer
