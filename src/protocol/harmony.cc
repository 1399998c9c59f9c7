#include "protocol/harmony.h"
#include "protocol/tool_stream.h"

#include "tokenizer/tokenizer.h"

namespace deepinfer {
namespace {

const std::string kChannelText = "<|channel|>", kConstrainText = "<|constrain|>";

// Length of the longest prefix of s that does not end inside an incomplete UTF-8 sequence.
size_t CompleteUtf8Prefix(const std::string& s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;
    const size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return need > back ? n - back : n;
  }
  return n;
}


// The word at `at`: up to whitespace or the next marker.
std::string WordAt(const std::string& s, size_t at) {
  size_t e = at;
  while (e < s.size() && !IsJsonSpace(s[e]) && s[e] != '<') ++e;
  return s.substr(at, e - at);
}

// The recipient a header names (`to=X`, in the role part or after the channel), "" when none. The last one
// counts, as the last channel does: a stray `<|channel|>commentary to=assistant` may precede the real header.
std::string Recipient(const std::string& header) {
  std::string r;
  for (size_t at = header.find("to="); at != std::string::npos; at = header.find("to=", at + 1))
    if (at == 0 || IsJsonSpace(header[at - 1]) || header[at - 1] == '>') r = WordAt(header, at + 3);
  return r;
}

std::string Channel(const std::string& header) {
  const size_t at = header.rfind(kChannelText);
  return at == std::string::npos ? "" : WordAt(header, at + kChannelText.size());
}

}  // namespace

HarmonyTokens FindHarmonyTokens(const Tokenizer& tok) {
  HarmonyTokens t;
  const std::pair<const char*, int32_t*> want[] = {{"<|start|>", &t.start},     {"<|end|>", &t.end},
                                                   {"<|message|>", &t.message}, {"<|channel|>", &t.channel},
                                                   {"<|constrain|>", &t.constrain}, {"<|return|>", &t.ret},
                                                   {"<|call|>", &t.call}};
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    const std::string& p = tok.piece(id);
    if (p.size() < 7 || p[0] != '<' || p[1] != '|') continue;
    for (const auto& [text, slot] : want)
      if (p == text && (*slot < 0 || tok.IsControl(id))) *slot = id;  // the special token, if a normal one shares it
  }
  return t;
}

HarmonyParser::HarmonyParser(const Tokenizer& tok, HarmonyTokens t, bool tools, int max_calls)
    : tok_(tok), t_(t), tools_(tools), max_calls_(max_calls) {}

void HarmonyParser::Feed(int32_t id, HarmonyDelta* d) {
  if (state_ == State::kDone) return;
  const bool marker = id == t_.start || id == t_.end || id == t_.message || id == t_.channel || id == t_.constrain ||
                      id == t_.ret || id == t_.call;
  if (marker) any_marker_ = true;
  if (id == t_.ret || id == t_.call) {  // the end of the turn
    if (state_ == State::kBody) CloseBody(d);
    state_ = State::kDone;
    return;
  }
  if (id == t_.end) {
    if (state_ == State::kBody) CloseBody(d);
    state_ = State::kBetween;
    return;
  }
  if (id == t_.start) {  // a new message: its header follows (role first)
    if (state_ == State::kBody) CloseBody(d);
    header_.clear();
    state_ = State::kHeader;
    return;
  }
  if (id == t_.channel && state_ != State::kHeader) {
    // A channel header without <|end|><|start|>assistant before it: the previous message ends here.
    if (state_ == State::kBody) CloseBody(d);
    header_.clear();
    state_ = State::kHeader;
  }
  switch (state_) {
    case State::kHeader:
      if (id == t_.message) {
        OpenBody(d);
        return;
      }
      if (id == t_.channel) header_ += kChannelText;
      else if (id == t_.constrain) header_ += kConstrainText;
      else if (!tok_.IsControl(id)) header_ += tok_.TokenBytes(id);
      return;
    case State::kBody:
      if (tok_.IsControl(id) || marker) return;  // other specials carry no text
      if (target_ == Target::kReasoning) ++reasoning_tokens_;
      Emit(tok_.TokenBytes(id), false, d);
      return;
    case State::kBetween:  // text between <|end|> and the next <|start|> belongs to no message
    case State::kDone:
      return;
  }
}

