// The OpenAI JSON pieces every endpoint's answers share (answer_json.h).
#include "server/answer_json.h"

#include "tokenizer/tokenizer.h"

namespace deepinfer {

using nlohmann::json;

std::string DumpJson(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string SseStreamEnd(const ApiCall& k, const char* object, const std::string& model, const json& usage) {
  std::string out;
  if (k.shape.include_usage) {
    json chunk = {{"id", k.id}, {"object", object}, {"created", k.created}, {"model", model}, {"choices", json::array()},
                  {"usage", usage}};
    out = "data: " + DumpJson(chunk) + "\n\n";
  }
  return out + "data: [DONE]\n\n";
}

// OpenAI's logprobs object for `lps`, in the chat shape ({"content": [{token, logprob, top_logprobs: [{token,
// logprob}]}]}) or the completions one ({tokens, token_logprobs, top_logprobs: [{token: logprob}]}, plus
// text_offset, each token's byte offset in the choice's text starting at `*text_offset`, when given).
json LogprobsJson(const Tokenizer& tok, bool chat, const std::vector<TokenLogprob>& lps, const size_t* text_offset) {
  if (chat) {
    // `bytes`: the token's own bytes, since `token` is only valid UTF-8 once a character's tokens are joined
    // (a byte-fallback or split token reads as U+FFFD there); clients rebuild the text from these.
    auto entry = [&](int32_t id, float logprob) {
      const std::string t = tok.TokenBytes(id);
      json bytes = json::array();
      for (unsigned char b : t) bytes.push_back(b);
      return json{{"token", t}, {"logprob", logprob}, {"bytes", std::move(bytes)}};
    };
    json content = json::array();
    for (const auto& l : lps) {
      json top = json::array();
      for (const auto& [id, v] : l.top) top.push_back(entry(id, v));
      json e = entry(l.token, l.logprob);
      e["top_logprobs"] = std::move(top);
      content.push_back(std::move(e));
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_logprobs = json::array(), tops = json::array(), offsets = json::array();
  size_t offset = text_offset ? *text_offset : 0;
  for (const auto& l : lps) {
    std::string t = tok.TokenBytes(l.token);
    if (text_offset) {
      offsets.push_back(offset);
      offset += t.size();
    }
    tokens.push_back(std::move(t));
    token_logprobs.push_back(l.logprob);
    json top = json::object();
    for (const auto& [id, v] : l.top) top[tok.TokenBytes(id)] = v;
    tops.push_back(top);
  }
  json out = {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", tops}};
  if (text_offset) out["text_offset"] = offsets;
  return out;
}

// The assistant message for a chat answer: content (null when only tools were called), reasoning_content when
// a <think> block was split off, tool_calls with ids unique within the response.
json AssistantMessage(const std::string& text, const OutputParsing& parse, bool opened, const std::string& id_prefix) {
  return AssistantMessageJson(ParseAssistantOutput(text, parse.format, parse.tools, parse.thinking, opened), parse, id_prefix);
}

json HarmonyAssistantMessage(const Tokenizer& tok, const std::vector<int32_t>& ids, const OutputParsing& parse,
                             const std::string& id_prefix, int* reasoning_tokens) {
  HarmonyParser p(tok, parse.harmony_tokens, parse.tools, parse.single_call ? 1 : 1 << 30);
  HarmonyDelta ignored;
  for (int32_t id : ids) p.Feed(id, &ignored);
  p.Finish(&ignored);
  if (reasoning_tokens) *reasoning_tokens = p.reasoning_tokens();
  return AssistantMessageJson(p.Result(), parse, id_prefix);
}

json AssistantMessageJson(ParsedAssistant p, const OutputParsing& parse, const std::string& id_prefix) {
  if (parse.single_call && p.tool_calls.size() > 1) p.tool_calls.resize(1);  // parallel_tool_calls false
  json m = {{"role", "assistant"}, {"content", p.content ? json(*p.content) : json(nullptr)}};
  if (p.reasoning) m["reasoning_content"] = *p.reasoning;
  if (!p.tool_calls.empty()) {
    json calls = json::array();
    for (size_t i = 0; i < p.tool_calls.size(); ++i)
      calls.push_back({{"id", id_prefix + std::to_string(i)}, {"type", "function"},
                       {"function", {{"name", p.tool_calls[i].name}, {"arguments", p.tool_calls[i].arguments}}}});
    m["tool_calls"] = calls;
  }
  return m;
}

// The usage with completion_tokens_details.reasoning_tokens: the tokens up to </think> when the answer has
// reasoning, else 0.
json WithReasoningTokens(const json& usage, const json& message, int reasoning_tokens) {
  json u = usage;
  auto r = message.find("reasoning_content");
  const bool has = r != message.end() && r->is_string() && !r->get_ref<const std::string&>().empty();
  u["completion_tokens_details"] = {{"reasoning_tokens", has ? reasoning_tokens : 0}};
  return u;
}

}  // namespace deepinfer
