#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "sample/philox.h"
#include "sample/sampler.h"
#include "test_util.h"

namespace deepinfer {
namespace {

TEST(PhiloxTest, MatchesPublishedKnownAnswer) {
  // Random123's known-answer test for philox4x32-10: counter = key = 0.
  uint32_t out[4];
  Philox4x32::Generate(0, 0, 0, 0, 0, out);
  EXPECT_EQ(out[0], 0x6627e8d5u);
  EXPECT_EQ(out[1], 0xe169c58du);
  EXPECT_EQ(out[2], 0xbc57ac4cu);
  EXPECT_EQ(out[3], 0x9b00dbd8u);
  // counter = key = all ones.
  Philox4x32::Generate(~0ull, ~0u, ~0u, ~0u, ~0u, out);
  EXPECT_EQ(out[0], 0x408f276du);
  EXPECT_EQ(out[1], 0x41c83b0eu);
  EXPECT_EQ(out[2], 0xa20bc7c6u);
  EXPECT_EQ(out[3], 0x6d5451fdu);
}

TEST(SamplerTest, GreedyIsArgmaxLowestIndexOnTies) {
  std::vector<float> l = {0.1f, 3.f, -1.f, 3.f};
  SamplingParams p;
  EXPECT_EQ(SampleToken(l.data(), 4, p, 0), 1);
  p.temperature = 1.f;
  p.top_k = 1;
  EXPECT_EQ(SampleToken(l.data(), 4, p, 123), 1);
}

TEST(SamplerTest, SameSeedAndPositionSameToken) {
  auto l = testing::RandomVec(1000, 1, 3.f);
  SamplingParams p;
  p.temperature = 1.f;
  p.top_p = 1.f;
  p.seed = 77;
  for (uint64_t pos = 0; pos < 50; ++pos) EXPECT_EQ(SampleToken(l.data(), 1000, p, pos), SampleToken(l.data(), 1000, p, pos));
  int differ = 0;
  for (uint64_t pos = 0; pos < 50; ++pos) {
    SamplingParams q = p;
    q.seed = 78;
    differ += SampleToken(l.data(), 1000, p, pos) != SampleToken(l.data(), 1000, q, pos);
  }
  EXPECT_GT(differ, 25);
}

// Empirical frequencies follow the filtered, renormalized distribution computed here by hand.
TEST(SamplerTest, FrequenciesMatchFilteredDistribution) {
  const std::vector<float> l = {2.0f, 1.5f, 1.0f, 0.2f, -1.0f, -3.0f};
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = 5;     // drops token 5
  p.top_p = 0.9f;  // then the smallest prefix with mass >= 0.9
  p.min_p = 0.05f;
  p.seed = 3;
  std::vector<double> prob;
  double z = 0;
  for (int i = 0; i < 5; ++i) z += std::exp(l[i] / 0.7);
  for (int i = 0; i < 5; ++i) prob.push_back(std::exp(l[i] / 0.7) / z);
  double cum = 0;
  int keep = 0;
  while (keep < 5) {
    cum += prob[keep++];
    if (cum >= 0.9) break;
  }
  int k2 = 1;
  while (k2 < keep && prob[k2] >= prob[0] * 0.05) ++k2;
  keep = k2;
  double total = 0;
  for (int i = 0; i < keep; ++i) total += prob[i];
  std::map<int, int> counts;
  const int N = 200000;
  for (int i = 0; i < N; ++i) counts[SampleToken(l.data(), 6, p, i)]++;
  for (int i = 0; i < 6; ++i) {
    const double expect = i < keep ? prob[i] / total : 0.0;
    EXPECT_NEAR(counts[i] / static_cast<double>(N), expect, 0.005) << "token " << i;
  }
}

TEST(SamplerTest, ValidateRejectsBadValues) {
  SamplingParams p;
  p.top_p = 0.f;
  EXPECT_FALSE(p.Validate().ok());
  p = {};
  p.temperature = -1.f;
  EXPECT_FALSE(p.Validate().ok());
  p = {};
  p.min_p = 2.f;
  EXPECT_FALSE(p.Validate().ok());
  p = {};
  p.top_k = -3;
  EXPECT_FALSE(p.Validate().ok());
  EXPECT_TRUE(SamplingParams{}.Validate().ok());
}

}  // namespace
}  // namespace deepinfer
