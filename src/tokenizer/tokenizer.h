// Tokenizer interface and the vocabularies embedded in GGUF files or given as a tokenizer.json.
// (The full Hugging Face pipeline with normalizers/decoders and chat templates is the tokenizer issue's work;
// this covers byte-level BPE and SentencePiece-style vocabularies exactly as llama.cpp applies them.)
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer {

class GgufFile;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> Encode(const std::string& text, bool add_bos) const = 0;
  // Encode, with control tokens written in the text read as their ids too (llama.cpp's parse_special, which its
  // server uses for chat prompts): a rendered chat template writes <|im_start|>, <|start|>... as text, and a GGUF
  // vocabulary marks them control, which plain Encode leaves as text (as llama.cpp's tokenizer tests expect).
  virtual std::vector<int32_t> EncodeWithSpecials(const std::string& text, bool add_bos) const { return Encode(text, add_bos); }
  // The raw bytes a token stands for (empty for control tokens).
  virtual std::string TokenBytes(int32_t id) const = 0;
  // Concatenated bytes of the ids, special tokens dropped when skip_special.
  virtual std::string Decode(const std::vector<int32_t>& ids, bool skip_special = true) const;

  int vocab_size() const { return static_cast<int>(pieces_.size()); }
  const std::string& piece(int32_t id) const { return pieces_[id]; }
  bool IsControl(int32_t id) const { return id >= 0 && id < vocab_size() && is_control_[id]; }
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  bool add_bos() const { return add_bos_; }
  bool IsEog(int32_t id) const;  // end of generation: eos or another end-of-turn token

 protected:
  std::vector<std::string> pieces_;
  std::vector<bool> is_control_;
  std::vector<int32_t> eog_ids_;
  int32_t bos_id_ = -1, eos_id_ = -1;
  bool add_bos_ = false;
};

StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromGguf(const GgufFile& gguf);
// tokenizer.json (+ tokenizer_config.json in the same directory when present).
StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromHfDir(const std::string& dir);
// A .gguf file (its embedded vocabulary), a tokenizer.json file, or a directory holding tokenizer.json.
StatusOr<std::unique_ptr<Tokenizer>> TokenizerFromPath(const std::string& path);
// The GGUF `tokenizer.ggml.pre` name for a tokenizer.json byte-level pre-tokenizer: its Split regexes in order,
// plus ByteLevel's own GPT-2 regex when use_regex is on. Unimplemented when no known name matches.
StatusOr<std::string> GgufPreForHfPreTokenizer(const std::vector<std::string>& split_regexes, bool byte_level_regex);

// Streams text out of a growing token sequence without ever emitting a broken UTF-8 sequence. The text of a
// continuation is Decode(prefix + generated) minus Decode(prefix): decoding in context keeps the spaces that
// SentencePiece-style vocabularies attach to the front of a token right (" time" after "Once upon a"). Only a
// short window of recent tokens is re-decoded per step (a few tokens of context before the unsent text), so a
// long generation costs linear, not quadratic, time.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, std::vector<int32_t> prefix = {});
  // Returns the newly completed text for one more token.
  std::string Push(int32_t id);
  // Whatever bytes are still held back (an incomplete sequence at the end of generation).
  std::string Flush();

 private:
  std::string DecodeWindow() const;

  const Tokenizer& tok_;
  std::vector<int32_t> ids_;
  size_t start_ = 0;    // first id of the decode window
  size_t emitted_ = 0;  // bytes of the window's decode already returned
};

}  // namespace deepinfer
