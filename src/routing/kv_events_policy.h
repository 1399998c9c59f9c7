// cache_aware fed by KV events (route --model): SGLang's thresholds, but the match is what each replica's prefix
// cache holds by its own events (KvBlockIndex), in blocks of the prompt's token ids, instead of a tree of the
// text the router once sent it. Per request: the prompt's chain hashes (kv/prefix_hash.h, with the block size
// each replica reported), and per replica the number of leading blocks it holds and its load, the larger of
// the router's requests in flight there and the replica's reported waiting + running (the report covers other
// clients, the in-flight count covers the report's lag; their sum would count the router's requests twice).
// Imbalanced load (max - min > balance_abs_threshold and max > balance_rel_threshold * min): the least loaded.
// Otherwise the replica with the most leading blocks if they cover over cache_threshold of the prompt's blocks,
// else (a miss) SGLang's smallest cache: the fewest blocks held or predicted, the most room for a new prefix
// (ties: the least loaded, then the lowest reported KV use); under imbalance the least loaded (ties: KV use,
// then the smallest cache). The chosen
// replica's index then predicts the prompt's blocks until its events confirm them.
// Requests the router has no token ids for (/v1/responses, or before any replica's first snapshot) go through
// the text-tree policy (cache_aware_policy.h), which sees every request so that it stays warm.
#pragma once
#include <memory>
#include <vector>

#include "routing/cache_aware_policy.h"
#include "routing/kv_block_index.h"
#include "routing/routing_policy.h"

namespace deepinfer::router {

class KvEventsPolicy : public RoutingPolicy {
 public:
  KvEventsPolicy(int num_replicas, CacheAwareOptions opt);
  const char* name() const override { return "cache_aware_kv_events"; }
  Decision Pick(std::string_view text, const std::vector<ReplicaView>& replicas) override;
  Decision PickTokens(std::string_view text, const std::vector<int32_t>& ids, const std::vector<ReplicaView>& replicas) override;
  void OnReplicaDown(int replica) override;
  size_t EstimateSize(int replica) const override;
  KvBlockIndex* kv_index(int replica) override;

 private:
  CacheAwareOptions opt_;
  std::vector<std::unique_ptr<KvBlockIndex>> indexes_;
  CacheAwarePolicy text_;
};

}  // namespace deepinfer::router
