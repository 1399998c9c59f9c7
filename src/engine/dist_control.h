// The engine's control plane across the ranks of a multi-process job (../shared/research/moe_parallel.md 3.2, outside the repository; SGLang's
// DP attention): rank 0 owns all I/O, each attention group (dp rank) runs its own scheduler, KV pool and
// overlap loop, and every rank steps in lockstep because MoE layers are collective over all of them.
//
// Each loop iteration of every rank's engine makes two collective calls on the control communicator:
//   Exchange (top of the iteration): rank 0 broadcasts what arrived since the last one: new requests, each
//     already routed to a group, aborts, and the stop signal. The ranks of the chosen group queue the request
//     with the id rank 0 gave it; the other ranks ignore it.
//   Sync (after scheduling): every rank contributes whether it has rows to run, whether it still has work, its
//     counters, and (group leaders) their prefix cache's changes since the last Sync (engine/kv_event_feed.h)
//     and the output events they produced since; every rank learns whether any rank runs this step, so a rank
//     with nothing to do launches an empty step (its MoE collectives still run), and rank 0 feeds the changes
//     to its routing policy and delivers the remote events to their callbacks in rank order. Under a latency
//     target (--target-itl-ms) with --tp or --cp > 1, every rank also contributes the timings of the steps it
//     processed since the last Sync, and every rank of a group feeds its cost model its group leader's (the
//     lowest rank of the group), so the group's prefill budgets agree bit for bit (see shares_step_times()).
// Routing is `deepinfer route`'s policy code over another transport (routing/routing_policy.h, --dp-policy): one
// "replica" per group, its load the samples rank 0 routed there and has not seen finish, and for cache_aware its
// KvBlockIndex fed by the group's own KV events, so a prompt goes where the most of its leading blocks are
// cached (routing/kv_events_policy.h). A prompt shorter than one block has nothing to match and goes to the least
// loaded group.
// The tensor-parallel ranks of a group see the same requests at the same iteration and sample the same tokens
// (full-vocabulary logits on each), so their schedulers stay identical without exchanging schedules. The one
// input that comes from outside the schedule, the latency target's step times, is made common: the leader's
// clock is the group's clock.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "dist/parallel.h"
#include "engine/engine_options.h"
#include "engine/request.h"
#include "engine/request_inbox.h"
#include "engine/step_cost_model.h"

namespace deepinfer {
namespace router {
class RoutingPolicy;
}
class KvEventFeed;
class KvEventLog;
class KvEventUnion;


// Rank 0's routing decisions for one group: per router::Outcome, and the prompt blocks the chosen group held by
// its events (with the prompts' full blocks, for a hit rate).
struct RoutingCounts {
  int64_t cache_hit = 0, cache_miss = 0, imbalance = 0, least_load = 0, round_robin = 0;
  int64_t matched_blocks = 0, prompt_blocks = 0;
};

// One rank's counters as rank 0 last heard them (metrics with dp_rank / ep_rank labels).
struct RankReport {
  int64_t has_rows = 0, busy = 0;
  int64_t steps = 0, rows = 0, prompt_tokens_computed = 0, generated_tokens = 0, requests_finished = 0;
  int64_t running = 0, waiting = 0, kv_blocks_free = 0, kv_blocks_total = 0, assigned_requests = 0;
  int64_t moe_bytes_sent = 0, expert_rows = 0;
  int64_t attention_work = 0, cp_bytes_sent = 0;  // context parallelism: query x key pairs, K/V exchange bytes
  // The rank's KV tiers (--kv-offload-ram / --kv-store; each rank has its own): blocks loaded from each tier and
  // blocks written to each.
  int64_t kv_tier_ram_hits = 0, kv_tier_disk_hits = 0, kv_tier_ram_blocks_written = 0, kv_tier_disk_blocks_written = 0;
  RoutingCounts routed;  // on group leaders' entries, filled by Reports() (rank 0 decides; 0 elsewhere)
};

class DistControl {
 public:
  // What the control plane needs of its rank's engine (the engine implements it; nothing else is reachable).
  class Host {
   public:
    virtual ~Host() = default;
    // Queues what rank 0 routed to this rank's group (and the aborts) into the engine.
    virtual void IngestRequests(std::vector<std::unique_ptr<Request>> requests, const std::vector<uint64_t>& aborts) = 0;
    virtual void AbortAll() = 0;
    virtual bool HasSequences() const = 0;        // sequences live or a step in flight
    virtual int64_t AssignedRequests() const = 0;  // requests this rank's engine holds
    virtual EngineStats LocalStats() const = 0;   // this rank's counters (thread-safe)
    // The prefix cache's change log (thread-safe), shipped to rank 0 for routing; nullptr: none.
    virtual const KvEventLog* KvEvents() const { return nullptr; }
    // Latency target, groups of several ranks (shares_step_times()): the timings of the steps this rank processed
    // since the last Sync (taken: the engine forgets them), and, inside Sync, its group leader's timings of the
    // same steps, for the cost model. Called on every rank of a group at the same iteration.
    virtual std::vector<StepObservation> TakeStepTimings() { return {}; }
    virtual void ObserveStepTimings(const std::vector<StepObservation>& leader) { (void)leader; }
  };
  // inbox: the engine's (rank 0 takes what clients added there); block_size: the KV block, for prefix routing.
  // The routing policy is ctx.pc.dp_policy (checked at start-up; an unknown one is an error there).
  DistControl(dist::DistContext& ctx, Host& engine, RequestInbox& inbox, int block_size);
  ~DistControl();
  bool is_root() const { return ctx_.pc.rank == 0; }
  const dist::ParallelConfig& pc() const { return ctx_.pc; }

