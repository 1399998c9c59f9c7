// Structured-output request fields -> a compiled grammar on RequestParams: OpenAI's `response_format`
// (json_object, json_schema with `strict`), vLLM's `structured_outputs` {json, regex, choice, grammar,
// json_object} and the older `guided_json` / `guided_regex` / `guided_choice` / `guided_grammar`. Compiling
// happens here, in request parsing, so the engine thread never waits on it. Invalid schemas, regexes and
// grammars, and more than one constraint, are InvalidArgument errors naming the field and the reason.
#pragma once
#include <nlohmann/json_fwd.hpp>

#include "deepinfer/status.h"
#include "engine/request.h"
#include "grammar/json_schema.h"

namespace deepinfer {

// The JSON whitespace a request's schema and tool-argument grammars allow: compact (at most one space between
// tokens) unless `structured_outputs.disable_any_whitespace` is false (vLLM's field; here it only opts back into
// llama.cpp's bounded newline-and-indent rule). InvalidArgument when the field is not a boolean.
StatusOr<grammar::JsonWhitespace> JsonWhitespaceOf(const nlohmann::json& body);

Status ParseStructuredOutput(const nlohmann::json& body, RequestParams* p);

}  // namespace deepinfer
