#include "tokenizer/tokenizer.h"

#include <algorithm>

namespace deepinfer {

std::string Tokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (skip_special && is_control_[id]) continue;
    out += TokenBytes(id);
  }
  return out;
}

bool Tokenizer::IsEog(int32_t id) const {
  return id == eos_id_ || std::find(eog_ids_.begin(), eog_ids_.end(), id) != eog_ids_.end();
}

namespace {
// Length of the longest prefix of s that ends on a UTF-8 character boundary with no incomplete sequence.
size_t CompleteUtf8Prefix(const std::string& s) {
  size_t n = s.size();
  // Look back at most 3 bytes for a lead byte whose sequence is not complete yet.
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return need > back ? n - back : n;
  }
  return n;
}
}  // namespace

namespace {
constexpr size_t kContextTokens = 4;  // tokens kept before the unsent text so decoders see their neighbours
}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer& tok, std::vector<int32_t> prefix) : tok_(tok), ids_(std::move(prefix)) {
  start_ = ids_.size() > kContextTokens ? ids_.size() - kContextTokens : 0;
  emitted_ = DecodeWindow().size();
}

std::string StreamDecoder::DecodeWindow() const {
  return tok_.Decode(std::vector<int32_t>(ids_.begin() + static_cast<std::ptrdiff_t>(start_), ids_.end()));
}

std::string StreamDecoder::Push(int32_t id) {
  ids_.push_back(id);
  const std::string text = DecodeWindow();
  const size_t ready = CompleteUtf8Prefix(text);
  std::string out = ready > emitted_ ? text.substr(emitted_, ready - emitted_) : std::string();
  emitted_ = std::max(emitted_, ready);
  // Everything sent and the window grown: slide it, keeping a little context.
  if (ready == text.size() && ids_.size() - start_ > 2 * kContextTokens) {
    start_ = ids_.size() - kContextTokens;
    emitted_ = DecodeWindow().size();
  }
  return out;
}

std::string StreamDecoder::Flush() {
  const std::string text = DecodeWindow();
  std::string out = text.size() > emitted_ ? text.substr(emitted_) : std::string();
  emitted_ = text.size();
  return out;
}

}  // namespace deepinfer
