#include "engine/output_text.h"

#include <algorithm>

namespace deepinfer {

OutputText::OutputText(const Tokenizer* tok, const std::vector<int32_t>& prefix, std::vector<std::string> stop,
                       bool include_stop)
    : stop_(std::move(stop)), include_stop_(include_stop) {
  if (tok) dec_ = std::make_unique<StreamDecoder>(*tok, prefix);
  stop_.erase(std::remove(stop_.begin(), stop_.end(), std::string()), stop_.end());
  for (const auto& s : stop_) max_stop_ = std::max(max_stop_, s.size());
}

bool OutputText::Push(int32_t token) {
  if (!dec_ || stopped_) return false;
  const size_t old = text_.size();
  text_ += dec_->Push(token);
  if (stop_.empty() || text_.size() == old) return false;
  // A match must end in the new text; it may start up to max_stop_-1 bytes before it.
  const size_t from = old >= max_stop_ - 1 ? old - (max_stop_ - 1) : 0;
  size_t best = std::string::npos;
  const std::string* which = nullptr;
  for (const auto& s : stop_) {
    const size_t at = text_.find(s, from);
    if (at != std::string::npos && at < best) best = at, which = &s;
  }
  if (!which) return false;
  stopped_ = true;
  stop_matched_ = *which;
  text_.resize(include_stop_ ? best + which->size() : best);
  return true;
}

std::string OutputText::TakeReady(bool final) {
  if (!dec_) return {};
  if (final && !stopped_) text_ += dec_->Flush();
  size_t ready = text_.size();
  if (!final && !stopped_ && max_stop_ > 1) {
    ready = text_.size() >= max_stop_ - 1 ? text_.size() - (max_stop_ - 1) : 0;
    // Never split a UTF-8 sequence: back up over continuation bytes.
    while (ready > sent_ && ready < text_.size() && (static_cast<unsigned char>(text_[ready]) & 0xC0) == 0x80) --ready;
  }
  if (ready <= sent_) return {};
  std::string out = text_.substr(sent_, ready - sent_);
  sent_ = ready;
  return out;
}

}  // namespace deepinfer
