#include <nlohmann/json.hpp>

#include "api/model_impl.h"
#include "base/logging.h"
#include "hub/hub.h"
#include "kernels/ops.h"
#include "protocol/chat.h"

namespace deepinfer::api {
namespace {

nlohmann::json MessagesJson(const std::vector<ChatMessage>& messages) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& m : messages) a.push_back({{"role", m.role}, {"content", m.content}});
  return a;
}

}  // namespace

LoadOptions ResolveOptions(const ModelOptions& options) {
  LoadOptions o(options);  // the public options are the loader's own
  // The top level: under mpirun each rank loads its shard.
  if (const dist::DistContext* d = dist::Context()) o.split = &d->pc;
  return o;
}

StatusOr<std::unique_ptr<deepinfer::Model>> LoadInternalModel(const std::string& model, const LoadOptions& options) {
  DI_ASSIGN_OR_RETURN(std::string path, ResolveModel(model, HubOptions::FromEnv()));
  DI_ASSIGN_OR_RETURN(std::unique_ptr<deepinfer::Model> m, LoadModelFromPath(path, options));
  DI_LOG_INFO("loaded %s (%s): %s", path.c_str(), m->format.c_str(), m->config.Summary().c_str());
  DI_LOG_DEBUG("kernels: %s", OpsFor(Device::kCpu).kernels());
  return m;
}

StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& model, const ModelOptions& options) {
  DI_ASSIGN_OR_RETURN(std::unique_ptr<deepinfer::Model> m, LoadInternalModel(model, ResolveOptions(options)));
  return std::unique_ptr<Model>(std::make_unique<ModelImpl>(std::move(m)));
}

ModelImpl::ModelImpl(std::unique_ptr<deepinfer::Model> model) : model_(std::move(model)) {}
ModelImpl::~ModelImpl() = default;

std::vector<int32_t> ModelImpl::Encode(const std::string& text, bool add_bos) const {
  const Tokenizer& tok = *model_->tokenizer;
  return tok.Encode(text, add_bos && tok.bos_id() >= 0);
}

std::vector<int32_t> ModelImpl::EncodePrompt(const std::string& text) const {
  return Encode(text, model_->tokenizer->add_bos() || text.empty());
}

std::string ModelImpl::Decode(const std::vector<int32_t>& ids, bool skip_special) const {
  return model_->tokenizer->Decode(ids, skip_special);
}

const ChatFormatter& ModelImpl::chat() const {
  std::call_once(chat_once_, [&] { chat_ = std::make_unique<ChatFormatter>(*model_); });
  return *chat_;
}

StatusOr<std::string> ModelImpl::RenderChat(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const {
  return chat().Render(MessagesJson(messages), add_generation_prompt);
}

StatusOr<std::vector<int32_t>> ModelImpl::EncodeChat(const std::vector<ChatMessage>& messages,
                                                     bool add_generation_prompt) const {
  return chat().Encode(MessagesJson(messages), add_generation_prompt);
}

}  // namespace deepinfer::api
