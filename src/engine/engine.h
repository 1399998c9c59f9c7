// The engine: requests in, streamed outputs back, over continuous batching and the overlap step loop.
//
// The loop (docs/architecture.md "The engine"; the design notes it follows are ../shared/research/overlap.md
// section 6, outside the repository): each iteration schedules step N+1 on the
// device view, launches it on the executor stream, and only then processes step N's results on the host while
// N+1 computes. Overlap depth D = 1 by default; D = 0 (--no-overlap) runs the very same code but processes
// each step right after launching it. Outputs are bit-identical between the two: inputs come from the token
// table, sampling is keyed by (seed, sample, position), and the forward is batch- and chunk-invariant.
#pragma once
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/dist_control.h"
#include "engine/engine_options.h"
#include "engine/grammar_cache.h"
#include "engine/request_inbox.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/speculative.h"
#include "engine/step.h"
#include "engine/step_cost_model.h"
#include "kv/kv_event_log.h"
#include "engine/stream.h"
#include "engine/token_table.h"
#include "kv/block_pool.h"
#include "kv/kv_layout.h"
#include "model/model.h"

namespace deepinfer {

class Engine;

// A request that passed an engine's checks (Engine::Check). Only the engine makes one, so queueing it with
// Add(ValidatedRequest, ...) runs no check again: a server can reject a whole batch of prompts before it
// queues any of them, at the cost of one validation each.
class ValidatedRequest {
 public:
  const std::vector<int32_t>& prompt() const { return prompt_; }
  const RequestParams& params() const { return params_; }

 private:
  friend class Engine;
  ValidatedRequest(const Engine* engine, std::vector<int32_t> prompt, RequestParams params)
      : engine_(engine), prompt_(std::move(prompt)), params_(std::move(params)) {}
  const Engine* engine_;  // whose limits (vocabulary, context, KV pool) it was checked against
  std::vector<int32_t> prompt_;
  RequestParams params_;
  std::shared_ptr<const grammar::TokenSets> token_sets_;  // structured output: built here, off the engine thread
};

class Engine {
 public:
  // The CPU model executor on `model` (which must outlive the engine).
  static StatusOr<std::unique_ptr<Engine>> Create(const Model& model, const EngineOptions& opt);
  // Any executor (bench sim): make_executor receives the token table it must read inputs from and write to.
  using ExecutorFactory = std::function<std::unique_ptr<Executor>(TokenTable*)>;
  static StatusOr<std::unique_ptr<Engine>> CreateWithExecutor(const ModelConfig& config, const Tokenizer* tok,
                                                              const EngineOptions& opt, ExecutorFactory make);
  ~Engine();

  // Thread-safe. Validates (clear errors for bad parameters, prompts over the context, requests larger than the
  // whole KV pool) and queues the request; `cb` then receives its outputs on the engine thread.
  StatusOr<uint64_t> Add(std::vector<int32_t> prompt, RequestParams params, OutputCallback cb);
  // The checks Add makes, without queueing anything (thread-safe).
  Status Validate(const std::vector<int32_t>& prompt, const RequestParams& params) const;
  // Validate, keeping the checked request for Add (thread-safe).
  StatusOr<ValidatedRequest> Check(std::vector<int32_t> prompt, RequestParams params) const;
  // Thread-safe. Queues a request Check accepted, without checking it again (fails only when the engine is
  // shutting down, or for a request checked by another engine).
  StatusOr<uint64_t> Add(ValidatedRequest request, OutputCallback cb);
  // Thread-safe. Ends the request with finish_reason "abort" (its final event says so); unknown or finished
  // ids are ignored.
  void Abort(uint64_t request_id);

  // Offline: runs the loop on the calling thread until every request has finished.
  Status RunUntilIdle();
  // Server: runs the loop on a background thread until Shutdown (which aborts what is left, drains the
  // pipeline and returns the leak check).
  void Start();
  Status Shutdown();

  // Every block, slot and ring entry free (call when idle).
  Status CheckNoLeaks() const;
  EngineStats Stats() const;
  void ResetDeviceCounters() { stream_.ResetCounters(); }
  // Multi-process (under mpirun): the control plane, nullptr in one process. Rank 0 owns I/O: requests are
  // added there and routed to the attention groups; on the other ranks RunUntilIdle serves rank 0 until it shuts
  // the job down (Shutdown on rank 0).
  const DistControl* dist() const { return dist_.get(); }
  const EngineOptions& options() const { return opt_; }
  int max_model_len() const { return sched_cfg_.max_model_len; }
  int num_kv_blocks() const { return pool_->num_blocks(); }
  // The KV layout the pool pages (its groups: kv/kv_layout.h), and blocks of group g in use now and at most
  // since the engine started (read on the engine thread, from an output callback, or when idle).
  const KvLayout& kv_layout() const { return kv_layout_; }
  int kv_group_in_use(int g) const { return pool_->in_use(g); }
  int kv_group_peak(int g) const { return pool_->peak(g); }
  int kv_cached_blocks() const { return pool_->num_cached(); }  // blocks the prefix cache can match (every group)
  // Bytes one pool block id takes over every cache the engine pages with it: the model's, and a draft model's or
  // a separate MTP cache's, indexed by the same ids (0 from CreateWithExecutor). A sequence holds
  // sum_g kv_group_in_use(g) x this.
  size_t kv_block_bytes() const { return kv_block_bytes_; }
  // Tests: waits until every block offered to the KV tiers is stored (no-op without tiers).
  void FlushKvTiers() {
    if (tiers_) tiers_->Flush();
  }
  // Thread-safe: the prefix cache's change log (full-attention group 0; the pool and the KV tiers) for GET
  // /v1/kv_events; on rank 0 of a --dp job, every group's (engine/kv_event_union.h).
  const KvEventLog& kv_events() const;
  // The KV identity digest (kv_identity.h) of the model and KV settings, so a router can check that its replicas
  // and its own tokenizer agree; 0 from CreateWithExecutor (no model).
  uint64_t model_digest() const { return model_digest_; }
  // Tests (when idle): evicts the cached, unreferenced blocks of the windowed KV groups (windowed_only) or of
  // every group, as memory pressure would.
  void EvictCachedKv(bool windowed_only) {
    pool_->EvictCached([&](int g) { return !windowed_only || kv_layout_.window(g) > 0; });
  }

