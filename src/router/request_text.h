// The text a routing policy matches on: the prompt of an OpenAI request body, without the rest of the JSON
// (field order, sampling parameters and the stream flag must not change which replica a prompt goes to).
#pragma once
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace deepinfer::router {

// /v1/completions: the prompt (strings joined; token-id prompts as their JSON). /v1/chat/completions: each
// message's role and text content in order. /v1/responses: instructions, then the input's text. Anything else
// (or a body that is not JSON): "".
std::string PromptText(const nlohmann::json& body);

}  // namespace deepinfer::router
