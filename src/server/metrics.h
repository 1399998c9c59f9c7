// Prometheus metrics for the API server: counters, gauges read from the engine, and latency histograms,
// rendered in the text exposition format at GET /metrics. Thread-safe.
#pragma once
#include <vector>

#include "engine/dist_control.h"
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace deepinfer {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void Observe(double v);
  void Render(const std::string& name, const std::string& help, std::string* out) const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct ServerMetrics {
  std::atomic<uint64_t> requests_ok{0}, requests_client_error{0}, requests_server_error{0}, requests_rejected{0};
  std::atomic<uint64_t> requests_aborted_by_client{0};
  std::atomic<uint64_t> prompt_tokens{0}, generation_tokens{0};
  std::atomic<int64_t> in_flight{0};
  std::atomic<uint64_t> finish_stop{0}, finish_length{0}, finish_abort{0};
  Histogram ttft{{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}};
  Histogram inter_token{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
  Histogram e2e{{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}};

  std::string Render(const EngineStats& st, const std::string& model_name) const;
};

// Multi-process: one series per rank (labels dp_rank, tp_rank, ep_rank) from the ranks' latest reports to rank 0.
std::string RenderRankMetrics(const std::vector<RankReport>& reports, const dist::ParallelConfig& pc, const std::string& model_name);

}  // namespace deepinfer
