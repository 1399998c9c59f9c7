// Bitwise parity of deepinfer's block dequantization and activation quantization with ggml itself (the library
// node-llama-cpp ships, through its public API: ggml_get_type_traits()->to_float, and the CPU backend's
// from_float / vec_dot), and of its quantized dot products within a stated tolerance. A test binary of its own:
// it links that library, which unit_tests must not depend on.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/gemm.h"
#include "../unit/isa_test_util.h"
#include "../unit/quant_test_util.h"
#include "../unit/test_util.h"
#include "format/gguf.h"

// Exported by libggml-base but not in its public headers' type traits (q8_K has no to_float there).
extern "C" void dequantize_row_q8_K(const void* x, float* y, int64_t k);

namespace deepinfer {
namespace {

using testing::RandomBlocks;
using testing::RandomVec;

ggml_type Ggml(DType t) { return static_cast<ggml_type>(GgmlFromDType(t)); }

// The CPU backend linked is ggml's AVX2 ("haswell") build, the one llama.cpp loads on an AVX2 machine.
class GgmlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DEEPINFER_REQUIRE_CPU(testing::CpuFeature::kAvx2, "ggml's haswell CPU backend (the reference linked here)");
    static const bool initialized = (ggml_cpu_init(), true);
    (void)initialized;
  }
};

// Every block type deepinfer reads, on random blocks (any finite f16 scale, subnormals included; NaN/Inf scales
// are redrawn: they make the whole block NaN/Inf in both, and NaN does not compare bitwise).
TEST_F(GgmlTest, DequantizationIsBitwiseGgmls) {
  std::vector<DType> types = testing::NewWeightTypes();
  // q8_1 is left out: ggml has no to_float for it (it exists only as matmul activations).
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ8_K}) types.push_back(t);
  for (DType t : types) {
    for (bool moderate : {false, true}) {
      const size_t nb = 64;
      const auto blocks = RandomBlocks(t, nb, 1234 + static_cast<int>(t) + moderate, moderate);
      const size_t n = nb * GetDTypeInfo(t).block_elems;
      ASSERT_EQ(ggml_type_size(Ggml(t)), static_cast<size_t>(GetDTypeInfo(t).block_bytes)) << DTypeName(t);
      ASSERT_EQ(ggml_blck_size(Ggml(t)), GetDTypeInfo(t).block_elems) << DTypeName(t);
      std::vector<float> ours(n), theirs(n);
      DequantizeRow(t, blocks.data(), ours.data(), n);
      if (t == DType::kQ8_K) {
        dequantize_row_q8_K(blocks.data(), theirs.data(), static_cast<int64_t>(n));
      } else {
        ASSERT_NE(ggml_get_type_traits(Ggml(t))->to_float, nullptr) << DTypeName(t);
        ggml_get_type_traits(Ggml(t))->to_float(blocks.data(), theirs.data(), static_cast<int64_t>(n));
      }
      for (size_t i = 0; i < n; ++i) {
        uint32_t a, b;
        std::memcpy(&a, &ours[i], 4);
        std::memcpy(&b, &theirs[i], 4);
        ASSERT_EQ(a, b) << DTypeName(t) << " element " << i << ": " << ours[i] << " vs ggml " << theirs[i];
      }
    }
  }
}

// Activations: q8_0, q8_1, q8_K blocks bitwise those of the CPU backend's from_float (what llama.cpp's matmuls
// feed the vec_dot kernels), from the reference loops and from every ISA's table entry, on random rows of several
// magnitudes, an all-zero block and exact ties.
TEST_F(GgmlTest, ActivationQuantizationIsBitwiseGgmls) {
  testing::IsaGuard guard;
  const std::vector<Isa> isas = testing::AvailableIsas();
  const size_t n = 2048;
  for (float scale : {1e-3f, 1.f, 300.f}) {
    auto x = RandomVec(n, 77 + static_cast<uint32_t>(scale), scale);
    for (size_t i = 0; i < 256; ++i) x[i] = 0;  // a zero block of every type
    for (size_t i = 256; i < 512; ++i) x[i] = (static_cast<int>(i % 7) - 3) * 0.5f;  // ties at the rounding points
    for (DType t : {DType::kQ8_0, DType::kQ8_1, DType::kQ8_K}) {
      std::vector<uint8_t> theirs(DTypeBytes(t, n));
      ggml_get_type_traits_cpu(Ggml(t))->from_float(x.data(), theirs.data(), static_cast<int64_t>(n));
      // The reference loops, then what MatMul uses: each ISA's table entry (q8_1 has only the reference).
      for (int variant = -1; variant < static_cast<int>(isas.size()); ++variant) {
        if (variant >= 0 && t == DType::kQ8_1) break;
        std::vector<uint8_t> ours(theirs.size());
        if (variant >= 0) SetIsa(isas[variant]);
        const KernelTable& kt = Kernels();
        const char* who = variant < 0 ? "reference" : kt.name;
        if (t == DType::kQ8_0) {
          auto* y = reinterpret_cast<BlockQ8_0*>(ours.data());
          variant < 0 ? QuantizeActivationsQ8_0(x.data(), y, n) : kt.quantize_q8_0(x.data(), y, n);
        }
        if (t == DType::kQ8_1) QuantizeActivationsQ8_1(x.data(), reinterpret_cast<BlockQ8_1*>(ours.data()), n);
        if (t == DType::kQ8_K) {
          auto* y = reinterpret_cast<BlockQ8_K*>(ours.data());
          variant < 0 ? QuantizeActivationsQ8_K(x.data(), y, n) : kt.quantize_q8_k(x.data(), y, n);
        }
        const size_t bb = GetDTypeInfo(t).block_bytes;
        for (size_t b = 0; b < ours.size() / bb; ++b)
          ASSERT_EQ(0, std::memcmp(ours.data() + b * bb, theirs.data() + b * bb, bb))
              << DTypeName(t) << " " << who << " scale " << scale << " block " << b;
      }
    }
  }
}

