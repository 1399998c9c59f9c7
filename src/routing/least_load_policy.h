// least_load: the available replica with the fewest requests in flight (as the router counts them).
#pragma once
#include "routing/routing_policy.h"

namespace deepinfer::router {

class LeastLoadPolicy : public RoutingPolicy {
 public:
  const char* name() const override { return "least_load"; }
  Decision Pick(std::string_view text, const std::vector<ReplicaView>& replicas) override;

 private:
  size_t rotate_ = 0;  // where ties start, so equal loads (an idle fleet) still spread
};

}  // namespace deepinfer::router
