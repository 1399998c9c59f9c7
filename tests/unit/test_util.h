#pragma once
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace deepinfer::testing {

// ../shared/models next to the checkout, or $DEEPINFER_SHARED_MODELS.
inline std::string SharedModels() {
  const char* env = std::getenv("DEEPINFER_SHARED_MODELS");
  return env && *env ? env : DEEPINFER_SHARED_MODELS;
}

// Random values in [-scale, scale], never all zero, from a fixed seed.
inline std::vector<float> RandomVec(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace deepinfer::testing
