#include "routing/cache_aware_policy.h"

#include <algorithm>

namespace deepinfer::router {

CacheAwarePolicy::CacheAwarePolicy(int num_replicas, CacheAwareOptions opt) : opt_(opt) {
  trees_.reserve(num_replicas);
  for (int i = 0; i < num_replicas; ++i) trees_.emplace_back(opt_.max_tree_chars);
}

Decision CacheAwarePolicy::Pick(std::string_view text, const std::vector<ReplicaView>& replicas) {
  Decision d;
  d.text_chars = text.size();
  int64_t min_load = -1, max_load = -1;
  for (const ReplicaView& r : replicas) {
    if (!r.available) continue;
    min_load = min_load < 0 ? r.in_flight : std::min(min_load, r.in_flight);
    max_load = std::max(max_load, r.in_flight);
  }
  if (min_load < 0) return d;  // none available
  const bool imbalanced = max_load - min_load > opt_.balance_abs_threshold &&
                          static_cast<double>(max_load) > opt_.balance_rel_threshold * static_cast<double>(min_load);
  // The least loaded replica; among equals the smallest tree (most room for a new prefix).
  auto least_loaded = [&] {
    int best = -1;
    for (size_t i = 0; i < replicas.size(); ++i) {
      if (!replicas[i].available) continue;
      if (best < 0 || replicas[i].in_flight < replicas[best].in_flight ||
          (replicas[i].in_flight == replicas[best].in_flight && trees_[i].size() < trees_[best].size()))
        best = static_cast<int>(i);
    }
    return best;
  };
  if (imbalanced) {
    d.replica = least_loaded();
    d.outcome = Outcome::kImbalance;
    d.matched_chars = trees_[d.replica].Match(text);
  } else {
    int best = -1;
    size_t best_match = 0;
    for (size_t i = 0; i < replicas.size(); ++i) {
      if (!replicas[i].available) continue;
      const size_t m = trees_[i].Match(text);
      // Equal matches: the less loaded replica.
      if (best < 0 || m > best_match || (m == best_match && replicas[i].in_flight < replicas[best].in_flight)) {
        best = static_cast<int>(i);
        best_match = m;
      }
    }
    const double rate = text.empty() ? 0.0 : static_cast<double>(best_match) / static_cast<double>(text.size());
    if (rate > opt_.cache_threshold) {
      d.replica = best;
      d.outcome = Outcome::kCacheHit;
      d.matched_chars = best_match;
    } else {
      d.replica = least_loaded();
      d.outcome = Outcome::kCacheMiss;
      d.matched_chars = d.replica == best ? best_match : trees_[d.replica].Match(text);
    }
  }
  trees_[d.replica].Insert(text);
  return d;
}

void CacheAwarePolicy::Learn(int replica, std::string_view text) {
  if (replica >= 0 && replica < static_cast<int>(trees_.size())) trees_[replica].Insert(text);
}

void CacheAwarePolicy::OnReplicaDown(int replica) {
  if (replica >= 0 && replica < static_cast<int>(trees_.size())) trees_[replica].Clear();
}

size_t CacheAwarePolicy::EstimateSize(int replica) const {
  return replica >= 0 && replica < static_cast<int>(trees_.size()) ? trees_[replica].size() : 0;
}

}  // namespace deepinfer::router
