// The routing policy interface: given a request's prompt text and each replica's state, pick one replica.
// Transport-free on purpose (no sockets, no HTTP): `deepinfer route` drives it over HTTP replicas, and `serve --dp`
// drives the same objects over its data-parallel groups (engine/dist_control.h), so it is built into deepinfer_core.
// Not thread-safe: the caller serializes Pick / OnReplicaDown (the router holds one mutex around them).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer::router {

class KvBlockIndex;

// What a policy sees of one replica. `in_flight` is what the caller tracks (requests sent and not finished).
struct ReplicaView {
  bool available = false;  // up and serving the router's model
  int64_t in_flight = 0;
};

// Why a replica was picked (one Prometheus label value each).
enum class Outcome { kCacheHit, kCacheMiss, kImbalance, kLeastLoad, kRoundRobin };
const char* OutcomeName(Outcome o);

struct Decision {
  int replica = -1;  // -1: none available
  Outcome outcome = Outcome::kRoundRobin;
  // The policy's estimate of the chosen replica's cached prefix, in characters of `text` (0 without a tree).
  size_t matched_chars = 0;
  size_t text_chars = 0;
  // Policies fed by KV events (kv_events_policy.h): the chosen replica's leading blocks of the prompt, by its
  // events, and the prompt's full blocks (both 0 otherwise).
  int matched_blocks = 0;
  int prompt_blocks = 0;
};

// SGLang's cache-aware router defaults (its --cache-threshold, --balance-abs-threshold, --balance-rel-threshold,
// --max-tree-size), here in characters of prompt text per replica.
struct CacheAwareOptions {
  double cache_threshold = 0.5;
  int64_t balance_abs_threshold = 32;
  double balance_rel_threshold = 1.0001;
  size_t max_tree_chars = 1 << 24;
  // kv_events: how long a block routed to a replica counts as held before its events confirm it.
  double predict_ttl_s = 5.0;
};

class RoutingPolicy {
 public:
  virtual ~RoutingPolicy() = default;
  virtual const char* name() const = 0;
  // Picks among replicas[i].available; `text` is the request's prompt text (may be empty).
  virtual Decision Pick(std::string_view text, const std::vector<ReplicaView>& replicas) = 0;
  // The same when the router computed the prompt's token ids (route --model): a policy fed by KV events scores
  // replicas by the blocks they hold; the others ignore the ids.
  virtual Decision PickTokens(std::string_view text, const std::vector<int32_t>& ids,
                              const std::vector<ReplicaView>& replicas) {
    return Pick(text, replicas);
  }
  // The replica's KV event index, for its subscriber to fill (nullptr: the policy takes no events).
  virtual KvBlockIndex* kv_index(int replica) { return nullptr; }
  // The replica went down or was excluded: whatever the policy knows of its cache is stale (a restarted
  // replica starts cold).
  virtual void OnReplicaDown(int replica) {}
  // Characters the policy's estimate holds for `replica` (0 without one), for /metrics.
  virtual size_t EstimateSize(int replica) const { return 0; }
};

// "cache_aware", "least_load" or "round_robin"; an error names the valid ones. cache_aware with `kv_events`
// (route --model: the router has token ids) scores replicas by their KV events (kv_events_policy.h), with the
// text tree for requests it cannot tokenize.
StatusOr<std::unique_ptr<RoutingPolicy>> MakePolicy(const std::string& name, int num_replicas,
                                                    const CacheAwareOptions& cache_opt = {}, bool kv_events = false);

}  // namespace deepinfer::router
