// Structured-output request fields -> a compiled grammar on RequestParams: OpenAI's `response_format`
// (json_object, json_schema with `strict`), vLLM's `structured_outputs` {json, regex, choice, grammar,
// json_object} and the older `guided_json` / `guided_regex` / `guided_choice` / `guided_grammar`. Compiling
// happens here, in request parsing, so the engine thread never waits on it. Invalid schemas, regexes and
// grammars, and more than one constraint, are InvalidArgument errors naming the field and the reason.
#pragma once
#include <nlohmann/json_fwd.hpp>

#include "deepinfer/status.h"
#include "engine/request.h"

namespace deepinfer {

Status ParseStructuredOutput(const nlohmann::json& body, RequestParams* p);

}  // namespace deepinfer
