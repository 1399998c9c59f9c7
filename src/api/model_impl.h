// The api::Model implementation over the internal Model, and the one model-loading path every front end shares
// (the public Model::Load and the CLI tools that need the internal Model). Internal header: not installed.
#pragma once
#include <memory>
#include <mutex>
#include <string>

#include "deepinfer/model.h"
#include "model/model.h"

namespace deepinfer {
class ChatFormatter;
}

namespace deepinfer::api {

// Resolves `model` (path or hub reference), loads it and logs what was loaded.
StatusOr<std::unique_ptr<deepinfer::Model>> LoadInternalModel(const std::string& model, const LoadOptions& options);
// The loader's options: the public ones plus this process's shard under mpirun (the top level reads the global).
LoadOptions ResolveOptions(const ModelOptions& options);

class ModelImpl final : public Model {
 public:
  explicit ModelImpl(std::unique_ptr<deepinfer::Model> model);
  ~ModelImpl() override;

  const std::string& format() const override { return model_->format; }
  const std::string& path() const override { return model_->source; }
  std::string Summary() const override { return model_->config.Summary(); }
  int context_length() const override { return model_->config.max_ctx; }
  int vocab_size() const override { return model_->config.vocab_size; }
  std::vector<int32_t> Encode(const std::string& text, bool add_bos) const override;
  std::vector<int32_t> EncodePrompt(const std::string& text) const override;
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special) const override;
  int32_t bos_id() const override { return model_->tokenizer->bos_id(); }
  int32_t eos_id() const override { return model_->tokenizer->eos_id(); }
  bool IsEndOfGeneration(int32_t id) const override { return model_->tokenizer->IsEog(id); }
  StatusOr<std::string> RenderChat(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const override;
  StatusOr<std::vector<int32_t>> EncodeChat(const std::vector<ChatMessage>& messages,
                                            bool add_generation_prompt) const override;

  // For the layers below the API (engine creation, the HTTP server, benchmarks over the weights).
  const deepinfer::Model& internal() const { return *model_; }
  // The model's chat template, parsed on first use (a model used only for completions never parses it, and
  // never warns that it has none).
  const ChatFormatter& chat() const;

 private:
  std::unique_ptr<deepinfer::Model> model_;
  mutable std::once_flag chat_once_;
  mutable std::unique_ptr<ChatFormatter> chat_;
};

inline const deepinfer::Model& InternalModel(const Model& model) { return static_cast<const ModelImpl&>(model).internal(); }

}  // namespace deepinfer::api
