// Assistant output -> OpenAI message fields: `<think>` reasoning split into reasoning_content, and tool calls
// parsed out of the text in the format the model's chat template teaches (Qwen3 / Hermes `<tool_call>` JSON,
// DeepSeek-V3's `<｜tool▁call▁begin｜>` blocks, DeepSeek-V4's DSML `<｜DSML｜invoke>` blocks, Llama-3.x bare JSON); the calls are read by the streaming parser
// (tool_stream.h), so a streamed answer and a non-streamed one agree.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer {

// kHarmony (gpt-oss) is parsed on token ids by protocol/harmony.h, not by ToolCallStreamer.
enum class ToolFormat { kNone, kHermes, kDeepSeekV3, kDeepSeekDsml, kLlama3Json, kHarmony };

// The format a chat template's tool calls use, picked by marker text as llama.cpp does (Harmony's `<|channel|>`
// first, then DeepSeek-V4's `DSML` (before V3's markers, which a V4 template could mention), then DeepSeek-V3, then
// `<tool_call>`, then Llama-3.x's ipython role).
ToolFormat DetectToolFormat(const std::string& template_source);
// Whether the template writes `<think>` blocks (Qwen3, DeepSeek-R1/V3.1): reasoning is then split off.
bool TemplateHasThinking(const std::string& template_source);

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // a JSON object as text, as OpenAI sends it
};

struct ParsedAssistant {
  std::optional<std::string> content;    // nullopt: null (only tool calls)
  std::optional<std::string> reasoning;  // the text before `</think>`
  std::vector<ParsedToolCall> tool_calls;
};

// The `<think>` split, incrementally, so a stream's reasoning_content / content deltas concatenate to exactly
// what the finished answer gives. The rule is one a stream can decide as it goes: the answer is reasoning from
// its start when the prompt left a `<think>` open (`opened`: DeepSeek-R1 / V3.1 style generation prompts) or the
// output itself starts with `<think>` (Qwen3), and reasoning ends at `</think>` (never closed: all reasoning);
// otherwise all of it is content. Reasoning is trimmed; the newlines right after `</think>` are dropped.
class ReasoningSplitter {
 public:
  explicit ReasoningSplitter(bool opened) : state_(opened ? kReasoning : kStart) {}
  // Appends what became certain to *reasoning / *content; text that could still be a marker is held back.
  void Feed(std::string_view text, std::string* reasoning, std::string* content);
  void Finish(std::string* reasoning, std::string* content);  // the end: held text resolved
  bool reasoned() const { return reasoned_; }                 // reasoning mode was entered

 private:
  void Step(bool end, std::string* reasoning, std::string* content);
  enum State { kStart, kReasoning, kAfter, kContent } state_;
  std::string held_;
  bool reasoned_ = false, emitted_ = false;  // emitted_: reasoning text went out (leading whitespace is dropped)
};

// True when a rendered prompt ends inside an open `<think>` block.
bool PromptOpensThinking(const std::string& prompt_tail);

// `tools`: parse calls in `format` (ToolCallStreamer's rules); `thinking`: split reasoning (ReasoningSplitter,
// `opened` as there). Text that names no call stays content.
ParsedAssistant ParseAssistantOutput(const std::string& text, ToolFormat format, bool tools, bool thinking,
                                     bool opened = false);

}  // namespace deepinfer
