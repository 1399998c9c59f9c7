// A loaded model and its tokenizer. Load once, then create any number of engines over it; the model is
// immutable after loading and may be shared by threads.
//
//   auto model = deepinfer::api::Model::Load("stories260K.gguf");
//   if (!model.ok()) { fprintf(stderr, "%s\n", model.status().ToString().c_str()); return 1; }
//   std::vector<int32_t> ids = (*model)->EncodePrompt("Once upon a time");
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer::api {

// Where the weight matrices live while the model runs.
enum class WeightPlacement {
  kAuto,  // copy into huge-page memory when they fit comfortably in available RAM, else keep the mmap
  kMmap,  // read straight from the mmapped files (no copy; page cache shared between processes)
  kCopy,  // always copy into anonymous huge-page memory
};

struct ModelOptions {
  WeightPlacement placement = WeightPlacement::kAuto;
  bool progress = true;  // draw a progress bar on stderr while copying weights (DEEPINFER_NO_PROGRESS=1 also hides it)
  // A DeepSeek-V4 GGUF's MTP block from a GGUF of its own (llama.cpp's converter's and `deepinfer convert`'s
  // mtp-*.gguf: the block as layer n_layers with its own head collapse): it joins the model's, for
  // --speculative mtp and `logprobs --mtp`. Empty: the model's own MTP block, if any.
  std::string mtp_model;
};

// One chat message for the chat template. Plain text content only; requests with richer content (text parts,
// tools) go through RequestFromOpenAiJson.
struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
};

class Model {
 public:
  // `model` is a GGUF file, a Hugging Face model directory (config.json + safetensors + tokenizer.json), or a
  // hub reference owner/name[:file][@revision] (downloaded into the cache first; HF_ENDPOINT, HF_HOME,
  // HF_HUB_OFFLINE and HF_TOKEN are honoured). Errors name the file and the problem.
  static StatusOr<std::unique_ptr<Model>> Load(const std::string& model, const ModelOptions& options = {});

  Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  virtual ~Model() = default;

  // "gguf" or "hf", the resolved path it was loaded from, and a one-line description (architecture, shapes).
  virtual const std::string& format() const = 0;
  virtual const std::string& path() const = 0;
  virtual std::string Summary() const = 0;
  // The longest sequence (prompt + generated tokens) the model was trained for.
  virtual int context_length() const = 0;
  virtual int vocab_size() const = 0;

  // Tokenizer. Encode adds BOS only when add_bos is set and the vocabulary has one.
  virtual std::vector<int32_t> Encode(const std::string& text, bool add_bos) const = 0;
  // A prompt as `deepinfer generate` and the completions API tokenize it: BOS first when the tokenizer asks
  // for it (or the text is empty, so generation has a start) and the vocabulary has one.
  virtual std::vector<int32_t> EncodePrompt(const std::string& text) const = 0;
  // The text of `ids`; control tokens (BOS, EOS, ...) are dropped when skip_special.
  virtual std::string Decode(const std::vector<int32_t>& ids, bool skip_special = true) const = 0;
  virtual int32_t bos_id() const = 0;  // -1 when the vocabulary has none
  virtual int32_t eos_id() const = 0;
  // End of generation: EOS or another end-of-turn token of the vocabulary.
  virtual bool IsEndOfGeneration(int32_t id) const = 0;

  // The model's chat template (GGUF tokenizer.chat_template or tokenizer_config.json; ChatML when it has none)
  // rendered over `messages`, and the same tokenized (BOS added when the tokenizer wants it and the template did
  // not write it). add_generation_prompt ends the text with the assistant turn's opening.
  virtual StatusOr<std::string> RenderChat(const std::vector<ChatMessage>& messages,
                                           bool add_generation_prompt = true) const = 0;
  virtual StatusOr<std::vector<int32_t>> EncodeChat(const std::vector<ChatMessage>& messages,
                                                    bool add_generation_prompt = true) const = 0;
};

}  // namespace deepinfer::api
