// DeepSeek-V3.2 / V4 DSML tool calls for ToolCallStreamer (the rules are in tool_stream.h). Parameters are XML-ish
// elements, not JSON, so the arguments text is built here: `{`, then per parameter its JSON-quoted name and its
// value, `}` at the invoke's end. Everything decidable from the text read so far is sent at once, so a stream's
// fragments concatenate to the non-streamed arguments however the answer is cut.
#include <algorithm>

#include <nlohmann/json.hpp>

#include "base/json_escape.h"
#include "protocol/tool_stream.h"

namespace deepinfer {
namespace {

// The markers, as DeepSeek's templates write them (｜ is U+FF5C FULLWIDTH VERTICAL LINE).
const std::string kToolCallsOpen = "<｜DSML｜tool_calls>", kToolCallsClose = "</｜DSML｜tool_calls>";
const std::string kFunctionCallsOpen = "<｜DSML｜function_calls>", kFunctionCallsClose = "</｜DSML｜function_calls>";
const std::string kInvokeOpen = "<｜DSML｜invoke name=\"", kInvokeClose = "</｜DSML｜invoke>";
const std::string kParamOpen = "<｜DSML｜parameter name=\"", kParamClose = "</｜DSML｜parameter>";
const std::string kStringTrue = "\" string=\"true\">", kStringFalse = "\" string=\"false\">";
// A name longer than this without its closing quote is not one (the invoke is dropped, not held forever).
constexpr size_t kMaxHeadBytes = 1024;

// The earliest of several markers in `buf` (npos if none), and which.
size_t FindFirst(std::string_view buf, std::initializer_list<const std::string*> markers, const std::string** which) {
  size_t best = std::string::npos;
  for (const std::string* m : markers) {
    const size_t at = buf.find(*m);
    if (at < best) {
      best = at;
      *which = m;
    }
  }
  return best;
}

// How much of buf's end may still become one of the markers (held back while streaming).
size_t PartialAny(std::string_view buf, std::initializer_list<const std::string*> markers) {
  size_t keep = 0;
  for (const std::string* m : markers) keep = std::max(keep, PartialMarker(buf, *m));
  return keep;
}

// Raw text as the inside of a JSON string (byte by byte, so any cut of the text escapes to the same bytes).
std::string JsonEscapeRaw(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  AppendJsonEscaped(s, &out);
  return out;
}

// A string="false" value as arguments text: the JSON verbatim (its surrounding whitespace trimmed) when it is one
// JSON value; otherwise the model broke the format, and its raw text becomes a JSON string, so the arguments stay
// JSON (the client sees what was written rather than an unparseable object).
std::string JsonValueText(const std::string& raw) {
  size_t a = 0, b = raw.size();
  while (a < b && IsJsonSpace(raw[a])) ++a;
  while (b > a && IsJsonSpace(raw[b - 1])) --b;
  std::string trimmed = raw.substr(a, b - a);
  if (!nlohmann::json::parse(trimmed, nullptr, false).is_discarded()) return trimmed;
  return "\"" + JsonEscapeRaw(raw) + "\"";
}

}  // namespace

bool ToolCallStreamer::DsmlContent(bool end, ToolStreamDelta* out) {
  const std::string* opener = nullptr;
  const size_t at = FindFirst(buf_, {&kToolCallsOpen, &kFunctionCallsOpen}, &opener);
  if (at == std::string::npos) {
    const size_t keep = end ? 0 : PartialAny(buf_, {&kToolCallsOpen, &kFunctionCallsOpen});
    Content(std::string_view(buf_).substr(0, buf_.size() - keep), out);
    Consume(buf_.size() - keep);
    return false;
  }
  Content(std::string_view(buf_).substr(0, at), out);
  Marker(at);
  Consume(at + opener->size());
  dsml_block_close_ = opener == &kToolCallsOpen ? &kToolCallsClose : &kFunctionCallsClose;
  state_ = State::kBetween;
  return true;
}

void ToolCallStreamer::DsmlEndInvoke(ToolStreamDelta* out) {
  if (dsml_params_ > 0) Args("}", out);
  dsml_params_ = 0;
  EndCall(out);  // no parameters: "{}"
}

bool ToolCallStreamer::DsmlStep(bool end, ToolStreamDelta* out) {
  const std::string_view buf = buf_;
  switch (dsml_) {
    case Dsml::kInvoke: {  // the next invoke, or the block's end; text between is dropped
      const std::string* m = nullptr;
      const size_t at = FindFirst(buf, {&kInvokeOpen, dsml_block_close_}, &m);
      if (at == std::string::npos) {
        Consume(buf.size() - (end ? 0 : PartialAny(buf, {&kInvokeOpen, dsml_block_close_})));
        return false;
      }
      if (m != &kInvokeOpen) {
        state_ = State::kDone;
        return true;
      }
      Consume(at + kInvokeOpen.size());
      in_call_ = true;
      dsml_params_ = 0;
      dsml_ = Dsml::kName;
      return true;
    }
    case Dsml::kName: {  // NAME"> (a name holds none of the tag's characters)
      size_t q = buf.find_first_of("\"<>\n");
      if (q != std::string::npos && q > kMaxHeadBytes) q = std::string::npos;  // as a stream gives up: both paths agree
      const bool wait = q == std::string::npos ? buf.size() <= kMaxHeadBytes : buf[q] == '"' && q + 1 >= buf.size();
      if (wait && !end) return false;
      if (q == std::string::npos || buf[q] != '"' || q == 0 || q + 1 >= buf.size() || buf[q + 1] != '>') {
        EndCall(out);  // not a name: the invoke is dropped (no call is sent)
        state_ = State::kBetween;
        return true;
      }
      StartCall(std::string(buf.substr(0, q)), out);
      Consume(q + 2);
      dsml_ = Dsml::kParams;
      return true;
    }
    case Dsml::kParams: {  // the next parameter, or the invoke's end (the block's end, or a next invoke, also ends it)
      const std::string* m = nullptr;
      const size_t at = FindFirst(buf, {&kParamOpen, &kInvokeClose, &kInvokeOpen, dsml_block_close_}, &m);
      if (at == std::string::npos) {
        Consume(buf.size() - (end ? 0 : PartialAny(buf, {&kParamOpen, &kInvokeClose, &kInvokeOpen, dsml_block_close_})));
        return false;
      }
      if (m == &kInvokeOpen) {  // an invoke left open: it ends here, and the next one is read as usual
        DsmlEndInvoke(out);
        Consume(at);
        state_ = State::kBetween;
        return true;
      }
      if (m == &kParamOpen) {
        Consume(at + kParamOpen.size());
        dsml_ = Dsml::kParamHead;
        return true;
      }
      DsmlEndInvoke(out);
      if (m == &kInvokeClose) {
        Consume(at + kInvokeClose.size());
        state_ = State::kBetween;
      } else {
        state_ = State::kDone;
      }
      return true;
    }
    case Dsml::kParamHead: {  // KEY" string="true|false">
      size_t q = buf.find('"');
      if (q != std::string::npos && q > kMaxHeadBytes) q = std::string::npos;  // as a stream gives up: both paths agree
      if (q == std::string::npos) {
        if (buf.size() <= kMaxHeadBytes && !end) return false;
        dsml_ = Dsml::kSkip;
        return true;
      }
      const std::string_view rest = buf.substr(q);
      const bool is_string = rest.substr(0, kStringTrue.size()) == kStringTrue;
      const bool is_json = rest.substr(0, kStringFalse.size()) == kStringFalse;
      if (!is_string && !is_json) {
        const bool may_become = (kStringTrue.compare(0, rest.size(), rest) == 0 && rest.size() < kStringTrue.size()) ||
                                (kStringFalse.compare(0, rest.size(), rest) == 0 && rest.size() < kStringFalse.size());
        if (may_become && !end) return false;
        dsml_ = Dsml::kSkip;  // not a parameter head: its value is dropped
        return true;
      }
      const std::string key = nlohmann::json(std::string(buf.substr(0, q)))
                                  .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      Args((dsml_params_++ == 0 ? "{" : ", ") + key + ": " + (is_string ? "\"" : ""), out);
      Consume(q + (is_string ? kStringTrue : kStringFalse).size());
      dsml_value_.clear();
      dsml_ = is_string ? Dsml::kString : Dsml::kJson;
      return true;
    }
    case Dsml::kString:  // raw text up to the closing tag, escaped as it comes
    case Dsml::kJson:    // JSON text up to the closing tag, held (it is sent once known to be JSON)
    case Dsml::kSkip: {  // a malformed parameter's value, dropped
      const size_t at = buf.find(kParamClose);
      const size_t take = at != std::string::npos ? at : buf.size() - (end ? 0 : PartialMarker(buf, kParamClose));
      if (dsml_ == Dsml::kString) Args(JsonEscapeRaw(buf.substr(0, take)), out);
      else if (dsml_ == Dsml::kJson) dsml_value_.append(buf.substr(0, take));
      if (at == std::string::npos) {
        // Cut off by the end of the answer: the value keeps what it got (a string stays unterminated, like a cut
        // JSON call; a held JSON value goes out by the same rule as a complete one).
        if (end && dsml_ == Dsml::kJson) Args(JsonValueText(dsml_value_), out);
        Consume(take);
        return false;
      }
      if (dsml_ == Dsml::kString) Args("\"", out);
      else if (dsml_ == Dsml::kJson) Args(JsonValueText(dsml_value_), out);
      Consume(at + kParamClose.size());
      dsml_value_.clear();
      dsml_ = Dsml::kParams;
      return true;
    }
  }
  return false;
}

}  // namespace deepinfer
