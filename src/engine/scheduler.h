// Continuous batching on the device view: which sequences run in the next step and which positions each runs.
// Policy (vLLM v1-like): decode rows first (one token each, oldest first), then continuing prefill chunks, then
// admission of waiting sequences in arrival order, all under a per-step token budget and a row limit. Requests
// with a priority (RequestParams::priority, lower first) take prefill and admission one level at a time, and a
// waiting one that does not fit preempts a less urgent running sequence (vLLM's priority policy). KV blocks
// are allocated on demand; when a decode row cannot get a block the youngest running sequence that has nothing
// in flight is preempted (its blocks freed, to be recomputed later from its known tokens; the recompute is
// bit-identical because the forward is chunk-invariant and sampling is keyed by position; a speculating sequence's
// ends with a verify row at its last known token, as its interrupted run would have gone on).
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/sequence.h"
#include "engine/step.h"
#include "engine/token_table.h"
#include "kv/block_pool.h"
#include "kv/kv_tiers.h"

namespace deepinfer {

struct SchedulerConfig {
  int max_num_seqs = 64;         // rows per step and token-table slots
  int max_batched_tokens = 512;  // tokens per step (prefill chunks + decode rows)
  int max_model_len = 2048;      // prompt + generated tokens per sequence
  bool prefix_caching = true;
  // MTP speculation: the module's K/V at a block's last position pairs it with the next block's first token, which
  // prefix matching does not compare; one block fewer is reused so those pairs are recomputed.
  bool prefix_drop_last_block = false;
  // Rejection verification: a verify row's tokens depend on the drafts it verifies (which positions have one, and
  // for MTP and n-gram which draft of a row's chain it is), so a speculating row takes its request's k, cut only
  // by its length limits, or waits: never fewer drafts for the token budget, the pool or an in-flight step's
  // unknown outcome. Its outputs are then those of its own history, whatever else runs.
  bool spec_full_k = false;
  // KV groups of a hybrid cache (kv/kv_layout.h), one window per group (0: full attention); empty: one group.
  // Every group gets a block table per sequence over the one pool; a window-W group's blocks are released once
  // they leave every reader's window (Slide).
  std::vector<int> group_window;
  // Bounded replay (with a full-attention group): a prefix hit whose windows are no longer cached past the last
  // position C where every windowed group still holds its window reuses the full groups' K/V up to C + this
  // many tokens (rounded down to blocks) and recomputes [C, ..) for the windowed groups only. 0: reuse up to C.
  int swa_replay_max = 0;
  // Sparse window checkpoints (EngineOptions::swa_checkpoint_every, in tokens, a multiple of the block size; 0:
  // off): Slide keeps cached only the windowed blocks that the window ending at a multiple of it needs.
  int swa_checkpoint_every = 0;
  // Approximate replay (--swa-replay approx, DeepSeek-V4): the windowed groups are never published, and a hit at H
  // (the full groups' match) recomputes from approx_replay_from(H) for the windowed groups, whose attention reads
  // nothing below that (Sequence::window_floor). Unset: exact replay.
  std::function<int(int hit)> approx_replay_from;
  // The latency target (Engine, --target-itl-ms): given the step's decode rows, the most prefill tokens it may
  // add (prefill chunks and admissions). Unset: only max_batched_tokens limits them.
  std::function<int(const SchedulerOutputs& decode_rows)> prefill_limit;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& cfg, BlockPool* pool, TokenTable* table);

  // Fills `out` (rows, block-table snapshots) for step out->step and advances the device view of every
  // sequence it schedules.
  void Schedule(SchedulerOutputs* out);

  void AddWaiting(Sequence* s);     // by priority, then arrival order
  void RemoveWaiting(Sequence* s);  // a queued sequence was aborted (a load it waits on runs on, unowned)
  // Returns a finished sequence's slot and blocks (publishing its full blocks to the prefix cache first).
  // Requires nothing in flight to use them (inflight == 0); gated on the fence of its last step anyway.
  void Release(Sequence* s, Fence completed);
  // Offers the full blocks whose tokens and K/V are both known (host view) to the prefix cache.
  void Publish(Sequence* s);
  // Releases the blocks of a running sequence's sliding-window groups that left the window of every row it has
  // in flight or will run (Sequence::read_floor). Called once a processed step's fence has passed, so no step
  // that read them is still running (docs/architecture.md, "Hybrid KV cache").
  void Slide(Sequence* s);
  // The KV tiers behind the prefix cache (null: none). Admission continues a pool match into them: a waiting
  // sequence whose prefix the tiers hold past the pool's match (a hybrid cache: or whose windows they hold) waits
  // in a loading state (not admitted, not holding up the requests behind it) while the tiers' loader fills fresh
  // blocks; the next Schedule after the load is done publishes them and admits it as a hit. Publication writes
  // new blocks of every group through to them.
  void SetTiers(KvTiers* tiers) { tiers_ = tiers; }
  // Loads in flight (their sequences, or none left, wait on them) and the waiting sequences in a loading state.
  int num_loads() const { return static_cast<int>(loads_.size()); }
  int num_loading() const { return static_cast<int>(waits_on_.size()); }
  // Shutdown: waits for every load in flight and returns its blocks to the pool (the leak check needs them).
  void DrainLoads();
  // Slots whose last step has passed go back to the free list.
  void Reclaim(Fence completed);

  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int num_running() const { return static_cast<int>(running_.size()); }
  int num_free_slots() const { return static_cast<int>(free_slots_.size()); }
  int64_t preemptions() const { return preemptions_; }
  int64_t priority_preemptions() const { return priority_preemptions_; }  // of those, for a more urgent request
  int64_t cached_tokens() const { return cached_tokens_; }
  int64_t replayed_tokens() const { return replayed_tokens_; }  // prompt tokens recomputed to rebuild windows
  const BlockPool& pool() const { return *pool_; }
  const SchedulerConfig& config() const { return cfg_; }
  Status CheckNoLeaks() const;

