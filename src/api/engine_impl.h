// The api::Engine implementation over the internal Engine, and the conversions between the public option and
// output types and the internal ones. Internal header: not installed.
#pragma once
#include <memory>

#include "deepinfer/engine.h"
#include "engine/engine.h"

namespace deepinfer::api {

deepinfer::EngineOptions ToInternal(const EngineOptions& options);
RequestParams ToInternal(const GenerationParams& params);
GenerationParams FromInternal(const RequestParams& params);

class EngineImpl final : public Engine {
 public:
  EngineImpl(const Model& model, std::unique_ptr<deepinfer::Engine> engine);
  ~EngineImpl() override;

  StatusOr<uint64_t> Add(std::vector<int32_t> prompt, const GenerationParams& params, OutputCallback callback) override;
  StatusOr<uint64_t> AddText(const std::string& prompt, const GenerationParams& params, OutputCallback callback) override;
  StatusOr<std::unique_ptr<OutputStream>> AddStream(std::vector<int32_t> prompt, const GenerationParams& params) override;
  Status Validate(const std::vector<int32_t>& prompt, const GenerationParams& params) const override;
  void Abort(uint64_t request_id) override { engine_->Abort(request_id); }
  Status RunUntilIdle() override { return engine_->RunUntilIdle(); }
  void Start() override { engine_->Start(); }
  Status Shutdown() override;
  EngineStats Stats() const override;
  int max_model_len() const override { return engine_->max_model_len(); }

  // For the layers below the API (the HTTP server, benchmarks reading the engine's device counters).
  deepinfer::Engine& internal() { return *engine_; }

 private:
  const Model& model_;
  std::unique_ptr<deepinfer::Engine> engine_;
  bool shut_down_ = false;
};

inline deepinfer::Engine& InternalEngine(Engine& engine) { return static_cast<EngineImpl&>(engine).internal(); }

}  // namespace deepinfer::api
