// OpenAI's Responses API (/v1/responses), the common subset, over the chat path: a request becomes a chat
// request (input string or message list, `instructions` as a system turn, function tools, `tool_choice`,
// `text.format` json_schema / json_object, max_output_tokens, temperature, top_p, seed, stream, top_logprobs with
// include message.output_text.logprobs, vLLM's sampling extensions; any other field is refused by name), and the chat
// answer becomes a response object or the stream's event sequence (response.created, output_item.added,
// content_part.added, output_text.delta / .done, function_call_arguments.delta / .done, output_item.done,
// response.completed).
#pragma once
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "deepinfer/status.h"

namespace deepinfer {

// Stored responses (OpenAI's `store`, on by default): the conversation each one ended with, which a later
// request continues with previous_response_id, and the response object (GET /v1/responses/{id}). The oldest
// entries go first past `capacity` (--max-stored-responses); thread-safe (prep workers read, the loop writes).
class ResponseStore {
 public:
  explicit ResponseStore(size_t capacity) : capacity_(capacity) {}
  size_t capacity() const { return capacity_; }
  // The chat messages (instructions excluded) the response ended with, its answer included.
  std::optional<nlohmann::ordered_json> Conversation(const std::string& id) const;
  std::optional<nlohmann::json> Object(const std::string& id) const;
  void Put(const std::string& id, nlohmann::ordered_json conversation, nlohmann::json object);

 private:
  struct Entry {
    nlohmann::ordered_json conversation;
    nlohmann::json object;
    std::list<std::string>::iterator age;
  };
  const size_t capacity_;
  mutable std::mutex mu_;
  std::list<std::string> order_;  // oldest first
  std::unordered_map<std::string, Entry> entries_;
};

struct ResponsesRequest {
  nlohmann::ordered_json chat;          // the equivalent chat-completions body
  nlohmann::ordered_json conversation;  // what to store with the answer: the previous response's messages + this input
  bool store = true;                    // `store` (default true)
  // `reasoning.summary` was asked for: the model's reasoning is also given as the reasoning item's summary (an
  // open model's reasoning is not summarized; this is what clients that read only summaries can show).
  bool reasoning_summary = false;
  // What the response object echoes of the request (temperature, tools, tool_choice, text, metadata, reasoning,
  // ...), with OpenAI's defaults for what it did not give.
  nlohmann::json echo = nlohmann::json::object();
  // include: ["message.output_text.logprobs"]: the output text's parts carry log-probs (top_logprobs of them).
  bool output_logprobs = false;
};

// The equivalent chat request; InvalidArgument naming the field for what is not supported, NotFound for a
// previous_response_id the store does not hold (never stored, store: false, or evicted). Instructions are not
// carried over from the previous response, as OpenAI does: only this request's apply.
StatusOr<ResponsesRequest> ResponsesToChat(const nlohmann::ordered_json& body, const ResponseStore& store);

// Builds a response's output and its stream events from the chat-side pieces. Output items, in order: the
// reasoning (when the model wrote any), the message, then one function_call per call. While streaming, an item
// is opened when its first piece arrives, so indices follow that order.
class ResponseBuilder {
 public:
  // echo: the request's settings the response object reports (ResponsesRequest::echo).
  ResponseBuilder(std::string id, int64_t created, std::string model, bool reasoning_summary = false,
                  nlohmann::json echo = nlohmann::json::object())
      : id_(std::move(id)), created_(created), model_(std::move(model)), summary_(reasoning_summary),
        echo_(std::move(echo)) {}
  const std::string& id() const { return id_; }
  // Stream: response.created and response.in_progress.
  std::string Start();
  // Stream: reasoning text (response.reasoning_text.delta; with a summary asked for, also the summary events).
  std::string ReasoningDelta(const std::string& text);
  // Stream: answer text (closes the reasoning item, opens the message item and its text part on first use).
  // logprobs: the chat-shaped entries ({token, logprob, bytes, top_logprobs}) of the tokens of `text`.
  std::string TextDelta(const std::string& text, const nlohmann::json& logprobs = nlohmann::json::array());
  // Stream, tools: function call `index` starts (its item follows the message), then its arguments in
  // fragments; Finish closes the calls started here instead of sending them whole.
  std::string CallStart(int index, const std::string& call_id, const std::string& name);
  std::string CallArgumentsDelta(int index, const std::string& call_id, const std::string& fragment);
  // The end: `message` is the chat assistant message (reasoning_content, content, tool_calls); events close
  // the open items and add the function calls not streamed yet, then response.completed. `usage`: the chat
  // usage object (completion_tokens_details.reasoning_tokens counts the reasoning).
  // logprobs: all of the output text's entries (those not streamed yet go out with the rest of the text).
  std::string Finish(const nlohmann::json& message, const std::string& finish_reason, const nlohmann::json& usage,
                     const nlohmann::json& logprobs = nlohmann::json::array());
  // Non-streamed: the whole response object.
  nlohmann::json Object(const nlohmann::json& message, const std::string& finish_reason, const nlohmann::json& usage,
                        const nlohmann::json& logprobs = nlohmann::json::array());

 private:
  nlohmann::json Base(const char* status) const;
  std::string Event(const char* type, nlohmann::json data);
  nlohmann::json ReasoningItem(const std::string& text, const char* status) const;
  std::string OpenMessage();
  std::string CloseReasoning();
  std::string id_;
  int64_t created_;
  std::string model_;
  bool summary_;
  nlohmann::json echo_;
  size_t sent_logprobs_ = 0;                                 // output-text log-probs sent in deltas
  nlohmann::json unsent_logprobs_ = nlohmann::json::array();  // those of tokens whose text is held back
  int seq_ = 0;
  int next_index_ = 0;              // the output index the next opened item gets
  int reasoning_index_ = -1;        // the reasoning item's output index (-1: not opened)
  bool reasoning_closed_ = false;
  int message_index_ = -1;          // the message item's output index (-1: not opened)
  std::string reasoning_text_;      // streamed so far
  std::string text_;                // streamed so far
  int calls_started_ = 0;           // function calls whose items were added while streaming
};

}  // namespace deepinfer
