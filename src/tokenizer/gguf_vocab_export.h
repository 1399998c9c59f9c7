// Hugging Face tokenizer directory -> GGUF vocabulary metadata (tokenizer.ggml.*), as llama.cpp's converter
// writes it, so a converted checkpoint tokenizes the same in llama.cpp as in the HF tokenizers library.
#pragma once
#include <string>

#include "deepinfer/status.h"

namespace deepinfer {

class GgufWriter;

// Reads tokenizer.json, tokenizer_config.json, config.json and chat_template.jinja from `dir`. vocab_size: the
// model's embedding rows; ids the tokenizer does not define become "[PAD<id>]" (unused). Byte-level BPE only
// (GPT-2 style: Llama 3, Qwen, DeepSeek); SentencePiece-style tokenizers are refused with a clear error.
Status ExportHfTokenizerToGguf(const std::string& dir, int vocab_size, GgufWriter& gw);

}  // namespace deepinfer
