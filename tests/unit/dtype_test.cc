#include <gtest/gtest.h>

#include <cmath>

#include "tensor/dtype.h"
#include "test_util.h"

namespace deepinfer {
namespace {

TEST(DTypeTest, F16RoundTripAndKnownValues) {
  EXPECT_EQ(F32ToF16(1.0f), 0x3c00);
  EXPECT_EQ(F32ToF16(-2.0f), 0xc000);
  EXPECT_EQ(F32ToF16(65504.f), 0x7bff);
  EXPECT_EQ(F32ToF16(1e6f), 0x7c00);           // overflow -> inf
  EXPECT_EQ(F32ToF16(5.9604645e-8f), 0x0001);  // smallest subnormal
  EXPECT_FLOAT_EQ(F16ToF32(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(NAN))));
  // Every f16 value survives f16 -> f32 -> f16.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if (((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff)) continue;  // NaN payloads
    ASSERT_EQ(F32ToF16(F16ToF32(static_cast<uint16_t>(h))), h) << h;
  }
  // Round half to even: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(F32ToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
}

TEST(DTypeTest, BF16RoundsToNearestEven) {
  EXPECT_EQ(F32ToBF16(1.0f), 0x3f80);
  EXPECT_EQ(F32ToBF16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // halfway, even stays
  EXPECT_EQ(F32ToBF16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // halfway, odd rounds up
  EXPECT_FLOAT_EQ(BF16ToF32(0x4049), 3.140625f);
}

TEST(DTypeTest, QuantizedBlocksBoundTheError) {
  const auto x = testing::RandomVec(32 * 9, 3, 2.f);
  for (DType t : {DType::kQ8_0, DType::kQ4_0}) {
    std::vector<uint8_t> q(DTypeBytes(t, x.size()));
    QuantizeRow(t, x.data(), q.data(), x.size());
    std::vector<float> y(x.size());
    DequantizeRow(t, q.data(), y.data(), x.size());
    for (size_t b = 0; b < x.size(); b += 32) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
      // q8_0 rounds to the nearest of 255 symmetric levels: error <= half a step. q4_0's 16 levels span
      // [-8d, 7d] with -8d = the signed max, so the far side clamps at 7/8 amax: error <= one step there.
      const float step = amax / (t == DType::kQ8_0 ? 127.f : 8.f), bound = t == DType::kQ8_0 ? 0.5f * step : step;
      for (int j = 0; j < 32; ++j) EXPECT_LE(std::fabs(y[b + j] - x[b + j]), bound * 1.01f + 1e-3f) << DTypeName(t);
    }
  }
}

TEST(DTypeTest, ActivationQuantizationUsesScaleOver127AndHalfEven) {
  std::vector<float> x(32, 0.f);
  x[0] = 127.f;  // amax 127: scale exactly 1
  x[1] = 2.5f;   // half even -> 2
  x[2] = 3.5f;   // -> 4
  x[3] = -2.5f;  // -> -2
  BlockQ8_0 b;
  QuantizeActivationsQ8_0(x.data(), &b, 32);
  EXPECT_EQ(F16ToF32(b.d), 1.f);
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[1], 2);
  EXPECT_EQ(b.qs[2], 4);
  EXPECT_EQ(b.qs[3], -2);
}

TEST(DTypeTest, NamesRoundTrip) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) EXPECT_EQ(DTypeFromName(DTypeName(t)), t);
  EXPECT_EQ(DTypeFromName("q5_k"), DType::kInvalid);
}

}  // namespace
}  // namespace deepinfer