 private:
  int num_groups() const { return cfg_.group_window.empty() ? 1 : static_cast<int>(cfg_.group_window.size()); }
  int window(int g) const { return cfg_.group_window.empty() ? 0 : cfg_.group_window[g]; }
  // Whether any KV group is windowed (the layout is fixed for the scheduler's life).
  bool windowed() const {
    for (int w : cfg_.group_window)
      if (w > 0) return true;
    return false;
  }
  int BlocksMissing(size_t have, int positions) const;  // blocks to add to `have` to cover [0, positions)
  // Every group's table grows to cover positions [0, positions), all or nothing: false (and the tables
  // unchanged) if the pool is short.
  bool AllocateBlocks(std::vector<std::vector<int32_t>>* tables, int positions);
  bool EnsureBlocks(Sequence* s, int positions);  // the same for a running sequence's block tables
  Sequence* PickVictim(const Sequence* requester, uint64_t step) const;
  // The least urgent running sequence (the highest priority value, youngest among equals) strictly less urgent
  // than priority `than`; idle_only: only one that can be preempted now (idle, not in the step being built, as
  // PickVictim). Null when none.
  Sequence* LeastUrgentRunning(int than, bool idle_only, uint64_t step) const;
  // Step 0 of Schedule: makes a sequence slot for the most urgent waiting request when all are taken by less
  // urgent ones. Returns the id of a victim that is still busy (to get no row in this step), else 0.
  uint64_t PreemptForPriority(uint64_t step);
  bool GrowOrPreempt(Sequence* s, int positions, uint64_t step);
  void Preempt(Sequence* s);
  // False when `s` cannot be admitted now: *loading says it waits on a tier load (the others may go past it).
  bool Admit(Sequence* s, int* budget, SchedulerOutputs* out, bool* loading);
  // The prefix-cache hit for a waiting sequence of `known` tokens: fills `tables` (held blocks; -1 below
  // first[g]) and returns the reused positions of the full groups (*reuse) and where computing starts. Sets
  // *loading (and holds nothing) when it started or joined a tier load instead.
  int MatchForAdmission(const Sequence* s, std::vector<std::vector<int32_t>>* tables, std::vector<int>* first,
                        int* reuse, bool* loading);
  // The tiers: plans a load past the pool's matches of the full groups (`tables`; a hybrid cache's windows too, by
  // the same hit rule as MatchForAdmission): kNothing when it would gain nothing over the pool's own hit, kNoRoom
  // when the pool cannot give blocks now.
  enum class TierPlan { kLoad, kNothing, kNoRoom };
  TierPlan PlanTierLoad(const int32_t* tokens, int known, const std::vector<std::vector<int32_t>>& tables,
                        KvTiers::LoadPlan* plan) const;
  // Starts (or joins) a tier load for `s`, which then waits on it holding nothing (the tables' references move
  // into the load, or are released); false, with the tables untouched, when there is nothing to load.
  bool StartTierLoad(const Sequence* s, std::vector<std::vector<int32_t>>* tables);
  // The tiers' loads that are done: their blocks are published to the pool's cache and released (the requests
  // waiting on them match them next, as the most recent blocks of the cache). Called first in Schedule.
  void FinishLoads();
  bool Loading(const Sequence* s) const {
    auto w = waits_on_.find(s);
    return w != waits_on_.end() && !w->second.load->finished;
  }
  void EmitRow(Sequence* s, int q_len, SchedulerOutputs* out, bool dynamic = false);

  SchedulerConfig cfg_;
  BlockPool* pool_;
  TokenTable* table_;
  KvTiers* tiers_ = nullptr;
  std::vector<std::shared_ptr<KvTiers::Load>> loads_;                                   // in flight
  // Loading sequences: the load each waits on, and whether it started it (a sequence that joined another's load
  // may start its own for the blocks past it, e.g. its own suffix after a shared system prompt).
  struct LoadWait {
    std::shared_ptr<KvTiers::Load> load;
    bool own = false;
  };
  std::unordered_map<const Sequence*, LoadWait> waits_on_;
  // Sequences whose own load finished, and the blocks their prefix then reached: not sent to the tiers again for
  // those until admitted (a block that failed validation stays a miss rather than a load per step), unless the
  // pool lost some of them meanwhile.
  std::unordered_map<const Sequence*, int> load_tried_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // in admission order
  std::vector<int32_t> free_slots_;
  std::vector<uint32_t> slot_gen_;
  struct Pending { Fence fence; int32_t slot; };
  std::deque<Pending> pending_slots_;
  int64_t preemptions_ = 0, priority_preemptions_ = 0, cached_tokens_ = 0, replayed_tokens_ = 0;
  // Whether the last step's admissions stopped at a request that did not fit (then no budget is held back for
  // newcomers: it would go unused until blocks or slots come free).
  bool admission_blocked_ = false;
};

}  // namespace deepinfer
