// Incremental text of one sample: detokenizes token by token, finds stop strings across token boundaries,
// and holds back the tail that could still turn into a stop string, so streamed text never has to be retracted.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace deepinfer {

class OutputText {
 public:
  // prefix: the prompt ids (decoding in context keeps leading spaces right). tok may be null (no text).
  OutputText(const Tokenizer* tok, const std::vector<int32_t>& prefix, std::vector<std::string> stop,
             bool include_stop);
  // Adds one generated token's text. Returns true when a stop string now matches; the text is then cut at the
  // match (after it with include_stop) and stop_matched() names it.
  bool Push(int32_t token);
  // Text that is safe to send now; everything left when final (the sample ended).
  std::string TakeReady(bool final);
  const std::string& stop_matched() const { return stop_matched_; }

 private:
  std::unique_ptr<StreamDecoder> dec_;
  std::vector<std::string> stop_;
  bool include_stop_;
  size_t max_stop_ = 0;
  std::string text_, stop_matched_;
  size_t sent_ = 0;
  bool stopped_ = false;
};

}  // namespace deepinfer
