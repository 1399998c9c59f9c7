// The Hugging Face tokenizer.json pipeline: added tokens -> normalizer -> pre-tokenizer -> BPE model ->
// post-processor for encoding, and the decoder chain for decoding, following the `tokenizers` library's
// semantics (checked id for id against it in tests/parity/hf_tokenizer_ids.mjs).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "deepinfer/status.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {

// Parses tokenizer.json text (`name` is used in error messages). tokenizer_config.json, when given, supplies
// bos/eos tokens and add_bos_token.
StatusOr<std::unique_ptr<Tokenizer>> ParseHfTokenizer(const std::string& tokenizer_json, const std::string& config_json,
                                                      const std::string& name);

// A byte-level BPE vocabulary described by its parts (as GGUF files store it), run through the same pipeline:
// the text is split by each regex in turn (Isolated), mapped to GPT-2's byte alphabet, and merged by rank.
// types follow GGUF: 1 normal, 3 control (never matched in text), 4 user-defined (matched in text).
struct ByteLevelBpeSpec {
  std::vector<std::string> tokens;
  std::vector<int> types;
  std::vector<std::string> merges;
  std::vector<std::string> split_regexes;
  bool ignore_merges = false;
  int bos = -1, eos = -1;
  bool add_bos = false;
};
StatusOr<std::unique_ptr<Tokenizer>> MakeByteLevelBpe(const ByteLevelBpeSpec& spec, const std::string& name);

}  // namespace deepinfer
