// Assistant output -> OpenAI message fields: `<think>` reasoning split into reasoning_content, and tool calls
// parsed out of the text in the format the model's chat template teaches (Qwen3 / Hermes `<tool_call>` JSON,
// DeepSeek-V3's `<｜tool▁call▁begin｜>` blocks, Llama-3.x bare JSON). Non-streamed answers only for now.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace deepinfer {

enum class ToolFormat { kNone, kHermes, kDeepSeekV3, kLlama3Json };

// The format a chat template's tool calls use, picked by marker text as llama.cpp does (DeepSeek first, then
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

// `tools`: parse calls in `format`; `thinking`: split reasoning. Text that does not parse as calls stays content.
ParsedAssistant ParseAssistantOutput(const std::string& text, ToolFormat format, bool tools, bool thinking);

}  // namespace deepinfer
