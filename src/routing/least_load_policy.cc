#include "routing/least_load_policy.h"

namespace deepinfer::router {

Decision LeastLoadPolicy::Pick(std::string_view text, const std::vector<ReplicaView>& replicas) {
  Decision d;
  d.outcome = Outcome::kLeastLoad;
  d.text_chars = text.size();
  const size_t n = replicas.size(), start = n ? rotate_++ % n : 0;
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (start + k) % n;
    if (!replicas[i].available) continue;
    if (d.replica < 0 || replicas[i].in_flight < replicas[d.replica].in_flight) d.replica = static_cast<int>(i);
  }
  return d;
}

}  // namespace deepinfer::router
