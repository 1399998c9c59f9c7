// OpenAI-style request fields (as vLLM accepts them) -> engine RequestParams and prompt token ids. Shared by the
// offline JSONL mode and the HTTP server. Wrong types and out-of-range values are InvalidArgument errors that
// name the field; unknown fields are ignored, as OpenAI does.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <vector>

#include "deepinfer/status.h"
#include "engine/request.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {

// Reads the sampling and stopping fields present in `body` over `defaults`.
StatusOr<RequestParams> ParseRequestParams(const nlohmann::json& body, const RequestParams& defaults);

// "prompt" as a string (tokenized, BOS added when the tokenizer asks) or a list of token ids, or
// "prompt_token_ids".
StatusOr<std::vector<int32_t>> ParsePrompt(const nlohmann::json& body, const Tokenizer& tok);

// Fields that would change the answer and that deepinfer does not implement (suffix, best_of != n, audio,
// non-text modalities, prediction, the legacy functions / function_call): InvalidArgument naming the field.
Status CheckUnsupportedFields(const nlohmann::json& body, bool chat);

}  // namespace deepinfer
