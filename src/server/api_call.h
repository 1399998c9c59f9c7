// One accepted generation request on the server's HTTP thread: the engine requests it became (one per prompt,
// n choices each), what each choice has produced so far, and how its answer is shaped (the endpoint's encoder,
// answer_encoder.h). OpenAiServer owns the calls; the encoders read and update their choices.
#pragma once
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "protocol/harmony.h"
#include "protocol/tool_parse.h"
#include "protocol/tool_stream.h"
#include "server/http_server.h"
#include "server/responses.h"

namespace deepinfer {

class AnswerEncoder;

// The API a generation request came through: it decides the answer's wire format.
enum class Endpoint { kCompletions, kChat, kResponses };

// What a chat answer is parsed into (the server's ChatOutputParsing decides it from tools / tool_choice /
// parallel_tool_calls and the chat template).
struct OutputParsing {
  bool tools = false;        // tool calls into tool_calls
  bool thinking = false;     // a <think> block into reasoning_content
  bool single_call = false;  // at most one call (parallel_tool_calls false, or a named tool)
  // The call syntax the answer is written in: the template's, or (forced calls on a template without one) the
  // Llama-3.x JSON call syntax the grammar makes the model write.
  ToolFormat format = ToolFormat::kNone;
  // A Harmony (gpt-oss) template: the answer is parsed on token ids (protocol/harmony.h) into reasoning_content,
  // content and (with tools) tool_calls, whatever `thinking` and `tools` say about <think> and text calls.
  bool harmony = false;
  HarmonyTokens harmony_tokens;  // the vocabulary's markers (harmony)
};

// How an accepted request is answered, fixed when it is parsed.
struct AnswerShape {
  Endpoint endpoint = Endpoint::kCompletions;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;           // completions: the prompt's text precedes the answer
  bool opens_thinking = false;  // chat with a reasoning template: the generation prompt left a <think> open
  OutputParsing parse;
  std::shared_ptr<const ResponsesRequest> responses;  // /v1/responses: its conversation and settings
};

struct ApiCall {
  using Clock = std::chrono::steady_clock;
  HttpServer::ConnId conn = 0;
  AnswerShape shape;
  std::unique_ptr<AnswerEncoder> encoder;  // the endpoint's wire format
  std::vector<uint64_t> engine_ids;        // one engine request per prompt
  bool opened = false;                     // the prompt ends inside an open <think>
  int logprobs = -1;                       // the request's logprobs (-1: none)
  std::string id;
  int64_t created = 0;
  bool chat() const { return shape.endpoint != Endpoint::kCompletions; }

  struct Choice {
    std::string text, finish_reason;
    int tokens = 0;
    std::vector<TokenLogprob> raw;  // the log-probs of every token so far (when asked for)
    std::string echo;               // the prompt text when echo is on (completions)
    bool role_sent = false;         // the first chunk (or event) of this choice went out
    Clock::time_point last_token;
    ReasoningSplitter split{false};  // streamed <think> split (set up when the call is accepted)
    // Tokens generated until </think> appeared (reported as reasoning_tokens when the answer has reasoning).
    int reasoning_tokens = 0;
    bool think_closed = false;
    std::string think_tail;  // the last bytes seen, for a </think> split across events
    std::unique_ptr<ToolCallStreamer> tools;  // streamed tool calls (chat with tools)
    std::unique_ptr<HarmonyParser> harmony;   // streamed Harmony answer (parse.harmony)
    std::vector<int32_t> token_ids;           // the answer's ids (parse.harmony: the non-streamed parse reads them)
    // Whether the answer starts in reasoning: the prompt opened <think>, or the text begins with it.
    bool StartsThinking(bool opened) const {
      const size_t b = text.find_first_not_of(" \t\r\n");
      return opened || (b != std::string::npos && text.compare(b, 7, "<think>") == 0);
    }
    // Returns whether the event's tokens were counted as reasoning (those until and with </think>).
    bool CountReasoning(const RequestOutput& ev) {
      if (think_closed) return false;
      reasoning_tokens += static_cast<int>(ev.token_ids.size());
      const std::string window = think_tail + ev.text;
      think_closed = window.find("</think>") != std::string::npos;
      think_tail = window.substr(window.size() > 8 ? window.size() - 8 : 0);
      return true;
    }
    // A streamed piece of text into its reasoning and content parts (what is held back, at the end).
    void Split(const std::string& text, bool finished, std::string* reasoning, std::string* content) {
      split.Feed(text, reasoning, content);
      if (finished) split.Finish(reasoning, content);
    }
  };
  std::vector<Choice> choices;
  int unfinished = 0;  // choices not finished
  int prompt_tokens = 0, cached_tokens = 0;
  Clock::time_point start;
  bool first_token_seen = false;

  // OpenAI's usage object for the tokens so far.
  nlohmann::json Usage() const {
    int completion_tokens = 0;
    for (const Choice& x : choices) completion_tokens += x.tokens;
    return {{"prompt_tokens", prompt_tokens}, {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens}, {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
  }
};

}  // namespace deepinfer
