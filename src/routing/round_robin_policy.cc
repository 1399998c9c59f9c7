#include "routing/round_robin_policy.h"

namespace deepinfer::router {

Decision RoundRobinPolicy::Pick(std::string_view text, const std::vector<ReplicaView>& replicas) {
  Decision d;
  d.outcome = Outcome::kRoundRobin;
  d.text_chars = text.size();
  // Skip unavailable replicas, so a replica that is down does not make its successor take two turns' load.
  for (size_t tried = 0; tried < replicas.size(); ++tried) {
    const size_t i = next_++ % replicas.size();
    if (replicas[i].available) {
      d.replica = static_cast<int>(i);
      break;
    }
  }
  return d;
}

}  // namespace deepinfer::router
