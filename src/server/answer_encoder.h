// The wire format of one endpoint's answers, one encoder per call: /v1/completions (completions_encoder.cc),
// /v1/chat/completions (chat_encoder.cc) and /v1/responses (responses_encoder.cc). OpenAiServer::OnOutput does
// what every endpoint shares (metrics, accumulating a choice's text, tokens and log-probs, ending the call) and
// asks the call's encoder for the bytes: a stream's chunks per engine event and its end, or the whole body.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "server/api_call.h"

namespace deepinfer {

class ResponseStore;
class Tokenizer;

class AnswerEncoder {
 public:
  virtual ~AnswerEncoder() = default;
  // Streamed: the bytes for choice `index`'s event `ev`, already added to call.choices[index] ("" when nothing
  // is due). reasoning: the event's tokens were counted as reasoning. usage: the call's usage so far.
  virtual std::string StreamEvent(ApiCall& call, int index, const RequestOutput& ev, bool reasoning,
                                  const nlohmann::json& usage) = 0;
  // Streamed: the bytes after every choice finished (the stream ends after them).
  virtual std::string StreamEnd(ApiCall& call, const nlohmann::json& usage) = 0;
  // Not streamed: the answer's JSON body, once every choice finished.
  virtual nlohmann::json Body(ApiCall& call, const nlohmann::json& usage) = 0;
};

// tok: the model's tokenizer (log-prob tokens); model: the served model name the answers carry.
std::unique_ptr<AnswerEncoder> MakeCompletionsEncoder(const Tokenizer& tok, const std::string& model);
std::unique_ptr<AnswerEncoder> MakeChatEncoder(const Tokenizer& tok, const std::string& model);
// The answer as a response object or its event stream; with the request's store, the finished answer goes into
// `store` (previous_response_id, GET /v1/responses/{id}). created: the response's timestamp.
std::unique_ptr<AnswerEncoder> MakeResponsesEncoder(const Tokenizer& tok, const std::string& model, const std::string& id,
                                                    int64_t created, std::shared_ptr<const ResponsesRequest> request,
                                                    ResponseStore& store);

}  // namespace deepinfer
