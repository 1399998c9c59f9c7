// OpenAI-style request bodies (as vLLM accepts them: "prompt" text or token ids or "prompt_token_ids", or
// chat "messages", plus "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "n",
// "logprobs", penalties, "logit_bias", ...) -> a prompt and GenerationParams. This is what `deepinfer generate
// --input` reads per line; the HTTP server accepts the same fields.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "deepinfer/engine.h"
#include "deepinfer/model.h"
#include "deepinfer/status.h"

namespace deepinfer::api {

struct Request {
  std::vector<int32_t> prompt;
  GenerationParams params;
};

// Fields absent from `json_body` keep their value in `defaults`. Errors (InvalidArgument) name the field;
// unknown fields are ignored, as OpenAI does. "messages" go through the model's chat template
// ("add_generation_prompt", default true).
StatusOr<Request> RequestFromOpenAiJson(const Model& model, const std::string& json_body,
                                        const GenerationParams& defaults = {});

}  // namespace deepinfer::api
