#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>

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

deepinfer::EngineOptions ToInternal(const EngineOptions& o) {
  deepinfer::EngineOptions e;
  e.max_num_seqs = o.max_num_seqs;
  e.max_batched_tokens = o.max_batched_tokens;
  e.max_model_len = o.max_model_len;
  e.block_size = o.block_size;
  e.kv_cache_bytes = o.kv_cache_bytes;
  e.kv_cache_fraction = o.kv_cache_fraction;
  switch (o.kv_cache_dtype) {
    case KvCacheDtype::kF32: e.kv_dtype = DType::kF32; break;
    case KvCacheDtype::kBF16: e.kv_dtype = DType::kBF16; break;
    case KvCacheDtype::kF16: e.kv_dtype = DType::kF16; break;
  }
  e.prefix_caching = o.prefix_caching;
  e.swa_full = o.swa_full;
  e.swa_replay_max = o.swa_replay_max;
  e.swa_checkpoint_every = o.swa_checkpoint_every;
  e.swa_replay_approx = o.swa_replay_approx;
  e.overlap = o.overlap;
  e.kv_offload_ram_bytes = o.kv_offload_ram_bytes;
  e.kv_store_dir = o.kv_store_dir;
  e.kv_store_bytes = o.kv_store_bytes;
  e.target_itl_ms = o.target_itl_ms;
  e.speculative.method = static_cast<SpecMethod>(o.speculative);  // the enums list the methods in the same order
  e.speculative.num_tokens = o.num_speculative_tokens;
  e.speculative.ngram_min = o.ngram_min;
  e.speculative.ngram_max = o.ngram_max;
  e.speculative.verify = o.spec_verify == SpeculativeVerify::kExact ? SpecVerify::kExact : SpecVerify::kRejection;
  if (o.draft_model) e.speculative.draft_model = &InternalModel(*o.draft_model);
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

RequestParams ToInternal(const GenerationParams& g) {
  RequestParams p;
  p.sampling.temperature = g.temperature;
  p.sampling.top_k = g.top_k;
  p.sampling.top_p = g.top_p;
  p.sampling.min_p = g.min_p;
  p.sampling.presence_penalty = g.presence_penalty;
  p.sampling.frequency_penalty = g.frequency_penalty;
  p.sampling.repetition_penalty = g.repetition_penalty;
  p.sampling.logit_bias = g.logit_bias;
  p.has_seed = g.seed.has_value();
  p.sampling.seed = g.seed.value_or(0);
  p.max_tokens = g.max_tokens;
  p.n = g.n;
  p.stop = g.stop;
  p.stop_token_ids = g.stop_token_ids;
  p.ignore_eos = g.ignore_eos;
  p.logprobs = g.logprobs;
  p.include_stop_str_in_output = g.include_stop_str_in_output;
  p.speculative.num_tokens = g.num_speculative_tokens;
  p.priority = g.priority;
  if (!g.grammar.empty()) {  // an invalid grammar leaves p.grammar unset; Engine::Validate reports why
    p.grammar_source = g.grammar;
    if (auto gr = grammar::ParseGbnf(g.grammar); gr.ok()) p.grammar = *gr;
  }
  return p;
}

GenerationParams FromInternal(const RequestParams& p) {
  GenerationParams g;
  g.temperature = p.sampling.temperature;
  g.top_k = p.sampling.top_k;
  g.top_p = p.sampling.top_p;
  g.min_p = p.sampling.min_p;
  g.presence_penalty = p.sampling.presence_penalty;
  g.frequency_penalty = p.sampling.frequency_penalty;
  g.repetition_penalty = p.sampling.repetition_penalty;
  g.logit_bias = p.sampling.logit_bias;
  if (p.has_seed) g.seed = p.sampling.seed;
  g.max_tokens = p.max_tokens;
  g.n = p.n;
  g.stop = p.stop;
  g.stop_token_ids = p.stop_token_ids;
  g.ignore_eos = p.ignore_eos;
  g.logprobs = p.logprobs;
  g.include_stop_str_in_output = p.include_stop_str_in_output;
  g.grammar = p.grammar ? p.grammar_source : std::string();
  g.num_speculative_tokens = p.speculative.num_tokens;
  g.priority = p.priority;
  return g;
}

Status GenerationParams::Validate(int vocab_size) const { return ToInternal(*this).sampling.Validate(vocab_size); }

StatusOr<std::unique_ptr<Engine>> Engine::Create(const Model& model, const EngineOptions& options) {
  if (options.threads > 0) deepinfer::SetComputeThreads(options.threads);
  DI_ASSIGN_OR_RETURN(std::unique_ptr<deepinfer::Engine> e, deepinfer::Engine::Create(InternalModel(model), ToInternal(options)));
  return std::unique_ptr<Engine>(std::make_unique<EngineImpl>(model, std::move(e)));
}

EngineImpl::EngineImpl(const Model& model, std::unique_ptr<deepinfer::Engine> engine)
    : model_(model), engine_(std::move(engine)) {}

EngineImpl::~EngineImpl() {
  if (!shut_down_) (void)engine_->Shutdown();
}

StatusOr<uint64_t> EngineImpl::Add(std::vector<int32_t> prompt, const GenerationParams& params, OutputCallback callback) {
  return engine_->Add(std::move(prompt), ToInternal(params), std::move(callback));  // the outputs are the public type
}

StatusOr<uint64_t> EngineImpl::AddText(const std::string& prompt, const GenerationParams& params, OutputCallback callback) {
  return Add(model_.EncodePrompt(prompt), params, std::move(callback));
}

StatusOr<std::unique_ptr<OutputStream>> EngineImpl::AddStream(std::vector<int32_t> prompt, const GenerationParams& params) {
  auto q = std::make_shared<StreamQueue>();
  q->unfinished = params.n;
  // Counted before Add: the first event may be pushed on the engine thread before Add returns.
  auto id = engine_->Add(std::move(prompt), ToInternal(params), [q](const RequestOutput& r) {
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
  return engine_->Validate(prompt, ToInternal(params));
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