void HarmonyParser::OpenBody(HarmonyDelta* d) {
  state_ = State::kBody;
  pending_.clear();
  std::string recipient = Recipient(header_);
  if (recipient == "assistant") recipient.clear();  // a stray `to=assistant` addresses the answer itself
  const std::string channel = Channel(header_);
  header_.clear();
  if (!recipient.empty()) {
    target_ = Target::kDrop;
    if (!tools_ || recipient.rfind("functions.", 0) != 0 || recipient.size() == 10) return;
    if (static_cast<int>(calls_.size()) >= max_calls_) return;
    calls_.push_back({recipient.substr(10), ""});
    call_has_args_ = false;
    target_ = Target::kCall;
    ToolCallDelta c;
    c.index = static_cast<int>(calls_.size()) - 1;
    c.first = true;
    c.name = calls_.back().name;
    d->out.calls.push_back(std::move(c));
    return;
  }
  if (channel == "analysis") {
    target_ = Target::kReasoning;
    reasoned_ = true;
  } else {
    target_ = Target::kContent;  // final, commentary preambles (and a channel the format does not name)
  }
}

void HarmonyParser::Emit(const std::string& bytes, bool final, HarmonyDelta* d) {
  pending_ += bytes;
  const size_t ready = final ? pending_.size() : CompleteUtf8Prefix(pending_);
  if (ready == 0) return;
  const std::string out = pending_.substr(0, ready);
  pending_.erase(0, ready);
  switch (target_) {
    case Target::kReasoning:
      reasoning_ += out;
      d->reasoning += out;
      return;
    case Target::kContent:
      content_ += out;
      d->out.content += out;
      return;
    case Target::kCall: {
      call_has_args_ = true;
      calls_.back().arguments += out;
      const int index = static_cast<int>(calls_.size()) - 1;
      if (d->out.calls.empty() || d->out.calls.back().index != index) {
        ToolCallDelta c;
        c.index = index;
        d->out.calls.push_back(std::move(c));
      }
      d->out.calls.back().arguments += out;
      return;
    }
    case Target::kDrop:
      return;
  }
}

void HarmonyParser::CloseBody(HarmonyDelta* d) {
  if (!pending_.empty()) Emit("", true, d);
  if (target_ == Target::kCall && !call_has_args_) {
    call_has_args_ = true;
    Emit("{}", true, d);  // a call without arguments: an empty object, as OpenAI sends
  }
  target_ = Target::kDrop;
}

void HarmonyParser::Finish(HarmonyDelta* d) {
  if (state_ == State::kBody) CloseBody(d);
  // Output with no Harmony structure at all (a model that ignored the format) is plain content, rather than
  // lost as an unfinished header. Decided only at the end, so the stream sends it then, in one piece.
  if (state_ == State::kHeader && !any_marker_ && !header_.empty()) {
    content_ += header_;
    d->out.content += header_;
  }
  header_.clear();
  state_ = State::kDone;
}

ParsedAssistant HarmonyParser::Result() const {
  ParsedAssistant p;
  if (reasoned_) p.reasoning = reasoning_;
  p.tool_calls = calls_;
  if (calls_.empty() || !content_.empty()) p.content = content_;
  return p;
}

ParsedAssistant ParseHarmony(const Tokenizer& tok, const HarmonyTokens& t, const std::vector<int32_t>& ids, bool tools,
                             int max_calls) {
  HarmonyParser p(tok, t, tools, max_calls);
  HarmonyDelta ignored;
  for (int32_t id : ids) p.Feed(id, &ignored);
  p.Finish(&ignored);
  return p.Result();
}

}  // namespace deepinfer
