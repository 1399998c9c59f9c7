#include "routing/routing_policy.h"

#include "routing/cache_aware_policy.h"
#include "routing/kv_events_policy.h"
#include "routing/least_load_policy.h"
#include "routing/round_robin_policy.h"

namespace deepinfer::router {

const char* OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kCacheHit: return "cache_hit";
    case Outcome::kCacheMiss: return "cache_miss";
    case Outcome::kImbalance: return "imbalance";
    case Outcome::kLeastLoad: return "least_load";
    case Outcome::kRoundRobin: return "round_robin";
  }
  return "unknown";
}

StatusOr<std::unique_ptr<RoutingPolicy>> MakePolicy(const std::string& name, int num_replicas,
                                                    const CacheAwareOptions& cache_opt, bool kv_events) {
  if (name == "cache_aware" && kv_events) return std::unique_ptr<RoutingPolicy>(new KvEventsPolicy(num_replicas, cache_opt));
  if (name == "cache_aware") return std::unique_ptr<RoutingPolicy>(new CacheAwarePolicy(num_replicas, cache_opt));
  if (name == "least_load") return std::unique_ptr<RoutingPolicy>(new LeastLoadPolicy());
  if (name == "round_robin") return std::unique_ptr<RoutingPolicy>(new RoundRobinPolicy());
  return InvalidArgument("--policy must be cache_aware, least_load or round_robin, not '" + name + "'");
}

}  // namespace deepinfer::router