  // Rank 0 only: requests routed to other groups whose final events have not come back yet.
  bool RemotePending() const { return !remote_.empty(); }
  // Every rank: the stop signal came and the whole job drained (every rank leaves its loop at this iteration).
  bool done() const { return done_; }
  bool stopping() const { return stopping_; }
  // The ranks of this rank's attention group (--tp x --cp > 1) share their step timings through Sync: the engine
  // then hands its timings to TakeStepTimings instead of observing them, and observes the leader's in Sync, one
  // iteration later than one process would (every rank of the group alike). A group of one rank times itself.
  bool shares_step_times() const { return ctx_.pc.tp * ctx_.pc.cp > 1; }

  // The two collective calls of an iteration (see the header comment). Exchange ingests into the engine;
  // Sync returns whether this iteration launches a step (on every rank alike).
  void Exchange();
  bool Sync(bool has_rows);

  // Rank 0, thread-safe: the latest reports of every rank (index = world rank).
  std::vector<RankReport> Reports() const;
  // Group leaders ship their KV events to rank 0 in every Sync (--dp > 1).
  bool ships_events() const { return ship_events_; }
  // Rank 0 of a --dp job: every group's KV events as one log (thread-safe to read); nullptr elsewhere.
  const KvEventLog* JobKvEvents() const;

 private:
  int Route(const std::vector<int32_t>& prompt, int n);
  int LeastLoaded() const;
  // The callback of a request that lives on this rank's group: the original one on rank 0, else (the group's
  // leader) an append to the outbox sent to rank 0 at the next Sync, else nothing.
  OutputCallback LocalCallback();

  dist::DistContext& ctx_;
  Host& e_;
  RequestInbox& inbox_;
  const int block_size_;
  bool stopping_ = false, done_ = false;
  // Rank 0: requests living on other groups (callback, samples not yet finished), and the routing state.
  struct Remote {
    OutputCallback cb;
    int unfinished = 0;
    int group = 0;
  };
  std::unordered_map<uint64_t, Remote> remote_;
  std::vector<int64_t> group_load_;                 // samples in flight per group (routing)
  int last_routed_ = -1;
  std::vector<int64_t> group_routed_;               // requests routed per group since start (logs)
  std::unique_ptr<router::RoutingPolicy> policy_;   // one replica per group
  std::vector<RoutingCounts> group_decisions_;
  // Rank 0: one receiving end per group (policy_'s index for the group); group leaders: their log's sending end.
  bool ship_events_ = false;  // --dp > 1: group leaders ship their KV events to rank 0 (every rank knows it)
  std::unique_ptr<KvEventUnion> all_events_;  // rank 0: the union of the groups' events
  std::vector<std::unique_ptr<KvEventFeed>> feeds_in_;
  std::unique_ptr<KvEventFeed> feed_out_;
  // Group leaders: events produced since the last Sync (filled on the engine thread, inside Process).
  std::vector<RequestOutput> outbox_;
  mutable std::mutex reports_mu_;  // reports_ and group_decisions_ (read by /metrics)
  std::vector<RankReport> reports_;
};

}  // namespace deepinfer
