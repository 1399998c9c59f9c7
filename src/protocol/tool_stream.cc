#include "protocol/tool_stream.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace deepinfer {
namespace {

const std::string kHermesOpen = "<tool_call>";
const std::string kDsCallsBegin = "<｜tool▁calls▁begin｜>", kDsCallBegin = "<｜tool▁call▁begin｜>", kDsSep = "<｜tool▁sep｜>";
const std::string kDsFenceOpen = "```json\n", kDsFenceClose = "```";
const std::string kPythonTag = "<|python_tag|>";


std::string Trim(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && IsJsonSpace(s[a])) ++a;
  while (b > a && IsJsonSpace(s[b - 1])) --b;
  return std::string(s.substr(a, b - a));
}

// A JSON string token's value (its raw text if it does not parse).
std::string Unescape(const std::string& token) {
  const nlohmann::json j = nlohmann::json::parse(token, nullptr, false);
  return j.is_string() ? j.get<std::string>() : token;
}

}  // namespace

ToolCallStreamer::ToolCallStreamer(ToolFormat format, int max_calls) : format_(format), max_calls_(max_calls) {}

void ToolCallStreamer::Feed(std::string_view text, ToolStreamDelta* out) {
  all_.append(text);
  buf_.append(text);
  Run(false, out);
}

void ToolCallStreamer::Finish(ToolStreamDelta* out) {
  Run(true, out);
  if (in_call_) EndCall(out);
  if (marker_seen_ && calls_.empty()) {
    // A marker that never named a call: the whole answer from the marker on is content after all.
    const std::string rest = ws_before_marker_ + all_.substr(marker_at_);
    out->content += rest;
    content_ += rest;
  } else if (!marker_seen_) {
    out->content += held_ws_;  // no call follows: trailing whitespace is content
    content_ += held_ws_;
    held_ws_.clear();
  }
  state_ = State::kDone;
}

void ToolCallStreamer::Consume(size_t n) {
  buf_.erase(0, n);
  base_ += n;
}

void ToolCallStreamer::Content(std::string_view s, ToolStreamDelta* out) {
  size_t e = s.size();
  while (e > 0 && IsJsonSpace(s[e - 1])) --e;
  if (e == 0) {  // only whitespace: held (dropped before any content, and if a call follows)
    if (content_started_) held_ws_.append(s);
    return;
  }
  std::string piece = held_ws_;
  piece.append(s.substr(0, e));
  held_ws_.assign(s.substr(e));
  content_started_ = true;
  out->content += piece;
  content_ += piece;
}

void ToolCallStreamer::Marker(size_t at) {
  marker_seen_ = true;
  if (calls_.empty() && !marker_at_set_) {
    marker_at_ = base_ + at;
    marker_at_set_ = true;
    ws_before_marker_ = held_ws_;  // content again if the marker names no call
  }
  held_ws_.clear();  // content's trailing whitespace: dropped before a call
}

void ToolCallStreamer::StartCall(const std::string& name, ToolStreamDelta* out) {
  named_ = true;
  if (static_cast<int>(calls_.size()) >= max_calls_) {
    ignored_ = true;  // over the limit: read, not sent
    return;
  }
  calls_.push_back({name, ""});
  ToolCallDelta d;
  d.index = static_cast<int>(calls_.size()) - 1;
  d.first = true;
  d.name = name;
  out->calls.push_back(std::move(d));
  if (!pending_args_.empty()) {
    const std::string a = std::move(pending_args_);
    pending_args_.clear();
    Args(a, out);
  }
}

void ToolCallStreamer::Args(std::string_view s, ToolStreamDelta* out) {
  if (s.empty()) return;
  if (!named_) {
    pending_args_.append(s);
    return;
  }
  has_args_ = true;
  if (ignored_) return;
  const int index = static_cast<int>(calls_.size()) - 1;
  calls_.back().arguments.append(s);
  if (out->calls.empty() || out->calls.back().index != index) {
    ToolCallDelta d;
    d.index = index;
    out->calls.push_back(std::move(d));
  }
  out->calls.back().arguments.append(s);
}

void ToolCallStreamer::EndCall(ToolStreamDelta* out) {
  if (named_ && !has_args_) Args("{}", out);  // no arguments (or null): an empty object, as OpenAI sends
  in_call_ = named_ = has_args_ = ignored_ = args_seen_ = streaming_args_ = false;
  pending_args_.clear();
  name_.clear();
}

void ToolCallStreamer::BeginJsonCall() {
  in_call_ = true;
  js_ = Js::kBeforeObj;
}

