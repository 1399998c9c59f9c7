#include "router/prompt_tokenizer.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "protocol/openai_request.h"
#include "protocol/prompt_digest.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::router {

StatusOr<std::unique_ptr<PromptTokenizer>> PromptTokenizer::Load(const std::string& model_path, const std::string& chat_template) {
  auto tok = TokenizerFromPath(model_path);
  if (!tok.ok()) return InvalidArgument("--model " + model_path + ": " + tok.status().message());
  std::unique_ptr<PromptTokenizer> p(new PromptTokenizer());
  p->model_.tokenizer = std::move(*tok);
  p->model_.source = model_path;
  p->model_.format = std::filesystem::is_directory(model_path) ? "hf" : "gguf";
  p->chat_ = std::make_unique<ChatFormatter>(p->model_, chat_template);
  p->digest_ = PromptDigest(*p->model_.tokenizer, p->chat_->source());
  return p;
}

StatusOr<std::vector<int32_t>> PromptTokenizer::Ids(const std::string& path, const std::string& body) const {
  if (path == "/v1/chat/completions") {
    const nlohmann::ordered_json j = nlohmann::ordered_json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return InvalidArgument("not a JSON object");
    const bool add_generation_prompt = !j.contains("add_generation_prompt") || j["add_generation_prompt"] != false;
    return chat_->EncodeRequest(j, add_generation_prompt);
  }
  if (path == "/v1/completions") {
    const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object()) return InvalidArgument("not a JSON object");
    return ParsePrompt(j, *model_.tokenizer);
  }
  return InvalidArgument("no token ids for " + path);
}

}  // namespace deepinfer::router
