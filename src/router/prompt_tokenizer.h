// The router's own token ids for a request (route --model), so that it can hash a prompt's KV blocks as its
// replicas do: the model's tokenizer and chat template only (no weights), applied the way `serve` applies them
// (protocol/openai_request.h ParsePrompt for /v1/completions, ChatFormatter::EncodeRequest for chat). Local
// tokenization costs the router a fraction of a millisecond per short prompt on the request's own forwarding
// thread, where asking a replica's /tokenize would cost a round trip and load on the replica.
// Thread-safe (const, and the tokenizer and template are read-only).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "deepinfer/status.h"
#include "model/model.h"
#include "protocol/chat.h"

namespace deepinfer::router {

class PromptTokenizer {
 public:
  // `model_path`: the GGUF file or HF directory the replicas serve; `chat_template`: the template source they
  // were given with --chat-template ("" = the model's).
  static StatusOr<std::unique_ptr<PromptTokenizer>> Load(const std::string& model_path, const std::string& chat_template);
  // The prompt's token ids for a POST to `path` (/v1/completions with one prompt, /v1/chat/completions), as
  // serve computes them; an error for anything else (a batch of prompts, /v1/responses, an invalid body), which
  // the router then routes by text.
  StatusOr<std::vector<int32_t>> Ids(const std::string& path, const std::string& body) const;
  uint64_t digest() const { return digest_; }  // protocol/prompt_digest.h

 private:
  PromptTokenizer() = default;
  Model model_;  // tokenizer, source and format only: what ChatFormatter reads
  std::unique_ptr<ChatFormatter> chat_;
  uint64_t digest_ = 0;
};

}  // namespace deepinfer::router