// One character of a Hermes / Llama-3 call object. Returns false when c ended a literal value without being
// part of it (the caller passes it again, now after the value).
bool ToolCallStreamer::JsonChar(char c, ToolStreamDelta* out) {
  switch (js_) {
    case Js::kBeforeObj:
      if (IsJsonSpace(c)) return true;
      js_ = c == '{' ? Js::kKeyOrEnd : Js::kBad;
      return true;
    case Js::kKeyOrEnd:
      if (IsJsonSpace(c)) return true;
      if (c == '"') {
        key_.clear();
        esc_ = false;
        js_ = Js::kKey;
      } else {
        js_ = c == '}' ? Js::kDone : Js::kBad;
      }
      return true;
    case Js::kKey:
      if (esc_) esc_ = false;
      else if (c == '\\') esc_ = true;
      else if (c == '"') {
        js_ = Js::kColon;
        return true;
      }
      key_ += c;
      return true;
    case Js::kColon:
      if (IsJsonSpace(c)) return true;
      js_ = c == ':' ? Js::kValueStart : Js::kBad;
      return true;
    case Js::kValueStart:
      if (IsJsonSpace(c)) return true;
      if (c == ',' || c == '}' || c == ']' || c == ':') {
        js_ = Js::kBad;
        return true;
      }
      kind_ = key_ == "name" && !named_                                    ? Kind::kName
              : (key_ == "arguments" || key_ == "parameters") && !args_seen_ ? Kind::kArgs
                                                                             : Kind::kOther;
      value_.assign(1, c);
      depth_ = c == '{' || c == '[' ? 1 : 0;
      in_str_ = c == '"';
      esc_ = false;
      js_ = Js::kValue;
      if (kind_ == Kind::kArgs && depth_ == 1) {
        streaming_args_ = true;  // an object (or array): its text is the arguments, sent as it comes
        Args(std::string_view(&c, 1), out);
      }
      return true;
    case Js::kValue:
      if (!in_str_ && depth_ == 0 && value_[0] != '"') {  // a literal: number, true, false, null
        if (c == ',' || c == '}' || c == ']' || IsJsonSpace(c)) {
          ValueDone(out);
          return false;
        }
        value_ += c;
        return true;
      }
      value_ += c;
      if (streaming_args_) Args(std::string_view(&c, 1), out);
      if (in_str_) {
        if (esc_) esc_ = false;
        else if (c == '\\') esc_ = true;
        else if (c == '"') {
          in_str_ = false;
          if (depth_ == 0) ValueDone(out);
        }
      } else if (c == '"') {
        in_str_ = true;
      } else if (c == '{' || c == '[') {
        ++depth_;
      } else if ((c == '}' || c == ']') && --depth_ == 0) {
        ValueDone(out);
      }
      return true;
    case Js::kAfterValue:
      if (IsJsonSpace(c)) return true;
      js_ = c == ',' ? Js::kKeyOrEnd : c == '}' ? Js::kDone : Js::kBad;
      return true;
    case Js::kDone:
    case Js::kBad:
      return true;
  }
  return true;
}

void ToolCallStreamer::ValueDone(ToolStreamDelta* out) {
  js_ = Js::kAfterValue;
  if (kind_ == Kind::kName) {
    if (value_[0] == '"') StartCall(Unescape(value_), out);
  } else if (kind_ == Kind::kArgs) {
    args_seen_ = true;
    if (streaming_args_) streaming_args_ = false;           // sent already
    else if (value_[0] == '"') Args(Unescape(value_), out);  // a string holding the JSON text
    else if (value_ != "null") Args(value_, out);
  }
}

