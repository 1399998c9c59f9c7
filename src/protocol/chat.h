// Chat messages -> prompt tokens through the model's chat template (GGUF tokenizer.chat_template or
// tokenizer_config.json), falling back to ChatML as llama.cpp does. Shared by the API server and offline
// JSONL batches.
#pragma once
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "deepinfer/status.h"
#include "model/model.h"
#include "template/jinja.h"

namespace deepinfer {

// The template a model ships, or "" when it has none.
std::string ModelChatTemplate(const Model& model);

class ChatFormatter {
 public:
  // template_source: "" = the model's (else ChatML).
  ChatFormatter(const Model& model, const std::string& template_source = "");
  // Validates OpenAI-style messages (role strings; content a string, text parts or null), renders the template
  // and tokenizes (BOS added when the tokenizer wants it and the template did not write it).
  StatusOr<std::vector<int32_t>> Encode(const nlohmann::json& messages, bool add_generation_prompt) const;
  StatusOr<std::string> Render(const nlohmann::json& messages, bool add_generation_prompt) const;
  // A whole chat request body (parsed in order: templates that dump tools show the client's key order):
  // its `messages`, `tools` and `chat_template_kwargs` (Qwen3's enable_thinking, ...) reach the template;
  // `continue_final_message` leaves the last assistant message open for the model to continue (vLLM's field).
  StatusOr<std::vector<int32_t>> EncodeRequest(const nlohmann::ordered_json& request, bool add_generation_prompt) const;
  StatusOr<std::string> RenderRequest(const nlohmann::ordered_json& request, bool add_generation_prompt) const;
  bool using_fallback() const { return fallback_; }
  const std::string& source() const { return source_; }  // the template in use

 private:
  StatusOr<std::vector<int32_t>> Tokenize(const std::string& text) const;  // BOS unless the template wrote it

  const Tokenizer& tok_;
  std::unique_ptr<jinja::Template> tmpl_;
  bool fallback_ = false;
  bool template_tests_null_content_ = false;  // the template tests `content is (not) none` (DeepSeek-V3)
  bool template_has_developer_ = false;       // the template renders a `developer` role itself (gpt-oss's harmony)
  std::string source_;
};

}  // namespace deepinfer
