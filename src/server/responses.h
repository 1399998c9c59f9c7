// OpenAI's Responses API (/v1/responses), the common subset, over the chat path: a request becomes a chat
// request (input string or message list, `instructions` as a system turn, function tools, `tool_choice`,
// `text.format` json_schema / json_object, max_output_tokens, temperature, top_p, seed, stream), and the chat
// answer becomes a response object or the stream's event sequence (response.created, output_item.added,
// content_part.added, output_text.delta / .done, function_call_arguments.delta / .done, output_item.done,
// response.completed).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "deepinfer/status.h"

namespace deepinfer {

// The equivalent chat-completions body; InvalidArgument naming the field for what is not supported.
StatusOr<nlohmann::ordered_json> ResponsesToChat(const nlohmann::ordered_json& body);

// Builds a response's output and its stream events from the chat-side pieces.
class ResponseBuilder {
 public:
  ResponseBuilder(std::string id, int64_t created, std::string model) : id_(std::move(id)), created_(created), model_(std::move(model)) {}
  // Stream: response.created, then the message item and its text part (text streams as it comes).
  std::string Start();
  std::string TextDelta(const std::string& text);
  // The end: `message` is the chat assistant message (content, tool_calls); events close the text and add
  // one function_call item per call, then response.completed. `usage`: the chat usage object.
  std::string Finish(const nlohmann::json& message, const std::string& finish_reason, const nlohmann::json& usage);
  // Non-streamed: the whole response object.
  nlohmann::json Object(const nlohmann::json& message, const std::string& finish_reason, const nlohmann::json& usage);

 private:
  nlohmann::json Base(const char* status) const;
  std::string Event(const char* type, nlohmann::json data);
  std::string id_;
  int64_t created_;
  std::string model_;
  int seq_ = 0;
  std::string text_;  // streamed so far
};

}  // namespace deepinfer
