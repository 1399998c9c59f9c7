// round_robin: the next available replica in turn, whatever the prompt or the load (the baseline the
// cache-aware policy is measured against).
#pragma once
#include "routing/routing_policy.h"

namespace deepinfer::router {

class RoundRobinPolicy : public RoutingPolicy {
 public:
  const char* name() const override { return "round_robin"; }
  Decision Pick(std::string_view text, const std::vector<ReplicaView>& replicas) override;

 private:
  size_t next_ = 0;
};

}  // namespace deepinfer::router
