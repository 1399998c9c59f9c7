#include "server/tool_parse.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace deepinfer {
namespace {

using ojson = nlohmann::ordered_json;

std::string Trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r\n") - a + 1);
}

// {"name": ..., "arguments" | "parameters": {...}} -> a call; false if it is not one.
bool CallFromJson(const ojson& j, ParsedToolCall* out) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  const ojson* args = nullptr;
  if (auto a = j.find("arguments"); a != j.end()) args = &*a;
  else if (auto p = j.find("parameters"); p != j.end()) args = &*p;
  out->name = j["name"].get<std::string>();
  if (!args || args->is_null()) out->arguments = "{}";
  else if (args->is_string()) out->arguments = args->get<std::string>();  // already JSON text
  else out->arguments = args->dump(-1, ' ', false, ojson::error_handler_t::replace);
  return true;
}

// Qwen3 / Hermes: <tool_call>{"name": ..., "arguments": {...}}</tool_call>, repeated; the last may be unclosed
// (generation stopped at the end tag or ran out of tokens after a complete JSON object).
bool ParseHermes(const std::string& text, ParsedAssistant* out) {
  const std::string open = "<tool_call>", close = "</tool_call>";
  const size_t first = text.find(open);
  if (first == std::string::npos) return false;
  std::vector<ParsedToolCall> calls;
  for (size_t at = first; at != std::string::npos; at = text.find(open, at)) {
    at += open.size();
    const size_t end = text.find(close, at);
    const ojson j = ojson::parse(Trim(text.substr(at, end == std::string::npos ? std::string::npos : end - at)), nullptr, false);
    ParsedToolCall call;
    if (j.is_discarded() || !CallFromJson(j, &call)) return false;
    calls.push_back(std::move(call));
    if (end == std::string::npos) break;
    at = end + close.size();
  }
  const std::string before = Trim(text.substr(0, first));
  out->content = before.empty() ? std::nullopt : std::optional<std::string>(before);
  out->tool_calls = std::move(calls);
  return true;
}

// DeepSeek-V3: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>...
// Arguments are taken verbatim (they are the model's JSON text), as vLLM's deepseek_v3 parser does.
bool ParseDeepSeekV3(const std::string& text, ParsedAssistant* out) {
  const std::string calls_begin = "<｜tool▁calls▁begin｜>", call_begin = "<｜tool▁call▁begin｜>",
                    sep = "<｜tool▁sep｜>", call_end = "<｜tool▁call▁end｜>";
  const size_t first = text.find(calls_begin);
  if (first == std::string::npos) return false;
  std::vector<ParsedToolCall> calls;
  for (size_t at = text.find(call_begin, first); at != std::string::npos; at = text.find(call_begin, at)) {
    const size_t s = text.find(sep, at);
    const size_t e = text.find(call_end, at);
    if (s == std::string::npos || e == std::string::npos || s > e) return false;
    const std::string body = text.substr(s + sep.size(), e - s - sep.size());  // NAME\n```json\nARGS\n```
    const size_t nl = body.find('\n');
    if (nl == std::string::npos) return false;
    std::string args = body.substr(nl + 1);
    if (args.rfind("```json\n", 0) != 0) return false;
    args = args.substr(8);
    const size_t fence = args.rfind("```");
    if (fence == std::string::npos) return false;
    args = Trim(args.substr(0, fence));
    if (ojson::parse(args, nullptr, false).is_discarded()) return false;
    calls.push_back({Trim(body.substr(0, nl)), args});
    at = e + call_end.size();
  }
  if (calls.empty()) return false;
  const std::string before = Trim(text.substr(0, first));
  out->content = before.empty() ? std::nullopt : std::optional<std::string>(before);
  out->tool_calls = std::move(calls);
  return true;
}

// Llama-3.x JSON tool calling: the whole answer is {"name": ..., "parameters": {...}} (after an optional
// <|python_tag|>), several separated by ';'. Anything else is plain content.
bool ParseLlama3(const std::string& text, ParsedAssistant* out) {
  std::string t = Trim(text);
  if (t.rfind("<|python_tag|>", 0) == 0) t = Trim(t.substr(14));
  if (t.empty() || t[0] != '{') return false;
  std::vector<ParsedToolCall> calls;
  size_t at = 0;
  while (at < t.size()) {
    // The longest prefix that parses: find each '}' in turn (objects nest, so try until one parses).
    bool found = false;
    for (size_t e = t.find('}', at); e != std::string::npos; e = t.find('}', e + 1)) {
      const ojson j = ojson::parse(t.substr(at, e + 1 - at), nullptr, false);
      if (j.is_discarded()) continue;
      ParsedToolCall call;
      if (!CallFromJson(j, &call)) return false;
      calls.push_back(std::move(call));
      at = t.find_first_not_of(" \t\r\n", e + 1);
      found = true;
      break;
    }
    if (!found) return false;
    if (at == std::string::npos) break;
    if (t[at] != ';') return false;
    at = t.find_first_not_of(" \t\r\n", at + 1);
    if (at == std::string::npos) break;
  }
  out->content = std::nullopt;
  out->tool_calls = std::move(calls);
  return !out->tool_calls.empty();
}

}  // namespace

