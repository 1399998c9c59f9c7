// The router's replicas: their state (up, down, serving another model), the requests it has in flight on each,
// the routing policy that picks among them, and a background health check. A replica is taken out when a
// request to it fails (connect error, reset) or it stops answering GET /health, and taken back in when it answers
// again (with the same model). The model is the one most replicas serve (GET /v1/models) at start; a replica
// serving another one is excluded and logged. Thread-safe.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "router/http_client.h"
#include "routing/routing_policy.h"

namespace deepinfer::router {

enum class ReplicaState { kDown, kUp, kWrongModel };
const char* ReplicaStateName(ReplicaState s);

struct ReplicaSetOptions {
  double health_interval_s = 1.0;  // between health-check rounds
  double health_timeout_s = 2.0;   // a replica not answering /health within this is down
};

// What /metrics shows of one replica.
struct ReplicaSnapshot {
  std::string url;
  ReplicaState state = ReplicaState::kDown;
  std::string model;
  int64_t in_flight = 0;
  uint64_t requests = 0, failures = 0, down_events = 0;
  uint64_t matched_chars = 0, text_chars = 0;  // the policy's prefix-match estimates over the requests sent here
  size_t estimate_chars = 0;                   // the policy's per-replica tree size
  // A policy fed by KV events: blocks of the prompts sent here that its events said it held, prompt blocks,
  // and its event stream's state.
  uint64_t matched_blocks = 0, prompt_blocks = 0;
  bool kv_events = false, kv_synced = false, kv_mismatch = false;
  size_t kv_blocks = 0;
  size_t kv_tier_blocks = 0;  // held only in the replica's KV tiers (RAM, disk)
  uint64_t kv_events_received = 0, kv_resyncs = 0;
  int64_t reported_waiting = 0, reported_running = 0, reported_kv_used = 0, reported_kv_total = 0;
};

class ReplicaSet {
 public:
  ReplicaSet(std::vector<Url> urls, std::unique_ptr<RoutingPolicy> policy, ReplicaSetOptions opt);
  ~ReplicaSet();

  // Probes every replica once (in parallel), settles the model, logs which replicas serve and which do not,
  // then starts the health checks.
  void Start();
  void Stop();

  struct Lease {
    int replica = -1;  // -1: no replica available
    Decision decision;
  };
  // The policy's pick for `text` among the replicas up and not in `exclude`; counted in flight until Release.
  Lease Acquire(std::string_view text, const std::vector<int>& exclude);
  // The same with the prompt's token ids (route --model), for a policy fed by KV events.
  Lease Acquire(std::string_view text, const std::vector<int32_t>* ids, const std::vector<int>& exclude);
  // The policy's KV event index of a replica (nullptr without one), for its subscriber.
  KvBlockIndex* kv_index(int replica) { return policy_->kv_index(replica); }
  // For requests without a prompt (model list, tokenize): the least loaded replica up, not counted by the policy.
  Lease AcquireAny(const std::vector<int>& exclude);
  void Release(int replica, bool failed);
  // A request to `replica` could not be completed (connect error, reset): take it out.
  void MarkDown(int replica, const std::string& reason);

  // In-flight calls to a replica, so that taking it out (or shutting down) aborts them at once.
  void Track(int replica, HttpClient* c);
  void Untrack(int replica, HttpClient* c);
  void AbortAll();
  bool stopping() const;  // after AbortAll or Stop: failures are the shutdown's, not the replicas'

  int size() const { return static_cast<int>(replicas_.size()); }
  const Url& url(int i) const { return replicas_[i].url; }
  int NumUp() const;
  std::string model() const;
  const char* policy_name() const { return policy_->name(); }
  // For a 503: "0 of 3 replicas up (2 down, 1 serving another model)".
  std::string Summary() const;
  std::vector<ReplicaSnapshot> Snapshot() const;

 private:
  struct Replica {
    Url url;
    ReplicaState state = ReplicaState::kDown;
    std::string model;
    int64_t in_flight = 0;
    uint64_t requests = 0, failures = 0, down_events = 0, matched_chars = 0, text_chars = 0;
    uint64_t matched_blocks = 0, prompt_blocks = 0;
    std::set<HttpClient*> calls;
  };
  struct Probe {
    bool reachable = false;
    std::string model;  // "" when /v1/models could not tell (e.g. the replica wants an API key)
    std::string error;
  };
  Probe ProbeOne(const Url& url) const;
  std::vector<Probe> ProbeAll() const;
  // Applies a health-check result to replica i (mu_ held); `at_start` words the log for the first round.
  void Apply(int i, const Probe& p, bool at_start);
  void MarkDownLocked(int i, const std::string& reason);
  void HealthLoop();
  std::string SummaryLocked() const;

  ReplicaSetOptions opt_;
  std::unique_ptr<RoutingPolicy> policy_;
  mutable std::mutex mu_;
  std::vector<Replica> replicas_;
  std::string model_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread health_;
};

}  // namespace deepinfer::router
