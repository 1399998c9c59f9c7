// Forced tool calls (`tool_choice` "required" or naming a function) as a grammar: the call syntax the model's
// chat template teaches (Qwen3 / Hermes `<tool_call>` JSON, DeepSeek-V3's tool-call markers, DeepSeek-V3.2 / V4
// DSML parameter elements, Llama-3.x bare JSON), with each function's name as a literal and its arguments
// compiled from the function's `parameters` JSON Schema. The output is then always something ParseAssistantOutput turns into calls whose arguments
// validate against their schema.
#pragma once
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "deepinfer/status.h"
#include "grammar/json_schema.h"
#include "engine/request.h"
#include "protocol/harmony.h"
#include "protocol/tool_parse.h"

namespace deepinfer {

// `tools`: the request's list; `only`: the one function allowed (named tool_choice), empty for any of them;
// `parallel`: one or more calls (else exactly one); `ws`: the whitespace the arguments' JSON may hold.
// InvalidArgument naming the field for a malformed tool, a schema the compiler cannot enforce, or `only` not
// among the tools.
StatusOr<std::string> ToolCallGbnf(const nlohmann::json& tools, ToolFormat format, const std::string& only,
                                   bool parallel, grammar::JsonWhitespace ws = grammar::JsonWhitespace::kCompact);

// Harmony (gpt-oss) forced calls: the model may reason (analysis) and write preambles first, so the grammar is
// gated (GrammarGate, engine/request.h): it starts at a call header `<|channel|>commentary to=functions.NAME
// <|constrain|>json<|message|>` (or the recipient in the role) of an allowed function, which the grammar reads to
// pick NAME's argument rule, and the turn cannot end before it (llama.cpp's grammar for required tool_choice
// on gpt-oss: `(start any)* start tool_call`). One call: gpt-oss ends a turn with <|call|> after it.
StatusOr<std::string> HarmonyToolCallGbnf(const nlohmann::json& tools, const std::string& only, grammar::JsonWhitespace ws,
                                          const HarmonyTokens& t, GrammarGate* gate);
// Harmony structured output: the grammar applies to the final channel's body (`<|channel|>final[ <|constrain|>json]
// <|message|>`), after free analysis messages, as llama.cpp's response_format grammar on gpt-oss.
void HarmonyFinalGate(const HarmonyTokens& t, GrammarGate* gate);
// A call grammar (ToolCallGbnf's: its first rule is root) for the text after a reasoning block's </think>,
// behind GrammarGate::open_after: up to 4 spaces or newlines, then the calls.
std::string AfterReasoningGbnf(const std::string& call_gbnf);

}  // namespace deepinfer
