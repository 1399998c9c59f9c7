// /v1/completions answers: text_completion objects, streamed as SSE chunks of text (the prompt's text first when
// echo is on) with completions-shaped log-probs, or one object with every choice (log-probs with text_offset).
#include <nlohmann/json.hpp>

#include "server/answer_encoder.h"
#include "server/answer_json.h"

namespace deepinfer {
namespace {

using nlohmann::json;

class CompletionsEncoder : public AnswerEncoder {
 public:
  CompletionsEncoder(const Tokenizer& tok, const std::string& model) : tok_(tok), model_(model) {}

  std::string StreamEvent(ApiCall& k, int index, const RequestOutput& ev, bool, const json&) override {
    ApiCall::Choice& ch = k.choices[index];
    std::string text = ev.text;
    if (k.shape.echo && !ch.role_sent) text = ch.echo + text;
    json lp_delta = nullptr;  // no text_offset in deltas
    if (k.logprobs >= 0 && !ev.logprobs.empty()) lp_delta = LogprobsJson(tok_, false, ev.logprobs, nullptr);
    if (text.empty() && !ev.finished && ch.role_sent && lp_delta.is_null()) return "";
    ch.role_sent = true;
    json choice = {{"index", index}, {"logprobs", lp_delta}, {"finish_reason", ev.finished ? json(ev.finish_reason) : json(nullptr)},
                   {"text", text}};
    json chunk = {{"id", k.id}, {"object", "text_completion"}, {"created", k.created}, {"model", model_},
                  {"choices", json::array({choice})}};
    if (k.shape.include_usage) chunk["usage"] = nullptr;
    return "data: " + DumpJson(chunk) + "\n\n";
  }

  std::string StreamEnd(ApiCall& k, const json& usage) override { return SseStreamEnd(k, "text_completion", model_, usage); }

  json Body(ApiCall& k, const json& usage) override {
    json choices = json::array();
    for (size_t i = 0; i < k.choices.size(); ++i) {
      const ApiCall::Choice& x = k.choices[i];
      json lp = nullptr;
      if (k.logprobs >= 0) {
        const size_t text_start = x.echo.size();
        lp = LogprobsJson(tok_, false, x.raw, &text_start);
      }
      choices.push_back({{"index", i}, {"logprobs", lp}, {"finish_reason", x.finish_reason}, {"text", x.echo + x.text}});
    }
    return {{"id", k.id}, {"object", "text_completion"}, {"created", k.created}, {"model", model_}, {"choices", choices},
            {"usage", usage}};
  }

 private:
  const Tokenizer& tok_;
  const std::string& model_;
};

}  // namespace

std::unique_ptr<AnswerEncoder> MakeCompletionsEncoder(const Tokenizer& tok, const std::string& model) {
  return std::make_unique<CompletionsEncoder>(tok, model);
}

}  // namespace deepinfer
