#include "protocol/tool_parse.h"

#include "protocol/tool_stream.h"

#include <algorithm>

namespace deepinfer {

ToolFormat DetectToolFormat(const std::string& t) {
  if (t.find("<|channel|>") != std::string::npos) return ToolFormat::kHarmony;  // llama.cpp common/chat.cpp
  if (t.find("DSML") != std::string::npos) return ToolFormat::kDeepSeekDsml;  // DeepSeek-V3.2 / V4
  if (t.find("tool▁calls▁begin") != std::string::npos) return ToolFormat::kDeepSeekV3;
  if (t.find("<tool_call>") != std::string::npos) return ToolFormat::kHermes;
  if (t.find("<|start_header_id|>ipython<|end_header_id|>") != std::string::npos ||
      t.find("<|python_tag|>") != std::string::npos)
    return ToolFormat::kLlama3Json;
  return ToolFormat::kNone;
}

bool TemplateHasThinking(const std::string& t) { return t.find("<think>") != std::string::npos; }

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
      while (a < held_.size() && IsJsonSpace(held_[a])) ++a;
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
        while (a < held_.size() && IsJsonSpace(held_[a])) ++a;
        held_.erase(0, a);
      }
      const size_t at = held_.find(close);
      std::string out = at == std::string::npos ? held_ : held_.substr(0, at);
      size_t keep = 0;  // held back: a partial </think>, and the whitespace before it (trimmed if it closes)
      if (at == std::string::npos) {
        keep = end ? 0 : PartialMarker(out, close);
        size_t w = out.size() - keep;
        while (w > 0 && IsJsonSpace(out[w - 1])) --w;
        keep = out.size() - w;  // at the end that is trailing whitespace, which trimming drops
        out.resize(w);
      } else {
        while (!out.empty() && IsJsonSpace(out.back())) out.pop_back();
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
  while (e > 0 && IsJsonSpace(tail[e - 1])) --e;
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
  if (!tools || format == ToolFormat::kNone) return out;
  // The streaming parser over the whole answer: a streamed answer's deltas are this, piece by piece.
  ToolCallStreamer calls(format);
  ToolStreamDelta ignored;
  calls.Feed(rest, &ignored);
  calls.Finish(&ignored);
  out.tool_calls = calls.calls();
  if (out.tool_calls.empty()) out.content = calls.content();
  else out.content = calls.content().empty() ? std::nullopt : std::optional<std::string>(calls.content());
  return out;
}

}  // namespace deepinfer
