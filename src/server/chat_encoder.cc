// /v1/chat/completions answers: chat.completion objects, or chat.completion.chunk SSE deltas. With tools the
// text goes through the tool-call parser as it streams (protocol/tool_stream.h): content deltas before the first
// call, then per call a delta with its index, id, type and name (arguments "") and its arguments in fragments as
// they are generated, the shape OpenAI streams calls in; a <think> template's reasoning is split off first into
// reasoning_content deltas. A choice that ended in calls finishes with "tool_calls".
#include <nlohmann/json.hpp>

#include "server/answer_encoder.h"
#include "server/answer_json.h"

namespace deepinfer {
namespace {

using nlohmann::json;

class ChatEncoder : public AnswerEncoder {
 public:
  ChatEncoder(const Tokenizer& tok, const std::string& model) : tok_(tok), model_(model) {}

  std::string StreamEvent(ApiCall& k, int index, const RequestOutput& ev, bool, const json&) override {
    ApiCall::Choice& ch = k.choices[index];
    const OutputParsing& parse = k.shape.parse;
    const std::string& text = ev.text;
    json lp_delta = nullptr;
    if (k.logprobs >= 0 && !ev.logprobs.empty()) lp_delta = LogprobsJson(tok_, true, ev.logprobs, nullptr);
    std::vector<json> deltas;  // what this event sends, one chunk each
    json delta = json::object();
    if (!ch.role_sent) delta["role"] = "assistant";
    if (parse.harmony) {
      // Harmony: the event's token ids, not its text (whose detokenizer dropped the channel markers).
      HarmonyDelta hd;
      for (int32_t id : ev.token_ids) ch.harmony->Feed(id, &hd);
      if (ev.finished) ch.harmony->Finish(&hd);
      if (!hd.reasoning.empty()) delta["reasoning_content"] = hd.reasoning;
      if (!hd.out.content.empty() || (!ch.role_sent && hd.reasoning.empty() && hd.out.calls.empty()))
        delta["content"] = hd.out.content;
      CallDeltas(k, index, hd.out, &delta, &deltas);
    } else if (parse.tools) {
      std::string r, c = text;
      if (parse.thinking) {
        c.clear();
        ch.Split(text, ev.finished, &r, &c);
      }
      ToolStreamDelta td;
      ch.tools->Feed(c, &td);
      if (ev.finished) ch.tools->Finish(&td);
      if (!r.empty()) delta["reasoning_content"] = r;
      if (!td.content.empty()) delta["content"] = td.content;
      CallDeltas(k, index, td, &delta, &deltas);
    } else if (parse.thinking) {
      std::string r, c;
      ch.Split(text, ev.finished, &r, &c);
      if (!r.empty()) delta["reasoning_content"] = r;
      if (!c.empty() || (!ch.role_sent && r.empty())) delta["content"] = c;
    } else if (!text.empty() || !ch.role_sent) {
      delta["content"] = text;
    }
    if (!delta.empty()) deltas.push_back(std::move(delta));
    if (deltas.empty() && (ev.finished || !lp_delta.is_null())) deltas.push_back(json::object());
    const bool calls = parse.tools && ev.finished && ev.finish_reason == "stop" &&
                       !(parse.harmony ? ch.harmony->calls() : ch.tools->calls()).empty();
    std::string out;
    for (size_t d = 0; d < deltas.size(); ++d) {
      const bool last = d + 1 == deltas.size();
      json choice = {{"index", index}, {"logprobs", d == 0 ? lp_delta : json(nullptr)},
                     {"finish_reason", ev.finished && last ? json(calls ? "tool_calls" : ev.finish_reason) : json(nullptr)},
                     {"delta", std::move(deltas[d])}};
      ch.role_sent = true;
      json chunk = {{"id", k.id}, {"object", "chat.completion.chunk"}, {"created", k.created}, {"model", model_},
                    {"choices", json::array({choice})}};
      if (k.shape.include_usage) chunk["usage"] = nullptr;
      out += "data: " + DumpJson(chunk) + "\n\n";
    }
    return out;
  }

  std::string StreamEnd(ApiCall& k, const json& usage) override { return SseStreamEnd(k, "chat.completion.chunk", model_, usage); }

  json Body(ApiCall& k, const json& usage) override {
    json choices = json::array();
    for (size_t i = 0; i < k.choices.size(); ++i) {
      const ApiCall::Choice& x = k.choices[i];
      json lp = nullptr;
      if (k.logprobs >= 0) lp = LogprobsJson(tok_, true, x.raw, nullptr);
      const std::string id_prefix = "call_" + k.id + "_" + std::to_string(i) + "_";
      json message = k.shape.parse.harmony ? HarmonyAssistantMessage(tok_, x.token_ids, k.shape.parse, id_prefix)
                                           : AssistantMessage(x.text, k.shape.parse, k.opened, id_prefix);
      const bool calls = message.contains("tool_calls") && x.finish_reason == "stop";
      choices.push_back({{"index", i}, {"logprobs", lp}, {"finish_reason", calls ? "tool_calls" : x.finish_reason},
                         {"message", std::move(message)}});
    }
    return {{"id", k.id}, {"object", "chat.completion"}, {"created", k.created}, {"model", model_}, {"choices", choices},
            {"usage", usage}};
  }

 private:
  // The chunks of a delta's tool calls: per call a first chunk with its index, id, type and name (arguments ""),
  // then its argument fragments. What `delta` holds so far goes out first, in its own chunk.
  static void CallDeltas(const ApiCall& k, int index, const ToolStreamDelta& td, json* delta, std::vector<json>* deltas) {
    if (td.calls.empty()) return;
    if (!delta->empty()) deltas->push_back(std::move(*delta));
    *delta = json::object();
    const std::string id_prefix = "call_" + k.id + "_" + std::to_string(index) + "_";
    for (const ToolCallDelta& d : td.calls) {
      if (d.first)
        deltas->push_back({{"tool_calls", json::array({{{"index", d.index}, {"id", id_prefix + std::to_string(d.index)},
                                                        {"type", "function"},
                                                        {"function", {{"name", d.name}, {"arguments", ""}}}}})}});
      if (!d.arguments.empty())
        deltas->push_back({{"tool_calls", json::array({{{"index", d.index}, {"function", {{"arguments", d.arguments}}}}})}});
    }
  }

  const Tokenizer& tok_;
  const std::string& model_;
};

}  // namespace

std::unique_ptr<AnswerEncoder> MakeChatEncoder(const Tokenizer& tok, const std::string& model) {
  return std::make_unique<ChatEncoder>(tok, model);
}

}  // namespace deepinfer
