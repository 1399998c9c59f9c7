// The router's Prometheus metrics (GET /metrics): per replica its state, requests, failures, in-flight count and
// the policy's estimated prefix-hit rate; per policy outcome the decisions taken; retries, mid-stream failures
// and requests refused for want of a replica. Counters are atomics; the per-replica part comes from a
// ReplicaSet snapshot at render time.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "router/replica_set.h"
#include "routing/routing_policy.h"

namespace deepinfer::router {

class RouterMetrics {
 public:
  void CountDecision(Outcome o) { decisions_[static_cast<int>(o)]++; }
  void CountRetry() { retries_++; }
  void CountStreamError() { stream_errors_++; }
  void CountNoReplica() { no_replica_++; }
  void CountAnswer(int status) { (status < 400 ? ok_ : status < 500 ? client_errors_ : server_errors_)++; }

  std::string Render(const std::string& policy, const std::vector<ReplicaSnapshot>& replicas) const;

 private:
  static constexpr int kOutcomes = 5;
  std::atomic<uint64_t> decisions_[kOutcomes] = {};
  std::atomic<uint64_t> retries_{0}, stream_errors_{0}, no_replica_{0}, ok_{0}, client_errors_{0}, server_errors_{0};
};

}  // namespace deepinfer::router
