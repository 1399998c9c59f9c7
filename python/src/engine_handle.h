// One loaded model and one engine over it, running online (the engine's loop on its own thread), shared by the
// Python LLM / AsyncLLM object and every batch and stream it handed out: those hold the handle, so the engine
// outlives them whatever order Python's garbage collector picks. Nothing here touches Python objects from the
// engine's thread; the GIL is released around everything that waits.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "deepinfer/engine.h"
#include "deepinfer/model.h"
#include "deepinfer/status.h"

namespace deepinfer::python {

class EngineHandle {
 public:
  // Loads the model (and `draft_model` for speculative decoding with a draft, when not empty) and starts the
  // engine. Call without the GIL: loading takes seconds.
  static StatusOr<std::shared_ptr<EngineHandle>> Create(const std::string& model, const api::ModelOptions& mo,
                                                        api::EngineOptions eo, const std::string& draft_model);
  ~EngineHandle();

  const api::Model& model() const { return *model_; }
  // Engine::Add, or an error once the engine is shut down. Thread-safe.
  StatusOr<uint64_t> Add(std::vector<int32_t> prompt, const api::GenerationParams& params, api::OutputCallback cb);
  Status Validate(const std::vector<int32_t>& prompt, const api::GenerationParams& params);
  api::EngineStats Stats();
  int max_model_len() const { return max_model_len_; }
  // Thread-safe; a no-op after Shutdown (which has aborted everything already).
  void Abort(uint64_t request_id);
  // The engine's leak check: aborts what is left, drains, and fails if a KV block or sequence slot leaked.
  // Later calls return the first result.
  Status Shutdown();
  bool alive() const { return alive_.load(); }

 private:
  EngineHandle() = default;

  std::unique_ptr<api::Model> model_;
  std::unique_ptr<api::Model> draft_model_;  // EngineOptions::draft_model points here: it outlives engine_
  std::unique_ptr<api::Engine> engine_;
  int max_model_len_ = 0;
  std::mutex shutdown_mu_;  // Shutdown against Add / Abort from other threads
  std::atomic<bool> alive_{false};
  bool shut_down_ = false;
  Status shutdown_status_;
};

}  // namespace deepinfer::python
