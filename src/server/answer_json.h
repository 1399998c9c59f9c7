// The OpenAI JSON pieces every endpoint's answers are built from (answer_json.cc).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/api_call.h"

namespace deepinfer {

class Tokenizer;

// Compact JSON; invalid UTF-8 (a random model's bytes) becomes U+FFFD rather than an exception.
std::string DumpJson(const nlohmann::json& j);

// OpenAI's logprobs object for `lps`, in the chat shape ({"content": [{token, logprob, bytes, top_logprobs:
// [{token, logprob, bytes}]}]}) or the completions one ({tokens, token_logprobs, top_logprobs: [{token: logprob}]},
// plus text_offset, each token's byte offset in the choice's text starting at `*text_offset`, when given).
nlohmann::json LogprobsJson(const Tokenizer& tok, bool chat, const std::vector<TokenLogprob>& lps, const size_t* text_offset);

// The assistant message for a chat answer: content (null when only tools were called), reasoning_content when
// a <think> block was split off, tool_calls with ids `id_prefix` + their index (unique within the response).
nlohmann::json AssistantMessage(const std::string& text, const OutputParsing& parse, bool opened, const std::string& id_prefix);
// The same from a Harmony (gpt-oss) answer's token ids (parse.harmony; protocol/harmony.h); *reasoning_tokens
// (when given): the analysis messages' tokens.
nlohmann::json HarmonyAssistantMessage(const Tokenizer& tok, const std::vector<int32_t>& ids, const OutputParsing& parse,
                                       const std::string& id_prefix, int* reasoning_tokens = nullptr);
// The message for a parsed answer.
nlohmann::json AssistantMessageJson(ParsedAssistant p, const OutputParsing& parse, const std::string& id_prefix);

// The end of a chat or completions SSE stream: the usage chunk (stream_options.include_usage) and [DONE].
std::string SseStreamEnd(const ApiCall& call, const char* object, const std::string& model, const nlohmann::json& usage);

// `usage` with completion_tokens_details.reasoning_tokens: the tokens up to </think> when `message` has
// reasoning, else 0.
nlohmann::json WithReasoningTokens(const nlohmann::json& usage, const nlohmann::json& message, int reasoning_tokens);

}  // namespace deepinfer
