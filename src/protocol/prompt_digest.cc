#include "protocol/prompt_digest.h"

namespace deepinfer {
namespace {
// FNV-1a, with each string's length first so that piece boundaries count.
struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void Bytes(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  void Int(int64_t v) { Bytes(&v, sizeof v); }
  void Str(const std::string& s) {
    Int(static_cast<int64_t>(s.size()));
    Bytes(s.data(), s.size());
  }
};
}  // namespace

uint64_t PromptDigest(const Tokenizer& tok, const std::string& chat_template_source) {
  Fnv d;
  d.Int(tok.vocab_size());
  for (int i = 0; i < tok.vocab_size(); ++i) d.Str(tok.piece(i));
  d.Int(tok.bos_id());
  d.Int(tok.add_bos());
  d.Str(chat_template_source);
  return d.h;
}

}  // namespace deepinfer
