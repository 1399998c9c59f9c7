// Tool calls parsed as the answer streams: fed the answer's content text (after the <think> split) piece by piece,
// the streamer emits what became certain: content before the first call, then per call its name (once known) and
// its arguments text in fragments as they are generated, the shape OpenAI streams calls in.
//
// It is also the non-streamed parser (ParseAssistantOutput feeds it the whole answer at once), so a streamed
// answer's deltas concatenate to exactly the non-streamed message, whatever the model wrote. The rules:
//   - content is the text before the first call marker, without leading whitespace, and without trailing
//     whitespace when a call follows; text between and after calls is dropped;
//   - a call starts (and is sent) once its name is known; its arguments are the model's own text of the
//     arguments value, verbatim (a JSON string value: its contents; missing or null: "{}");
//   - a call cut off by max_tokens keeps the arguments it got (OpenAI does the same; finish_reason says
//     "length"); a marker followed by text that never names a call leaves the whole answer as content.
// Formats: Hermes / Qwen3 `<tool_call>{json}</tool_call>`, DeepSeek-V3 `<｜tool▁call▁begin｜>function<｜tool▁sep｜>
// NAME\n```json\nARGS\n```<｜tool▁call▁end｜>`, Llama-3.x bare `{json}` calls separated by ';' (after an optional
// <|python_tag|>; the answer must start with one), DeepSeek-V3.2 / V4 DSML (tool_stream_dsml.cc):
//   <｜DSML｜tool_calls>\n<｜DSML｜invoke name="NAME">\n<｜DSML｜parameter name="KEY" string="true">raw text
//   </｜DSML｜parameter>\n<｜DSML｜parameter name="K2" string="false">JSON</｜DSML｜parameter>\n</｜DSML｜invoke>\n
//   </｜DSML｜tool_calls>   (V3.2 names the block function_calls; both are read)
// whose parameters become the arguments object `{"KEY": "json-escaped raw text", "K2": JSON}`: a string="true"
// value is escaped a character at a time as it arrives; a string="false" value is held to its closing tag and sent
// verbatim (trimmed) when it parses as JSON, else as a JSON string of its raw text, so the arguments are always
// JSON; a parameter whose head is not `name="KEY" string="true|false">` is skipped. No parameters: "{}".
#pragma once
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/tool_parse.h"

namespace deepinfer {

// JSON's whitespace (RFC 8259: space, tab, CR, LF), which the tool-call and Harmony scanners skip.
inline bool IsJsonSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
// Length of the longest suffix of `s` that is a proper prefix of `marker` (text that may yet become it), which a
// streaming scanner holds back. `marker` is not empty.
inline size_t PartialMarker(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n)
    if (s.compare(s.size() - n, n, marker, 0, n) == 0) return n;
  return 0;
}

struct ToolCallDelta {
  int index = 0;          // the call's position in the answer
  bool first = false;     // the call's first delta: name is set
  std::string name;
  std::string arguments;  // the next fragment of its arguments text
};

struct ToolStreamDelta {
  std::string content;
  std::vector<ToolCallDelta> calls;
  bool empty() const { return content.empty() && calls.empty(); }
};

class ToolCallStreamer {
 public:
  // max_calls: calls after this many are dropped (parallel_tool_calls false: 1).
  explicit ToolCallStreamer(ToolFormat format, int max_calls = 1 << 30);
  void Feed(std::string_view text, ToolStreamDelta* out);
  void Finish(ToolStreamDelta* out);  // the end of the answer: held-back text resolved

  // The whole answer so far (after Finish: final): its content and calls.
  const std::string& content() const { return content_; }
  const std::vector<ParsedToolCall>& calls() const { return calls_; }

 private:
  enum class State { kLead, kContent, kBetween, kJsonCall, kAfterJsonCall, kDsType, kDsName, kDsFence, kDsArgs, kDsml, kDone };
  // DeepSeek DSML: where in an invoke block the scanner is.
  enum class Dsml { kInvoke, kName, kParams, kParamHead, kString, kJson, kSkip };
  // The Hermes / Llama-3 call object, scanned a character at a time.
  enum class Js { kBeforeObj, kKeyOrEnd, kKey, kColon, kValueStart, kValue, kAfterValue, kDone, kBad };
  enum class Kind { kName, kArgs, kOther };

  void Run(bool end, ToolStreamDelta* out);
  void Consume(size_t n);  // drops n characters from the front of buf_
  void Marker(size_t at);  // a call marker at buf_[at]
  bool JsonChar(char c, ToolStreamDelta* out);  // false: c was not consumed (reprocess it)
  void ValueDone(ToolStreamDelta* out);
  void BeginJsonCall();
  void StartCall(const std::string& name, ToolStreamDelta* out);
  void Args(std::string_view s, ToolStreamDelta* out);
  void Content(std::string_view s, ToolStreamDelta* out);
  void EndCall(ToolStreamDelta* out);
  // tool_stream_dsml.cc; false: needs more text. DsmlContent: content up to a block's opener.
  bool DsmlContent(bool end, ToolStreamDelta* out);
  bool DsmlStep(bool end, ToolStreamDelta* out);
  void DsmlEndInvoke(ToolStreamDelta* out);

  const ToolFormat format_;
  const int max_calls_;
  State state_ = State::kLead;
  std::string all_;        // every character fed (a marker that names no call turns it back into content)
  std::string buf_;        // text fed and not consumed yet (all_ from base_ on)
  size_t base_ = 0, marker_at_ = 0;
  bool marker_at_set_ = false;
  std::string held_ws_;    // content whitespace held back (dropped if a call follows)
  std::string ws_before_marker_;  // what held_ws_ held at the first marker
  bool marker_seen_ = false, content_started_ = false;
  std::string content_;
  std::vector<ParsedToolCall> calls_;
  // The call being read.
  bool in_call_ = false, named_ = false, has_args_ = false, ignored_ = false, args_seen_ = false;
  std::string name_, pending_args_;  // arguments read before the name (sent with it)
  // Hermes / Llama-3 object scanner.
  Js js_ = Js::kBeforeObj;
  Kind kind_ = Kind::kOther;
  std::string key_, value_;
  int depth_ = 0;
  bool in_str_ = false, esc_ = false, streaming_args_ = false;
  // DeepSeek-V3: the "```json\n" prefix read so far, arguments' whitespace held back (trimmed at the end).
  std::string fence_, args_ws_;
  bool args_started_ = false;
  // DeepSeek DSML: the block's closing marker (per its opener), parameters sent, a string="false" value so far.
  Dsml dsml_ = Dsml::kInvoke;
  const std::string* dsml_block_close_ = nullptr;
  int dsml_params_ = 0;
  std::string dsml_value_;
};

}  // namespace deepinfer