ToolFormat DetectToolFormat(const std::string& t) {
  if (t.find("tool▁calls▁begin") != std::string::npos) return ToolFormat::kDeepSeekV3;
  if (t.find("<tool_call>") != std::string::npos) return ToolFormat::kHermes;
  if (t.find("<|start_header_id|>ipython<|end_header_id|>") != std::string::npos ||
      t.find("<|python_tag|>") != std::string::npos)
    return ToolFormat::kLlama3Json;
  return ToolFormat::kNone;
}

bool TemplateHasThinking(const std::string& t) { return t.find("<think>") != std::string::npos; }

namespace {
bool IsWs(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
// Length of the longest suffix of `s` that is a proper prefix of `marker` (text that may yet become it).
size_t PartialMarker(const std::string& s, const std::string& marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.compare(s.size() - n, n, marker, 0, n) == 0) return n;
  return 0;
}
}  // namespace

void ReasoningSplitter::Feed(std::string_view text, std::string* reasoning, std::string* content) {
  held_.append(text);
  Step(false, reasoning, content);
}

void ReasoningSplitter::Finish(std::string* reasoning, std::string* content) { Step(true, reasoning, content); }

void ReasoningSplitter::Step(bool end, std::string* reasoning, std::string* content) {
  static const std::string open = "<think>", close = "</think>";
  for (;;) {
    if (state_ == kStart) {
      size_t a = 0;
      while (a < held_.size() && IsWs(held_[a])) ++a;
      const std::string rest = held_.substr(a);
      if (rest.rfind(open, 0) == 0) {
        held_ = held_.substr(a + open.size());
        state_ = kReasoning;
        continue;
      }
      if (!end && open.rfind(rest, 0) == 0) return;  // still a prefix of <think> (or only whitespace)
      state_ = kContent;
      continue;
    }
    if (state_ == kReasoning) {
      reasoned_ = true;
      if (!emitted_) {  // reasoning is trimmed: drop its leading whitespace
        size_t a = 0;
        while (a < held_.size() && IsWs(held_[a])) ++a;
        held_.erase(0, a);
      }
      const size_t at = held_.find(close);
      std::string out = at == std::string::npos ? held_ : held_.substr(0, at);
      size_t keep = 0;  // held back: a partial </think>, and the whitespace before it (trimmed if it closes)
      if (at == std::string::npos) {
        keep = end ? 0 : PartialMarker(out, close);
        size_t w = out.size() - keep;
        while (w > 0 && IsWs(out[w - 1])) --w;
        keep = out.size() - w;  // at the end that is trailing whitespace, which trimming drops
        out.resize(w);
      } else {
        while (!out.empty() && IsWs(out.back())) out.pop_back();
      }
      if (!out.empty()) emitted_ = true;
      reasoning->append(out);
      if (at == std::string::npos) {
        held_ = end ? "" : held_.substr(held_.size() - keep);
        return;
      }
      held_ = held_.substr(at + close.size());
      state_ = kAfter;
      continue;
    }
    if (state_ == kAfter) {
      size_t a = 0;
      while (a < held_.size() && (held_[a] == '\r' || held_[a] == '\n')) ++a;
      held_.erase(0, a);
      if (held_.empty() && !end) return;
      state_ = kContent;
      continue;
    }
    content->append(held_);
    held_.clear();
    return;
  }
}

bool PromptOpensThinking(const std::string& tail) {
  size_t e = tail.size();
  while (e > 0 && IsWs(tail[e - 1])) --e;
  return e >= 7 && tail.compare(e - 7, 7, "<think>") == 0;
}

ParsedAssistant ParseAssistantOutput(const std::string& text, ToolFormat format, bool tools, bool thinking,
                                     bool opened) {
  ParsedAssistant out;
  std::string rest = text;
  if (thinking) {
    ReasoningSplitter split(opened);
    std::string reasoning;
    rest.clear();
    split.Feed(text, &reasoning, &rest);
    split.Finish(&reasoning, &rest);
    if (split.reasoned()) out.reasoning = std::move(reasoning);
  }
  out.content = rest;
  if (!tools) return out;
  ParsedAssistant calls;
  const bool parsed = format == ToolFormat::kHermes       ? ParseHermes(rest, &calls)
                      : format == ToolFormat::kDeepSeekV3 ? ParseDeepSeekV3(rest, &calls)
                      : format == ToolFormat::kLlama3Json ? ParseLlama3(rest, &calls)
                                                          : false;
  if (parsed) {
    out.content = calls.content;
    out.tool_calls = std::move(calls.tool_calls);
  }
  return out;
}

}  // namespace deepinfer
