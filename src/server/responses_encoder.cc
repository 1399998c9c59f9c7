// /v1/responses answers (OpenAI's Responses API over the chat path): a response object, or its event stream
// (responses.h's ResponseBuilder). The reasoning streams into its own item, then the text; with tools the text
// goes through the tool-call parser first and each call's item and argument fragments stream as they are
// generated. A finished answer the request lets us store goes into the ResponseStore with its conversation.
#include <nlohmann/json.hpp>

#include "server/answer_encoder.h"
#include "server/answer_json.h"

namespace deepinfer {
namespace {

using nlohmann::json;

class ResponsesEncoder : public AnswerEncoder {
 public:
  ResponsesEncoder(const Tokenizer& tok, const std::string& model, const std::string& id, int64_t created,
                   std::shared_ptr<const ResponsesRequest> request, ResponseStore& store)
      : tok_(tok), builder_(id, created, model, request->reasoning_summary, request->echo), request_(std::move(request)),
        store_(store) {}

  std::string StreamEvent(ApiCall& k, int index, const RequestOutput& ev, bool reasoning, const json& usage) override {
    ApiCall::Choice& ch = k.choices[index];
    const OutputParsing& parse = k.shape.parse;
    std::string events = ch.role_sent ? "" : builder_.Start();
    ch.role_sent = true;
    if (parse.harmony) return events + HarmonyEvents(k, ch, ev, usage);
    std::string r, text = ev.text;
    if (parse.thinking) {
      text.clear();
      ch.Split(ev.text, ev.finished, &r, &text);
      events += builder_.ReasoningDelta(r);
    }
    // The output text's log-probs: this event's tokens unless they were reasoning.
    const json lps = request_->output_logprobs && !reasoning && !ev.logprobs.empty()
                         ? LogprobsJson(tok_, true, ev.logprobs, nullptr)["content"] : json::array();
    if (!parse.tools) {
      events += builder_.TextDelta(text, lps);
    } else {
      ToolStreamDelta td;
      ch.tools->Feed(text, &td);
      if (ev.finished) ch.tools->Finish(&td);
      events += builder_.TextDelta(td.content, lps);
      const std::string id_prefix = "call_" + k.id + "_0_";
      for (const ToolCallDelta& d : td.calls) {
        const std::string call_id = id_prefix + std::to_string(d.index);
        if (d.first) events += builder_.CallStart(d.index, call_id, d.name);
        events += builder_.CallArgumentsDelta(d.index, call_id, d.arguments);
      }
    }
    if (ev.finished) {
      const json message = AssistantMessage(ch.text, parse, k.opened, "call_" + k.id + "_0_");
      const json u = WithReasoningTokens(usage, message, ch.reasoning_tokens);
      events += builder_.Finish(message, ev.finish_reason, u, OutputTextLogprobs(k, ch, message));
      Store(message, ev.finish_reason, u);
    }
    return events;
  }

  // response.completed was the last event; the stream has no [DONE].
  std::string StreamEnd(ApiCall&, const json&) override { return ""; }

  json Body(ApiCall& k, const json& usage) override {
    const ApiCall::Choice& ch = k.choices[0];  // a response has one answer
    int harmony_reasoning = 0;
    const json message = k.shape.parse.harmony
                             ? HarmonyAssistantMessage(tok_, ch.token_ids, k.shape.parse, "call_" + k.id + "_0_", &harmony_reasoning)
                             : AssistantMessage(ch.text, k.shape.parse, k.opened, "call_" + k.id + "_0_");
    const json u = WithReasoningTokens(usage, message, k.shape.parse.harmony ? harmony_reasoning : ch.reasoning_tokens);
    Store(message, ch.finish_reason, u);
    return builder_.Object(message, ch.finish_reason, u,
                           k.shape.parse.harmony ? json::array() : OutputTextLogprobs(k, ch, message));
  }

 private:
  // A Harmony (gpt-oss) answer's events: parsed on token ids (protocol/harmony.h), as the chat endpoint does.
  // (Output-text log-probs are not split from the analysis tokens for it: none are sent.)
  std::string HarmonyEvents(ApiCall& k, ApiCall::Choice& ch, const RequestOutput& ev, const json& usage) {
    HarmonyDelta hd;
    for (int32_t id : ev.token_ids) ch.harmony->Feed(id, &hd);
    if (ev.finished) ch.harmony->Finish(&hd);
    std::string events = builder_.ReasoningDelta(hd.reasoning) + builder_.TextDelta(hd.out.content);
    const std::string id_prefix = "call_" + k.id + "_0_";
    for (const ToolCallDelta& d : hd.out.calls) {
      const std::string call_id = id_prefix + std::to_string(d.index);
      if (d.first) events += builder_.CallStart(d.index, call_id, d.name);
      events += builder_.CallArgumentsDelta(d.index, call_id, d.arguments);
    }
    if (ev.finished) {
      const json message = AssistantMessageJson(ch.harmony->Result(), k.shape.parse, id_prefix);
      const json u = WithReasoningTokens(usage, message, ch.harmony->reasoning_tokens());
      events += builder_.Finish(message, ev.finish_reason, u, json::array());
      Store(message, ev.finish_reason, u);
    }
    return events;
  }

  // include message.output_text.logprobs: the output text's log-probs. The reasoning's tokens come first
  // (counted as reasoning_tokens); the output text has the rest.
  json OutputTextLogprobs(const ApiCall& k, const ApiCall::Choice& ch, const json& message) const {
    if (!request_->output_logprobs) return json::array();
    const bool reasoning = message.contains("reasoning_content") && ch.StartsThinking(k.opened);
    const size_t skip = reasoning ? std::min(ch.raw.size(), static_cast<size_t>(ch.reasoning_tokens)) : 0;
    return LogprobsJson(tok_, true, std::vector<TokenLogprob>(ch.raw.begin() + skip, ch.raw.end()), nullptr)["content"];
  }

  // The conversation as the next turn's chat messages: this input, then the answer (content and calls; reasoning
  // is not fed back, as chat templates drop it from earlier turns).
  void Store(const json& message, const std::string& finish_reason, const json& usage) {
    if (!request_->store || store_.capacity() == 0) return;
    nlohmann::ordered_json conversation = request_->conversation;
    // (A random model's text may not be UTF-8: its bytes become U+FFFD here, as in every answer the server sends.)
    auto copy = [](const json& j) { return nlohmann::ordered_json::parse(DumpJson(j)); };
    nlohmann::ordered_json answer = {{"role", "assistant"}, {"content", copy(message["content"])}};
    if (message.contains("tool_calls")) answer["tool_calls"] = copy(message["tool_calls"]);
    conversation.push_back(std::move(answer));
    store_.Put(builder_.id(), std::move(conversation), builder_.Object(message, finish_reason, usage));
  }

  const Tokenizer& tok_;
  ResponseBuilder builder_;
  std::shared_ptr<const ResponsesRequest> request_;
  ResponseStore& store_;
};

}  // namespace

std::unique_ptr<AnswerEncoder> MakeResponsesEncoder(const Tokenizer& tok, const std::string& model, const std::string& id,
                                                    int64_t created, std::shared_ptr<const ResponsesRequest> request,
                                                    ResponseStore& store) {
  return std::make_unique<ResponsesEncoder>(tok, model, id, created, std::move(request), store);
}

}  // namespace deepinfer