 private:
  Engine(const ModelConfig& config, const Tokenizer* tok, const EngineOptions& opt, int num_blocks,
         const KvLayout& layout = {});
  // The most positions past a sequence's read floor its blocks reach (MaxSeqBlocks' `ahead`).
  int64_t KvAhead() const;
  bool HasWork();
  void StepOnce();
  void Ingest();
  void IngestRequests(std::vector<std::unique_ptr<Request>> inbox, const std::vector<uint64_t>& aborts);
  void AbortAll();
  void Launch(SchedulerOutputs so);
  void Process(WorkerStepState& st);
  void Commit(Sequence* s, const SampledToken& t);
  void CommitRun(Sequence* s, const VerifiedRun& run);
  bool AbortPending(uint64_t request_id) const;
  void Finish(Sequence* s, std::string reason, std::string stop_reason = {}, RequestOutput ev = {});
  void Emit(Sequence* s, RequestOutput ev);
  void MaybeRelease(Sequence* s);
  void AbortNow(uint64_t request_id);
  void DrainForShutdown();
  // The newest fence every step before it has passed, as scheduling decisions may use it.
  Fence CompletedFence() const;
  // Latency target: installs the scheduler's prefill limit (when --target-itl-ms is set), and the limit itself:
  // the prefill tokens the step may add to its decode rows.
  void SetUpLatencyTarget();
  int PrefillLimit(const SchedulerOutputs& decode_rows);

  ModelConfig config_;
  const Tokenizer* tok_;
  GrammarCache grammars_;
  EngineOptions opt_;
  SchedulerConfig sched_cfg_;
  KvLayout kv_layout_;
  // Before the pool, which reports to it.
  std::unique_ptr<KvEventLog> kv_events_;
  uint64_t model_digest_ = 0;
  size_t kv_block_bytes_ = 0;
  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<TokenTable> table_;
  std::unique_ptr<Scheduler> sched_;
  std::unique_ptr<Executor> executor_;
  // Declared after the executor, which owns the KV cache the tiers read and write: destroyed first.
  std::unique_ptr<KvTiers> tiers_;
  Stream stream_;
  WorkerStepState ring_[2];
  WorkerStepState* prev_ = nullptr;
  uint64_t next_step_ = 1;
  Fence processed_fence_ = 0;  // the done fence of the newest processed step
  // Latency target: the fit of step times, each ring entry's step shape (written at Launch) and duration (written
  // by the stream after Execute, read after its fence), and the limit given to the step being scheduled.
  StepCostModel cost_;
  struct StepTiming {
    StepShape shape;
    double seconds = 0;
  };
  StepTiming timing_[2];
  // Groups of several ranks (DistControl::shares_step_times()): this rank's timings of the steps processed since
  // the last Sync, which ships them; the cost model observes the group leader's instead.
  std::vector<StepObservation> unshared_timings_;
  int prefill_limit_ = -1;
  bool target_infeasible_logged_ = false;
  int64_t target_filled_steps_ = 0;  // limited steps whose prefill reached the limit (under stats_mu_; logs)

  std::unordered_map<uint64_t, std::unique_ptr<Request>> requests_;
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> seqs_;
  std::unordered_map<uint64_t, std::vector<Sequence*>> seqs_of_;
  uint64_t next_seq_id_ = 1, next_arrival_ = 1;

  RequestInbox inbox_;  // the thread-safe part: requests and aborts from other threads, the stop signal
  std::thread thread_;
  // The loop thread (Start): its last iteration launched nothing while requests waited on tier loads, and the
  // loads completed before it (it sleeps until that count moves or the inbox has something).
  bool idle_on_loads_ = false;
  uint64_t idle_loads_seen_ = 0;

  mutable std::mutex stats_mu_;
  EngineStats stats_;

  // What the multi-process control plane sees of the engine (DistControl::Host), and the control plane.
  class DistHost;
  std::unique_ptr<DistHost> dist_host_;
  std::unique_ptr<DistControl> dist_;
};

}  // namespace deepinfer