// The dot products: deepinfer's MatMul on every ISA against ggml's vec_dot (weights quantized by ggml from random
// f32 rows, x by ggml's from_float into the type's vec_dot_type). Both sum the same exact integer block sums;
// only the f32 order of the per-block terms differs, so |ours - ggml| <= 1e-5 * sum |w x| (from the dequantized
// values).
TEST_F(GgmlTest, DotProductsTrackGgmlsVecDot) {
  testing::IsaGuard guard;
  for (DType t : testing::NewWeightTypes()) {
    const int64_t k = 1024, rows = 9;
    const auto wf = RandomVec(static_cast<size_t>(rows * k), 5, 0.1f);
    std::vector<uint8_t> wq(DTypeBytes(t, rows * k));
    ggml_quantize_chunk(Ggml(t), wf.data(), wq.data(), 0, rows, k, nullptr);
    const auto x = RandomVec(static_cast<size_t>(k), 6);
    const auto* traits = ggml_get_type_traits_cpu(Ggml(t));
    const DType at = ActivationDotType(t);
    ASSERT_EQ(static_cast<uint32_t>(traits->vec_dot_type), GgmlFromDType(at)) << DTypeName(t);
    std::vector<uint8_t> xq(DTypeBytes(at, k));
    ggml_get_type_traits_cpu(traits->vec_dot_type)->from_float(x.data(), xq.data(), k);
    std::vector<float> wd(k), xd(k);
    DequantizeRow(at, xq.data(), xd.data(), k);
    TensorView w{t, {rows, k}, wq.data(), wq.size()};
    for (Isa isa : testing::AvailableIsas()) {
      SetIsa(isa);
      std::vector<float> y(rows);
      MatMul(w, x.data(), 1, y.data());
      for (int64_t r = 0; r < rows; ++r) {
        float ref;
        traits->vec_dot(static_cast<int>(k), &ref, 0, wq.data() + r * DTypeBytes(t, k), 0, xq.data(), 0, 1);
        DequantizeRow(t, wq.data() + r * DTypeBytes(t, k), wd.data(), k);
        double mag = 0;
        for (int64_t j = 0; j < k; ++j) mag += std::fabs(static_cast<double>(wd[j]) * xd[j]);
        EXPECT_NEAR(y[r], ref, 1e-5 * mag) << DTypeName(t) << " " << IsaName(isa) << " row " << r;
      }
    }
  }
}

// Weight quantization (what `convert --outtype` writes): deepinfer's blocks bitwise those of ggml's quantizer
// (ggml_quantize_chunk without an importance matrix, what llama-quantize runs), on rows that exercise every
// branch of the searches: uniform and Gaussian rows at several magnitudes, heavy outliers, an all-zero block,
// constant blocks (positive and negative), one-sided blocks (all positive / all negative: the min clamp), tiny
// values near the group epsilon and f16-rounded ties.
TEST_F(GgmlTest, WeightQuantizationIsBitwiseGgmls) {
  const size_t n = 256 * 40;
  std::vector<std::vector<float>> rows;
  for (float scale : {1e-6f, 0.02f, 1.f, 80.f}) rows.push_back(RandomVec(n, 900 + static_cast<uint32_t>(rows.size()), scale));
  {
    std::mt19937 rng(4242);
    std::normal_distribution<float> g(0.f, 0.05f);
    std::vector<float> v(n);
    for (auto& x : v) x = g(rng);
    for (size_t i = 0; i < n; i += 97) v[i] *= 40.f;  // outliers, as real weight rows have
    for (size_t i = 0; i < 256; ++i) v[i] = 0;                                        // all-zero super-block
    for (size_t i = 256; i < 512; ++i) v[i] = 0.25f;                                  // constant > 0
    for (size_t i = 512; i < 768; ++i) v[i] = -0.125f;                                // constant < 0
    for (size_t i = 768; i < 1024; ++i) v[i] = std::fabs(v[i]) + 0.01f;               // one-sided
    for (size_t i = 1024; i < 1280; ++i) v[i] = -std::fabs(v[i]) - 0.01f;
    for (size_t i = 1280; i < 1536; ++i) v[i] = (static_cast<int>(i % 9) - 4) * 0.0625f;  // exact ties
    for (size_t i = 1536; i < 1792; ++i) v[i] *= 1e-16f;                              // below the group epsilon
    for (size_t i = 1792; i < 2048; ++i) v[i] = i % 32 ? 0.f : 1.f;                   // sparse
    rows.push_back(v);
  }
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K,
                  DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kMXFP4}) {
    ASSERT_TRUE(CanQuantizeRow(t)) << DTypeName(t);
    for (size_t r = 0; r < rows.size(); ++r) {
      const auto& x = rows[r];
      std::vector<uint8_t> ours(DTypeBytes(t, n)), theirs(ours.size());
      QuantizeRow(t, x.data(), ours.data(), n);
      const int64_t cols = 1024;  // ggml quantizes row by row; 10 rows of 1024
      ggml_quantize_chunk(Ggml(t), x.data(), theirs.data(), 0, static_cast<int64_t>(n) / cols, cols, nullptr);
      const size_t bb = GetDTypeInfo(t).block_bytes;
      for (size_t b = 0; b < ours.size() / bb; ++b)
        ASSERT_EQ(0, std::memcmp(ours.data() + b * bb, theirs.data() + b * bb, bb))
            << DTypeName(t) << " row set " << r << " block " << b;
    }
  }
}

}  // namespace
}  // namespace deepinfer
