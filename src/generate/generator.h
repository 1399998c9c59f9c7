// Single-sequence generation: prefill the prompt, then decode token by token with the sampler, stopping at
// end-of-generation tokens, max_tokens or the context length. (The batched engine builds on the same
// Transformer; this is what `deepinfer generate -p` and the decode benchmark run.)
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "deepinfer/status.h"
#include "model/transformer.h"
#include "sample/sampler.h"

namespace deepinfer {

struct GenerateRequest {
  std::vector<int32_t> prompt;
  int max_tokens = 128;
  SamplingParams sampling;
  bool ignore_eos = false;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (the prompt excluded)
  std::string finish_reason;    // "stop" (end-of-generation token), "length" (max_tokens or context)
  double prefill_seconds = 0, decode_seconds = 0;
};

// on_token is called for each generated id as soon as it is known; return false from it to stop early.
StatusOr<GenerateResult> Generate(Transformer& model, KvCache& kv, const GenerateRequest& req,
                                  const std::function<bool(int32_t)>& on_token = nullptr);

}  // namespace deepinfer
