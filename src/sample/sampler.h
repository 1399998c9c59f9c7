// Token selection from logits: greedy, or temperature -> top-k -> top-p -> min-p -> draw, where the draw uses
// the counter-based generator keyed by (seed, position).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "deepinfer/sampling_params.h"
#include "deepinfer/status.h"

namespace deepinfer {

// The public request type's sampling part (include/deepinfer/sampling_params.h) is the sampler's own parameter
// type. Its seed is always set by the time a row samples (Engine::Add draws one for requests without).
using SamplingParams = api::SamplingParams;

// Applies repetition/presence/frequency penalties and logit bias in place. history: the sequence's tokens so far
// (prompt first, prompt_len of them, then generated tokens). counts: vocab-size scratch of zeros, returned zeroed.
void ApplyPenalties(float* logits, int vocab, const SamplingParams& p, const int32_t* history, int len, int prompt_len,
                    std::vector<int32_t>* counts);

// Log-probability of `token` and the k most likely alternatives under log_softmax(logits), most likely first
// (ties by lower id).
struct TopLogprobs {
  float logprob = 0.f;
  std::vector<std::pair<int32_t, float>> top;
};
TopLogprobs ComputeLogprobs(const float* logits, int n, int32_t token, int k);

// Index of the largest logit (lowest index on ties).
int32_t ArgMax(const float* logits, int n);

// Chooses a token for absolute position `position` (the index the new token will occupy); substream separates
// the n samples of one request (sample index), so each has its own random stream.
// The distribution a non-greedy draw samples from: temperature, then top-k, top-p and min-p, with unnormalized
// probabilities summing to `total`. Candidates are sorted by logit (ties by lower id) when top-k or top-p is
// on; otherwise they are in token id order: any fixed order draws from the same distribution, and sorting a
// 128k vocabulary cost ~20 ms per row per step.
struct FilteredDistribution {
  std::vector<int32_t> ids;
  std::vector<double> prob;
  double total = 0;
  double Prob(int32_t token) const;  // normalized probability of `token` (0 outside the kept set)
};
FilteredDistribution Filter(const float* logits, int n, const SamplingParams& p);  // p must not be greedy
void Filter(const float* logits, int n, const SamplingParams& p, FilteredDistribution* out);  // reuses out's buffers
// Inverse-CDF draw with `uniform` in [0, 1): the first candidate whose cumulative mass exceeds uniform x total.
int32_t DrawFrom(const FilteredDistribution& d, float uniform);

int32_t SampleToken(const float* logits, int n, const SamplingParams& p, uint64_t position, uint32_t substream = 0);

}  // namespace deepinfer
