// Token selection from logits: greedy, or temperature -> top-k -> top-p -> min-p -> draw, where the draw uses
// the counter-based generator keyed by (seed, position).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer {

struct SamplingParams {
  float temperature = 0.f;  // <= 0: greedy
  int top_k = 0;            // <= 0: off
  float top_p = 1.f;        // >= 1: off
  float min_p = 0.f;        // <= 0: off
  uint64_t seed = 0;

  Status Validate() const;
  bool greedy() const { return temperature <= 0.f || top_k == 1; }
};

// Index of the largest logit (lowest index on ties).
int32_t ArgMax(const float* logits, int n);

// Chooses a token for absolute position `position` (the index the new token will occupy).
int32_t SampleToken(const float* logits, int n, const SamplingParams& p, uint64_t position);

}  // namespace deepinfer
