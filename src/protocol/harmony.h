// gpt-oss's Harmony output -> OpenAI message fields, streamed and not (docs/design/gpt_oss.md section 6).
//
// A turn is a run of messages `[<|start|>assistant]{header}<|message|>{body}<|end|>`, the last one ending in
// <|return|> (final answer) or <|call|> (tool call); the generation prompt already wrote the first
// `<|start|>assistant`. The header names the channel (`<|channel|>analysis|commentary|final`), optionally a
// recipient (` to=functions.NAME`, in the role part or after the channel) and a content type (` json`,
// ` <|constrain|>json`). Bodies map to: analysis -> reasoning_content; final, and commentary without a recipient
// (preambles) -> content; recipient functions.NAME -> a tool call whose arguments are the body text; any other
// recipient (built-in browser / python tools) -> dropped.
//
// The parser reads token ids, not text. The markers are single special tokens, which the engine's detokenizer
// drops (StreamDecoder skips specials, so stop strings and plain completions never see them); reading ids keeps
// that path untouched, and a model that writes the characters "<|channel|>" as ordinary text cannot forge a
// header. Only header text (channel name, recipient, content type: a few ordinary tokens) is held until
// <|message|>; body tokens go out as reasoning / content / argument deltas as they arrive (an incomplete UTF-8
// sequence waits for its next byte). The non-streamed answer is the same parser fed every id at once, so a
// streamed answer's deltas concatenate to exactly the non-streamed message.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "protocol/tool_parse.h"
#include "protocol/tool_stream.h"

namespace deepinfer {

class Tokenizer;

// The ids of the Harmony markers in a vocabulary (-1: absent).
struct HarmonyTokens {
  int32_t start = -1, end = -1, message = -1, channel = -1, constrain = -1, ret = -1, call = -1;
  // The vocabulary can carry Harmony output: the markers every message needs are there.
  bool usable() const { return start >= 0 && end >= 0 && message >= 0 && channel >= 0; }
};
HarmonyTokens FindHarmonyTokens(const Tokenizer& tok);

struct HarmonyDelta {
  std::string reasoning;
  ToolStreamDelta out;  // content and tool-call deltas, as ToolCallStreamer gives them
  bool empty() const { return reasoning.empty() && out.empty(); }
};

class HarmonyParser {
 public:
  // tools: recipient functions.NAME messages become calls (else they are dropped, as llama.cpp consumes an
  // unsolicited call without tools); max_calls: calls after this many are dropped (parallel_tool_calls false).
  HarmonyParser(const Tokenizer& tok, HarmonyTokens t, bool tools, int max_calls = 1 << 30);
  void Feed(int32_t id, HarmonyDelta* d);
  void Finish(HarmonyDelta* d);  // the end of the answer: held bytes resolved

  const std::string& reasoning() const { return reasoning_; }
  const std::string& content() const { return content_; }
  const std::vector<ParsedToolCall>& calls() const { return calls_; }
  bool reasoned() const { return reasoned_; }            // an analysis message was opened
  int reasoning_tokens() const { return reasoning_tokens_; }
  ParsedAssistant Result() const;                        // the message (after Finish: final)

 private:
  enum class State { kHeader, kBody, kBetween, kDone };
  enum class Target { kReasoning, kContent, kCall, kDrop };
  void OpenBody(HarmonyDelta* d);  // <|message|>: the header decides where the body goes
  void Emit(const std::string& bytes, bool final, HarmonyDelta* d);
  void CloseBody(HarmonyDelta* d);

  const Tokenizer& tok_;
  const HarmonyTokens t_;
  const bool tools_;
  const int max_calls_;
  State state_ = State::kHeader;
  Target target_ = Target::kDrop;
  std::string header_;   // the header so far, markers written as their text
  bool any_marker_ = false;  // a Harmony marker was seen (else unstructured text is content at the end)
  std::string pending_;  // body bytes of an incomplete UTF-8 sequence
  std::string reasoning_, content_;
  std::vector<ParsedToolCall> calls_;
  bool call_has_args_ = false, reasoned_ = false;
  int reasoning_tokens_ = 0;
};

// The whole answer at once (the non-streamed message).
ParsedAssistant ParseHarmony(const Tokenizer& tok, const HarmonyTokens& t, const std::vector<int32_t>& ids, bool tools,
                             int max_calls = 1 << 30);

}  // namespace deepinfer
