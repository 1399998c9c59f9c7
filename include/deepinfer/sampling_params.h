// How one token is drawn from the model's logits: the sampling part of a request (GenerationParams adds what to
// generate around it). The engine's sampler reads this type directly; there is no internal copy of it.
#pragma once
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer::api {

struct SamplingParams {
  float temperature = 0.f;   // <= 0: greedy
  int top_k = 0;             // keep the k most likely tokens; <= 0: off
  float top_p = 1.f;         // nucleus: the smallest set with probability mass >= top_p; >= 1: off
  float min_p = 0.f;         // drop tokens below min_p x the top probability; <= 0: off
  // Unset: the engine draws one when the request is added (the output is then not repeatable). Draws are keyed
  // by (seed, sample, position), so a seeded request gives the same tokens whatever is batched with it.
  std::optional<uint64_t> seed;
  // OpenAI-style, over generated tokens: logit -= presence * [count > 0] + frequency * count; each in [-2, 2].
  float presence_penalty = 0.f;
  float frequency_penalty = 0.f;
  // CTRL/HF-style over prompt and generated tokens: positive logits divided by it, negative ones multiplied.
  float repetition_penalty = 1.f;
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token id, bias in [-100, 100]) added to the logits

  // The sampling ranges (an error names the parameter); vocab_size > 0 also checks logit_bias ids. Engine::Add
  // checks this too, with the prompt; calling it first reports bad parameters before any engine exists.
  Status Validate(int vocab_size = 0) const;
  bool greedy() const { return temperature <= 0.f || top_k == 1; }
  bool has_penalties() const { return presence_penalty != 0.f || frequency_penalty != 0.f || repetition_penalty != 1.f; }
};

}  // namespace deepinfer::api