void ToolCallStreamer::Run(bool end, ToolStreamDelta* out) {
  for (;;) {
    switch (state_) {
      case State::kLead: {
        if (format_ == ToolFormat::kNone) {  // nothing to parse: the text as it is
          content_started_ = true;
          state_ = State::kContent;
          continue;
        }
        size_t a = 0;
        while (a < buf_.size() && IsJsonSpace(buf_[a])) ++a;
        Consume(a);
        if (buf_.empty()) return;
        if (format_ == ToolFormat::kLlama3Json) {
          // Calls only when the answer starts with one (after an optional <|python_tag|>).
          if (buf_.compare(0, kPythonTag.size(), kPythonTag) == 0) {
            Marker(0);
            Consume(kPythonTag.size());
            state_ = State::kBetween;
            continue;
          }
          if (!end && buf_.size() < kPythonTag.size() && kPythonTag.compare(0, buf_.size(), buf_) == 0) return;
          if (buf_[0] == '{') {
            Marker(0);
            state_ = State::kBetween;
            continue;
          }
        }
        state_ = State::kContent;
        continue;
      }
      case State::kContent: {
        if (format_ == ToolFormat::kDeepSeekDsml) {
          if (DsmlContent(end, out)) continue;
          return;
        }
        const std::string* marker = format_ == ToolFormat::kHermes       ? &kHermesOpen
                                    : format_ == ToolFormat::kDeepSeekV3 ? &kDsCallsBegin
                                                                         : nullptr;
        if (!marker) {  // Llama-3 content (the answer did not start with a call), or no tool format
          Content(buf_, out);
          Consume(buf_.size());
          return;
        }
        const size_t at = buf_.find(*marker);
        if (at == std::string::npos) {
          const size_t keep = end ? 0 : PartialMarker(buf_, *marker);
          Content(std::string_view(buf_).substr(0, buf_.size() - keep), out);
          Consume(buf_.size() - keep);
          return;
        }
        Content(std::string_view(buf_).substr(0, at), out);
        Marker(at);
        Consume(at + marker->size());
        if (format_ == ToolFormat::kHermes) {
          BeginJsonCall();
          state_ = State::kJsonCall;
        } else {
          state_ = State::kBetween;
        }
        continue;
      }
      case State::kBetween: {  // looking for the next call
        if (static_cast<int>(calls_.size()) >= max_calls_) {
          state_ = State::kDone;
          continue;
        }
        if (format_ == ToolFormat::kDeepSeekDsml) {
          dsml_ = Dsml::kInvoke;
          state_ = State::kDsml;
          continue;
        }
        if (format_ == ToolFormat::kLlama3Json) {
          size_t a = 0;
          while (a < buf_.size() && IsJsonSpace(buf_[a])) ++a;
          Consume(a);
          if (buf_.empty()) return;
          if (buf_[0] != '{') {
            state_ = State::kDone;
            continue;
          }
          BeginJsonCall();
          state_ = State::kJsonCall;
          continue;
        }
        const std::string& marker = format_ == ToolFormat::kHermes ? kHermesOpen : kDsCallBegin;
        const size_t at = buf_.find(marker);
        if (at == std::string::npos) {
          Consume(buf_.size() - (end ? 0 : PartialMarker(buf_, marker)));  // text between calls is dropped
          return;
        }
        Consume(at + marker.size());
        if (format_ == ToolFormat::kHermes) {
          BeginJsonCall();
          state_ = State::kJsonCall;
        } else {
          in_call_ = true;
          state_ = State::kDsType;
        }
        continue;
      }
      case State::kJsonCall: {
        size_t i = 0;
        while (i < buf_.size() && js_ != Js::kDone && js_ != Js::kBad)
          if (JsonChar(buf_[i], out)) ++i;
        Consume(i);
        if (js_ != Js::kDone && js_ != Js::kBad) return;
        const bool bad = js_ == Js::kBad;
        EndCall(out);
        state_ = format_ != ToolFormat::kLlama3Json ? State::kBetween : bad ? State::kDone : State::kAfterJsonCall;
        continue;
      }
      case State::kAfterJsonCall: {  // Llama-3: ';' and another call, or the end of the calls
        size_t a = 0;
        while (a < buf_.size() && IsJsonSpace(buf_[a])) ++a;
        Consume(a);
        if (buf_.empty()) return;
        if (buf_[0] == ';') {
          Consume(1);
          state_ = State::kBetween;
        } else {
          state_ = State::kDone;
        }
        continue;
      }
      case State::kDsType: {  // "function" up to the separator
        const size_t at = buf_.find(kDsSep);
        if (at == std::string::npos) {
          if (buf_.size() > 64) {
            EndCall(out);
            state_ = State::kBetween;
            continue;
          }
          return;
        }
        Consume(at + kDsSep.size());
        name_.clear();
        state_ = State::kDsName;
        continue;
      }
      case State::kDsName: {
        const size_t nl = buf_.find('\n');
        if (nl == std::string::npos) return;
        StartCall(Trim(std::string_view(buf_).substr(0, nl)), out);
        Consume(nl + 1);
        fence_.clear();
        state_ = State::kDsFence;
        continue;
      }
      case State::kDsFence: {
        size_t i = 0;
        while (i < buf_.size() && fence_.size() < kDsFenceOpen.size() && buf_[i] == kDsFenceOpen[fence_.size()])
          fence_ += buf_[i++];
        Consume(i);
        if (fence_.size() == kDsFenceOpen.size()) {
          args_ws_.clear();
          args_started_ = false;
          state_ = State::kDsArgs;
          continue;
        }
        if (buf_.empty()) return;
        EndCall(out);  // not the ```json fence: a malformed call
        state_ = State::kBetween;
        continue;
      }
      case State::kDsArgs: {  // the arguments, trimmed, up to the closing fence
        const size_t at = buf_.find(kDsFenceClose);
        const size_t take = at != std::string::npos ? at : buf_.size() - (end ? 0 : PartialMarker(buf_, kDsFenceClose));
        std::string_view s = std::string_view(buf_).substr(0, take);
        if (!args_started_) {
          size_t a = 0;
          while (a < s.size() && IsJsonSpace(s[a])) ++a;
          s.remove_prefix(a);
        }
        size_t e = s.size();
        while (e > 0 && IsJsonSpace(s[e - 1])) --e;
        if (e > 0) {
          std::string piece = args_ws_;
          piece.append(s.substr(0, e));
          args_ws_.assign(s.substr(e));
          args_started_ = true;
          Args(piece, out);
        } else if (args_started_) {
          args_ws_.append(s);
        }
        if (at == std::string::npos) {
          Consume(take);
          return;
        }
        Consume(at + kDsFenceClose.size());
        EndCall(out);
        state_ = State::kBetween;
        continue;
      }
      case State::kDsml:
        if (DsmlStep(end, out)) continue;
        return;
      case State::kDone:
        Consume(buf_.size());
        return;
    }
  }
}

}  // namespace deepinfer
