// cache_aware: SGLang's cache-aware routing. Each replica has an approximate prefix tree of the prompt text sent
// to it. When the load is balanced, the replica whose tree matches the longest prefix of the prompt is picked if
// the match covers more than cache_threshold of the prompt (a likely prefix-cache hit); otherwise the least
// loaded replica (ties: the smallest tree, the one with the most room), which spreads new prefixes. When the load
// is imbalanced (max - min in-flight > balance_abs_threshold and max > balance_rel_threshold * min), the least
// loaded replica, whatever the match. Either way the prompt goes into the chosen replica's tree.
#pragma once
#include <vector>

#include "routing/approx_prefix_tree.h"
#include "routing/routing_policy.h"

namespace deepinfer::router {

class CacheAwarePolicy : public RoutingPolicy {
 public:
  CacheAwarePolicy(int num_replicas, CacheAwareOptions opt);
  const char* name() const override { return "cache_aware"; }
  Decision Pick(std::string_view text, const std::vector<ReplicaView>& replicas) override;
  void OnReplicaDown(int replica) override;
  // `text` was sent to `replica` by another policy's choice (kv_events_policy.h keeps this tree warm).
  void Learn(int replica, std::string_view text);
  size_t EstimateSize(int replica) const override;

 private:
  CacheAwareOptions opt_;
  std::vector<ApproxPrefixTree> trees_;
};

}  // namespace deepinfer::router
