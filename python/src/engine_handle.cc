#include "engine_handle.h"

#include "deepinfer/runtime.h"

namespace deepinfer::python {

StatusOr<std::shared_ptr<EngineHandle>> EngineHandle::Create(const std::string& model, const api::ModelOptions& mo,
                                                             api::EngineOptions eo, const std::string& draft_model) {
  std::shared_ptr<EngineHandle> h(new EngineHandle());
  // Threads first, as `deepinfer --threads` does, so loading runs on the pool the forward pass will use.
  if (eo.threads > 0) api::SetComputeThreads(eo.threads);
  DI_ASSIGN_OR_RETURN(h->model_, api::Model::Load(model, mo));
  if (!draft_model.empty()) {
    api::ModelOptions draft_options = mo;
    draft_options.mtp_model.clear();  // the target's
    DI_ASSIGN_OR_RETURN(h->draft_model_, api::Model::Load(draft_model, draft_options));
    eo.draft_model = h->draft_model_.get();
  }
  DI_ASSIGN_OR_RETURN(h->engine_, api::Engine::Create(*h->model_, eo));
  // Online mode: generate(), streams and asyncio all add requests while the loop runs, from any thread.
  h->engine_->Start();
  h->max_model_len_ = h->engine_->max_model_len();
  h->alive_ = true;
  return h;
}

EngineHandle::~EngineHandle() {
  // Dropped without shutdown(): the engine still stops cleanly; only the leak check's verdict is lost.
  (void)Shutdown();
}

StatusOr<uint64_t> EngineHandle::Add(std::vector<int32_t> prompt, const api::GenerationParams& params,
                                     api::OutputCallback cb) {
  std::lock_guard<std::mutex> lock(shutdown_mu_);
  if (shut_down_) return Internal("the engine is shut down (LLM.shutdown() was called)");
  return engine_->Add(std::move(prompt), params, std::move(cb));
}

Status EngineHandle::Validate(const std::vector<int32_t>& prompt, const api::GenerationParams& params) {
  std::lock_guard<std::mutex> lock(shutdown_mu_);
  if (shut_down_) return Internal("the engine is shut down (LLM.shutdown() was called)");
  return engine_->Validate(prompt, params);
}

api::EngineStats EngineHandle::Stats() {
  std::lock_guard<std::mutex> lock(shutdown_mu_);
  return engine_ ? engine_->Stats() : api::EngineStats{};
}

void EngineHandle::Abort(uint64_t request_id) {
  std::lock_guard<std::mutex> lock(shutdown_mu_);
  if (!shut_down_) engine_->Abort(request_id);
}

Status EngineHandle::Shutdown() {
  std::lock_guard<std::mutex> lock(shutdown_mu_);
  if (shut_down_ || !engine_) return shutdown_status_;
  alive_ = false;
  shut_down_ = true;
  shutdown_status_ = engine_->Shutdown();
  return shutdown_status_;
}

}  // namespace deepinfer::python
