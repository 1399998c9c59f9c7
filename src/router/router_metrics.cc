#include "router/router_metrics.h"

#include <cstdio>

namespace deepinfer::router {

namespace {

std::string Label(const std::string& v) {
  std::string o;
  for (char ch : v) {
    if (ch == '\\' || ch == '"') o += '\\';
    if (ch == '\n') {
      o += "\\n";
      continue;
    }
    o += ch;
  }
  return o;
}

void Head(std::string* out, const char* name, const char* type, const char* help) {
  *out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void Line(std::string* out, const std::string& name, const std::string& labels, double v) {
  char num[64];
  std::snprintf(num, sizeof num, "%.17g", v);
  *out += name + (labels.empty() ? "" : "{" + labels + "}") + " " + num + "\n";
}

}  // namespace

std::string RouterMetrics::Render(const std::string& policy, const std::vector<ReplicaSnapshot>& replicas) const {
  std::string out;
  auto per_replica = [&](const char* name, const char* type, const char* help, auto value) {
    Head(&out, name, type, help);
    for (const ReplicaSnapshot& r : replicas) Line(&out, name, "replica=\"" + Label(r.url) + "\"", value(r));
  };
  per_replica("deepinfer_router_replica_up", "gauge", "1 while the replica is in the rotation (answers /health, same model).",
              [](const ReplicaSnapshot& r) { return r.state == ReplicaState::kUp ? 1.0 : 0.0; });
  per_replica("deepinfer_router_replica_wrong_model", "gauge", "1 while the replica is excluded for serving another model.",
              [](const ReplicaSnapshot& r) { return r.state == ReplicaState::kWrongModel ? 1.0 : 0.0; });
  per_replica("deepinfer_router_replica_in_flight", "gauge", "Requests the router has in flight on the replica.",
              [](const ReplicaSnapshot& r) { return static_cast<double>(r.in_flight); });
  per_replica("deepinfer_router_replica_requests_total", "counter", "Requests sent to the replica (retries included).",
              [](const ReplicaSnapshot& r) { return static_cast<double>(r.requests); });
  per_replica("deepinfer_router_replica_failures_total", "counter", "Requests to the replica that failed (connect error, reset, timeout).",
              [](const ReplicaSnapshot& r) { return static_cast<double>(r.failures); });
  per_replica("deepinfer_router_replica_down_total", "counter", "Times the replica was taken out.",
              [](const ReplicaSnapshot& r) { return static_cast<double>(r.down_events); });
  per_replica("deepinfer_router_replica_prefix_hit_rate_estimate", "gauge",
              "The policy's estimate of the replica's prefix-cache hit rate: matched prompt characters / prompt characters sent.",
              [](const ReplicaSnapshot& r) { return r.text_chars ? static_cast<double>(r.matched_chars) / static_cast<double>(r.text_chars) : 0.0; });
  per_replica("deepinfer_router_replica_tree_chars", "gauge", "Characters in the policy's approximate prefix tree for the replica.",
              [](const ReplicaSnapshot& r) { return static_cast<double>(r.estimate_chars); });
  bool kv = false;
  for (const ReplicaSnapshot& r : replicas) kv |= r.kv_events;
  if (kv) {  // route --model: the policy is fed by the replicas' KV events
    per_replica("deepinfer_router_replica_kv_hit_rate_estimate", "gauge",
                "From the replica's KV events: leading prompt blocks it held when a request was sent there / prompt blocks sent.",
                [](const ReplicaSnapshot& r) { return r.prompt_blocks ? static_cast<double>(r.matched_blocks) / static_cast<double>(r.prompt_blocks) : 0.0; });
    per_replica("deepinfer_router_replica_kv_matched_blocks_total", "counter", "Prompt blocks the replica held (by its events) when requests were sent there.",
                [](const ReplicaSnapshot& r) { return static_cast<double>(r.matched_blocks); });
    per_replica("deepinfer_router_replica_kv_prompt_blocks_total", "counter", "Full prompt blocks of the requests sent to the replica.",
                [](const ReplicaSnapshot& r) { return static_cast<double>(r.prompt_blocks); });
    per_replica("deepinfer_router_replica_kv_blocks", "gauge", "Blocks the replica's prefix cache holds by its events.",
                [](const ReplicaSnapshot& r) { return static_cast<double>(r.kv_blocks); });
    per_replica("deepinfer_router_replica_kv_tier_blocks", "gauge",
                "Blocks only the replica's KV tiers (--kv-offload-ram, --kv-store) hold by its events: hits loaded, not computed.",
                [](const ReplicaSnapshot& r) { return static_cast<double>(r.kv_tier_blocks); });
    per_replica("deepinfer_router_replica_kv_events_total", "counter", "KV events (blocks stored or removed) received from the replica.",
                [](const ReplicaSnapshot& r) { return static_cast<double>(r.kv_events_received); });
    per_replica("deepinfer_router_replica_kv_resyncs_total", "counter",
                "Snapshots received after the first (reconnects, or the replica's log outran the stream).",
                [](const ReplicaSnapshot& r) { return static_cast<double>(r.kv_resyncs); });
    per_replica("deepinfer_router_replica_kv_synced", "gauge", "1 while the replica's event stream is connected and past its snapshot.",
                [](const ReplicaSnapshot& r) { return r.kv_synced ? 1.0 : 0.0; });
    per_replica("deepinfer_router_replica_kv_mismatch", "gauge",
                "1 when the replica's tokenizer or chat template differs from the router's --model (its blocks are not scored).",
                [](const ReplicaSnapshot& r) { return r.kv_mismatch ? 1.0 : 0.0; });
    per_replica("deepinfer_router_replica_reported_waiting", "gauge", "Requests waiting, as the replica last reported.",
                [](const ReplicaSnapshot& r) { return static_cast<double>(r.reported_waiting); });
    per_replica("deepinfer_router_replica_reported_running", "gauge", "Requests running, as the replica last reported.",
                [](const ReplicaSnapshot& r) { return static_cast<double>(r.reported_running); });
    per_replica("deepinfer_router_replica_reported_kv_used_blocks", "gauge", "KV blocks in use, as the replica last reported.",
                [](const ReplicaSnapshot& r) { return static_cast<double>(r.reported_kv_used); });
  }

  Head(&out, "deepinfer_router_decisions_total", "counter",
       "Routing decisions by outcome: cache_hit (longest prefix match over the threshold), cache_miss (least loaded), "
       "imbalance (least loaded, load over the balance thresholds), least_load, round_robin.");
  for (int o = 0; o < kOutcomes; ++o)
    Line(&out, "deepinfer_router_decisions_total",
         "policy=\"" + Label(policy) + "\",outcome=\"" + OutcomeName(static_cast<Outcome>(o)) + "\"", static_cast<double>(decisions_[o].load()));
  Head(&out, "deepinfer_router_retries_total", "counter", "Requests sent again to another replica after one failed.");
  Line(&out, "deepinfer_router_retries_total", "", static_cast<double>(retries_.load()));
  Head(&out, "deepinfer_router_stream_errors_total", "counter", "Streams cut by a replica failure after bytes were sent (ended with an error event).");
  Line(&out, "deepinfer_router_stream_errors_total", "", static_cast<double>(stream_errors_.load()));
  Head(&out, "deepinfer_router_no_replica_total", "counter", "Requests answered 503 because no replica was available.");
  Line(&out, "deepinfer_router_no_replica_total", "", static_cast<double>(no_replica_.load()));
  Head(&out, "deepinfer_router_responses_total", "counter", "Answers to clients by class (replica answers passed through included).");
  Line(&out, "deepinfer_router_responses_total", "class=\"ok\"", static_cast<double>(ok_.load()));
  Line(&out, "deepinfer_router_responses_total", "class=\"client_error\"", static_cast<double>(client_errors_.load()));
  Line(&out, "deepinfer_router_responses_total", "class=\"server_error\"", static_cast<double>(server_errors_.load()));
  return out;
}

}  // namespace deepinfer::router
