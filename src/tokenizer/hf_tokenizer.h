// The Hugging Face tokenizer.json pipeline: added tokens -> normalizer -> pre-tokenizer -> BPE model ->
// post-processor for encoding, and the decoder chain for decoding, following the `tokenizers` library's
// semantics (checked id for id against it in tests/parity/hf_tokenizer_ids.mjs).
#pragma once
#include <memory>
#include <string>

#include "deepinfer/status.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {

// Parses tokenizer.json text (`name` is used in error messages). tokenizer_config.json, when given, supplies
// bos/eos tokens and add_bos_token.
StatusOr<std::unique_ptr<Tokenizer>> ParseHfTokenizer(const std::string& tokenizer_json, const std::string& config_json,
                                                      const std::string& name);

}  // namespace deepinfer
