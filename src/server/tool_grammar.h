// Forced tool calls (`tool_choice` "required" or naming a function) as a grammar: the call syntax the model's
// chat template teaches (Qwen3 / Hermes `<tool_call>` JSON, DeepSeek-V3's tool-call markers, Llama-3.x bare
// JSON), with each function's name as a literal and its arguments compiled from the function's `parameters`
// JSON Schema. The output is then always something ParseAssistantOutput turns into calls whose arguments
// validate against their schema.
#pragma once
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "deepinfer/status.h"
#include "grammar/json_schema.h"
#include "protocol/tool_parse.h"

namespace deepinfer {

// `tools`: the request's list; `only`: the one function allowed (named tool_choice), empty for any of them;
// `parallel`: one or more calls (else exactly one); `ws`: the whitespace the arguments' JSON may hold.
// InvalidArgument naming the field for a malformed tool, a schema the compiler cannot enforce, or `only` not
// among the tools.
StatusOr<std::string> ToolCallGbnf(const nlohmann::json& tools, ToolFormat format, const std::string& only,
                                   bool parallel, grammar::JsonWhitespace ws = grammar::JsonWhitespace::kCompact);

}  // namespace deepinfer
