#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <type_traits>

#include "api/engine_impl.h"
#include "api/model_impl.h"
#include "base/logging.h"
#include "base/thread_pool.h"

namespace deepinfer::api {
namespace {

// The queue between the engine thread (the request's callback pushes) and the stream's reader. Shared, so a
// stream destroyed while its request still runs leaves the callback a live queue until the abort lands.
struct StreamQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Output> events;
  int unfinished = 0;  // samples whose final event has not been pushed
};

class OutputStreamImpl final : public OutputStream {
 public:
  OutputStreamImpl(deepinfer::Engine& engine, uint64_t id, std::shared_ptr<StreamQueue> q)
      : engine_(engine), id_(id), q_(std::move(q)) {}
  ~OutputStreamImpl() override {
    bool unfinished;
    {
      std::lock_guard<std::mutex> lock(q_->mu);
      unfinished = q_->unfinished > 0;
    }
    if (unfinished) engine_.Abort(id_);
  }
  uint64_t request_id() const override { return id_; }
  bool Next(Output* out) override {
    std::unique_lock<std::mutex> lock(q_->mu);
    q_->cv.wait(lock, [&] { return !q_->events.empty() || q_->unfinished == 0; });
    if (q_->events.empty()) return false;
    *out = std::move(q_->events.front());
    q_->events.pop_front();
    return true;
  }

 private:
  deepinfer::Engine& engine_;
  uint64_t id_;
  std::shared_ptr<StreamQueue> q_;
};

}  // namespace

// The boundary's invariant (LevelDB's rule): the public types are the engine's own, never a mirror copied field by
// field. Reintroducing one fails here.
static_assert(std::is_base_of_v<EngineOptions, deepinfer::EngineOptions>, "the engine's options extend the public ones");
static_assert(std::is_base_of_v<GenerationParams, RequestParams>, "the engine's request extends the public one");
static_assert(std::is_same_v<deepinfer::SamplingParams, SamplingParams>, "the sampler reads the public type");
static_assert(std::is_same_v<RequestOutput, Output> && std::is_same_v<deepinfer::TokenLogprob, TokenLogprob>,
              "the engine's outputs are the public ones");
static_assert(std::is_base_of_v<ModelOptions, LoadOptions>, "the loader's options extend the public ones");

deepinfer::EngineOptions ResolveOptions(const EngineOptions& o) {
  deepinfer::EngineOptions e;
  static_cast<EngineOptions&>(e) = o;  // the public options are the engine's own; add what only this layer resolves
  if (o.draft_model) e.draft = &InternalModel(*o.draft_model);
  e.dist = dist::Context();  // the top level: the process's communicators under mpirun
  // Test hook (tests/dist/itl_tp.mjs): DEEPINFER_TEST_SKEW_STEP_TIME=RANK:FACTOR multiplies every step time that
  // world rank RANK (0 in one process) measures by FACTOR, so that the ranks of a --tp / --cp group disagree on
  // what a step costs; the latency target must still give the whole group the same budgets.
  if (const char* v = std::getenv("DEEPINFER_TEST_SKEW_STEP_TIME")) {
    int rank = -1;
    double factor = 0;
    char tail = 0;
    if (std::sscanf(v, "%d:%lf%c", &rank, &factor, &tail) != 2 || !(factor > 0) || !std::isfinite(factor)) {
      DI_LOG_WARN("DEEPINFER_TEST_SKEW_STEP_TIME='%s' is not RANK:FACTOR (FACTOR > 0): ignored", v);
    } else if (rank == (e.dist ? e.dist->pc.rank : 0)) {
      e.step_time_scale = factor;
      DI_LOG_WARN("DEEPINFER_TEST_SKEW_STEP_TIME (a test hook): rank %d's step times are multiplied by %g", rank, factor);
    }
  }
  return e;
}

RequestParams CompileParams(const GenerationParams& g) {
  RequestParams p(g);  // the public parameters are the engine's own; it takes the grammar compiled
  if (!g.grammar.empty())  // an invalid grammar leaves it uncompiled; Engine::Validate reports why
    if (auto gr = grammar::ParseGbnf(g.grammar); gr.ok()) p.compiled_grammar = *gr;
  return p;
}

StatusOr<std::unique_ptr<Engine>> Engine::Create(const Model& model, const EngineOptions& options) {
  if (options.threads > 0) deepinfer::SetComputeThreads(options.threads);
  DI_ASSIGN_OR_RETURN(std::unique_ptr<deepinfer::Engine> e, deepinfer::Engine::Create(InternalModel(model), ResolveOptions(options)));
  return std::unique_ptr<Engine>(std::make_unique<EngineImpl>(model, std::move(e)));
}

EngineImpl::EngineImpl(const Model& model, std::unique_ptr<deepinfer::Engine> engine)
    : model_(model), engine_(std::move(engine)) {}

EngineImpl::~EngineImpl() {
  if (!shut_down_) (void)engine_->Shutdown();
}

StatusOr<uint64_t> EngineImpl::Add(std::vector<int32_t> prompt, const GenerationParams& params, OutputCallback callback) {
  return engine_->Add(std::move(prompt), CompileParams(params), std::move(callback));  // the outputs are the public type
}

StatusOr<uint64_t> EngineImpl::AddText(const std::string& prompt, const GenerationParams& params, OutputCallback callback) {
  return Add(model_.EncodePrompt(prompt), params, std::move(callback));
}

StatusOr<std::unique_ptr<OutputStream>> EngineImpl::AddStream(std::vector<int32_t> prompt, const GenerationParams& params) {
  auto q = std::make_shared<StreamQueue>();
  q->unfinished = params.n;
  // Counted before Add: the first event may be pushed on the engine thread before Add returns.
  auto id = engine_->Add(std::move(prompt), CompileParams(params), [q](const RequestOutput& r) {
    {
      std::lock_guard<std::mutex> lock(q->mu);
      q->events.push_back(r);
      if (r.finished) --q->unfinished;
    }
    q->cv.notify_all();
  });
  if (!id.ok()) return id.status();
  return std::unique_ptr<OutputStream>(std::make_unique<OutputStreamImpl>(*engine_, *id, std::move(q)));
}

Status EngineImpl::Validate(const std::vector<int32_t>& prompt, const GenerationParams& params) const {
  return engine_->Validate(prompt, CompileParams(params));
}

Status EngineImpl::Shutdown() {
  shut_down_ = true;
  return engine_->Shutdown();
}

EngineStats EngineImpl::Stats() const {
  const deepinfer::EngineStats s = engine_->Stats();
  EngineStats o;
  o.steps = s.steps;
  o.prompt_tokens_computed = s.prompt_tokens_computed;
  o.cached_prompt_tokens = s.cached_prompt_tokens;
  o.replayed_prompt_tokens = s.replayed_prompt_tokens;
  o.generated_tokens = s.generated_tokens;
  o.preemptions = s.preemptions;
  o.requests_finished = s.requests_finished;
  o.requests_aborted = s.requests_aborted;
  o.waiting = s.waiting;
  o.running = s.running;
  o.kv_blocks_total = s.kv_blocks_total;
  o.kv_blocks_free = s.kv_blocks_free;
  o.spec_drafts = s.spec_drafts;
  o.spec_draft_tokens = s.spec_draft_tokens;
  o.spec_accepted_tokens = s.spec_accepted_tokens;
  return o;
}

}  // namespace deepinfer::api
