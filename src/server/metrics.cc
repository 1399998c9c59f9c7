#include "server/metrics.h"

#include <algorithm>

#include <cstdio>

namespace deepinfer {
namespace {

std::string Num(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

void Metric(std::string* out, const char* name, const char* type, const char* help, const std::string& labels, double v) {
  *out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  *out += std::string(name) + labels + " " + Num(v) + "\n";
}

// The KV tiers (--kv-offload-ram, --kv-store): one series per tier under a `tier` label.
void RenderKvTiers(const KvTierStats& t, const std::string& model, std::string* out) {
  auto two = [&](const char* name, const char* type, const char* help, double ram, double disk) {
    *out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    *out += std::string(name) + "{model_name=\"" + model + "\",tier=\"ram\"} " + Num(ram) + "\n";
    *out += std::string(name) + "{model_name=\"" + model + "\",tier=\"disk\"} " + Num(disk) + "\n";
  };
  const std::string m = "{model_name=\"" + model + "\"}";
  two("deepinfer_kv_tier_hits_total", "counter", "KV blocks a prefix hit loaded from the tier (the pool had evicted them).",
      static_cast<double>(t.ram_hits), static_cast<double>(t.disk_hits));
  two("deepinfer_kv_tier_read_bytes_total", "counter", "Bytes loaded from the tier.", static_cast<double>(t.ram_bytes_read),
      static_cast<double>(t.disk_bytes_read));
  two("deepinfer_kv_tier_written_bytes_total", "counter", "Bytes written through to the tier.",
      static_cast<double>(t.ram_bytes_written), static_cast<double>(t.disk_bytes_written));
  two("deepinfer_kv_tier_entries", "gauge", "KV blocks the tier holds.", static_cast<double>(t.ram_entries),
      static_cast<double>(t.disk_entries));
  two("deepinfer_kv_tier_bytes", "gauge", "Bytes the tier holds.", static_cast<double>(t.ram_bytes),
      static_cast<double>(t.disk_bytes));
  two("deepinfer_kv_tier_capacity_bytes", "gauge", "The tier's capacity.", static_cast<double>(t.ram_capacity),
      static_cast<double>(t.disk_capacity));
  Metric(out, "deepinfer_kv_tier_load_seconds_sum", "counter", "Seconds from a prefix load's start to its last block written (queueing included).", m,
         t.load_seconds);
  Metric(out, "deepinfer_kv_tier_load_seconds_count", "counter", "Loads that brought prefix blocks from the tiers.", m,
         static_cast<double>(t.loads));
  Metric(out, "deepinfer_kv_tier_loads_in_flight", "gauge", "Prefix loads from the tiers queued or running (off the engine thread).",
         m, static_cast<double>(t.loads_in_flight));
  Metric(out, "deepinfer_kv_tier_loading_requests", "gauge",
         "Waiting sequences in the loading state: not admitted until their prefix load is done; the batch goes on.", m,
         static_cast<double>(t.loading_requests));
  Metric(out, "deepinfer_kv_tier_dropped_writes_total", "counter",
         "Blocks not written through because the writer was behind (the engine never waits for it).", m,
         static_cast<double>(t.dropped_offers));
  Metric(out, "deepinfer_kv_store_rejected_reads_total", "counter",
         "Stored blocks that failed validation on read (truncated, corrupt): served as misses and removed.", m,
         static_cast<double>(t.disk_rejected_reads));
  Metric(out, "deepinfer_kv_store_write_errors_total", "counter",
         "Stored blocks that could not be written (an I/O error, or a full disk with nothing left to evict).", m,
         static_cast<double>(t.disk_write_errors));
  Metric(out, "deepinfer_kv_store_disk_full_total", "counter",
         "Writes that found the disk full below --kv-store-size: least recent entries evicted, the store kept smaller.", m,
         static_cast<double>(t.disk_full_events));
  Metric(out, "deepinfer_kv_store_evictions_total", "counter", "Stored blocks removed to stay within --kv-store-size.", m,
         static_cast<double>(t.disk_evictions));
}

}  // namespace

void Histogram::Observe(double v) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::Render(const std::string& name, const std::string& help, std::string* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    *out += name + "_bucket{le=\"" + Num(bounds_[i]) + "\"} " + std::to_string(cum) + "\n";
  }
  cum += counts_.back();
  *out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cum) + "\n";
  *out += name + "_sum " + Num(sum_) + "\n" + name + "_count " + std::to_string(count_) + "\n";
}

std::string ServerMetrics::Render(const EngineStats& st, const std::string& model) const {
  std::string out;
  const std::string m = "{model_name=\"" + model + "\"}";
  out += "# HELP deepinfer_requests_total HTTP API requests by outcome.\n# TYPE deepinfer_requests_total counter\n";
  out += "deepinfer_requests_total{outcome=\"ok\"} " + std::to_string(requests_ok.load()) + "\n";
  out += "deepinfer_requests_total{outcome=\"client_error\"} " + std::to_string(requests_client_error.load()) + "\n";
  out += "deepinfer_requests_total{outcome=\"server_error\"} " + std::to_string(requests_server_error.load()) + "\n";
  out += "deepinfer_requests_total{outcome=\"rejected_queue_full\"} " + std::to_string(requests_rejected.load()) + "\n";
  out += "deepinfer_requests_total{outcome=\"client_disconnected\"} " + std::to_string(requests_aborted_by_client.load()) + "\n";
  out += "# HELP deepinfer_request_finish_total Finished completions (per sample) by finish_reason.\n"
         "# TYPE deepinfer_request_finish_total counter\n";
  out += "deepinfer_request_finish_total{finish_reason=\"stop\"} " + std::to_string(finish_stop.load()) + "\n";
  out += "deepinfer_request_finish_total{finish_reason=\"length\"} " + std::to_string(finish_length.load()) + "\n";
  out += "deepinfer_request_finish_total{finish_reason=\"abort\"} " + std::to_string(finish_abort.load()) + "\n";
  Metric(&out, "deepinfer_prompt_tokens_total", "counter", "Prompt tokens of accepted requests.", m, static_cast<double>(prompt_tokens.load()));
  Metric(&out, "deepinfer_generation_tokens_total", "counter", "Generated tokens streamed or returned.", m, static_cast<double>(generation_tokens.load()));
  Metric(&out, "deepinfer_num_requests_in_flight", "gauge", "API requests accepted and not yet answered.", m, static_cast<double>(in_flight.load()));
  Metric(&out, "deepinfer_num_requests_running", "gauge", "Sequences holding KV cache (engine).", m, st.running);
  Metric(&out, "deepinfer_num_requests_waiting", "gauge", "Sequences queued for admission (engine).", m, st.waiting);
  const double usage = st.kv_blocks_total > 0 ? 1.0 - static_cast<double>(st.kv_blocks_free) / st.kv_blocks_total : 0;
  Metric(&out, "deepinfer_kv_cache_usage_perc", "gauge", "Fraction of KV cache blocks in use (cached-but-free blocks count as free).", m, usage);
  Metric(&out, "deepinfer_kv_cache_blocks_total", "gauge", "KV cache blocks in the pool.", m, st.kv_blocks_total);
  Metric(&out, "deepinfer_kv_cache_blocks_free", "gauge", "KV cache blocks free or evictable.", m, st.kv_blocks_free);
  Metric(&out, "deepinfer_kv_cache_blocks_cached", "gauge",
         "KV cache blocks the prefix cache can match, in use or not (every KV group: full-attention and window blocks).", m,
         st.kv_blocks_cached);
  const double computed = static_cast<double>(st.prompt_tokens_computed), cached = static_cast<double>(st.cached_prompt_tokens);
  Metric(&out, "deepinfer_prefix_cache_hit_rate", "gauge", "Prompt tokens served from the prefix cache / all prompt tokens.", m,
         computed + cached > 0 ? cached / (computed + cached) : 0);
  Metric(&out, "deepinfer_prefix_cache_hit_tokens_total", "counter", "Prompt tokens served from the prefix cache.", m, cached);
  Metric(&out, "deepinfer_swa_replayed_tokens_total", "counter",
         "Prompt tokens recomputed to rebuild sliding windows for prefix-cache hits (bounded replay).", m,
         static_cast<double>(st.replayed_prompt_tokens));
  if (st.kv_tiers.enabled) RenderKvTiers(st.kv_tiers, model, &out);
  Metric(&out, "deepinfer_preemptions_total", "counter", "Sequences preempted (recomputed later) for lack of KV blocks.", m,
         static_cast<double>(st.preemptions));
  Metric(&out, "deepinfer_engine_steps_total", "counter", "Engine steps launched.", m, static_cast<double>(st.steps));
  // The latency target (--target-itl-ms): what it let the last step prefill, and how often it cut the budget.
  Metric(&out, "deepinfer_prefill_token_budget", "gauge",
         "Prefill tokens the latency target allowed the last step (-1: no target limit, only --max-batched-tokens).", m,
         st.prefill_budget);
  Metric(&out, "deepinfer_target_itl_limited_steps_total", "counter",
         "Steps whose prefill the latency target held below what --max-batched-tokens left.", m,
         static_cast<double>(st.target_limited_steps));
  // Speculative decoding, after vLLM's spec_decode metrics: acceptance rate = accepted / draft tokens, mean
  // accepted length = accepted / drafts (+ 1 for the target's own token of every verify row).
  Metric(&out, "deepinfer_spec_decode_num_drafts_total", "counter", "Verify rows that carried at least one draft.", m,
         static_cast<double>(st.spec_drafts));
  Metric(&out, "deepinfer_spec_decode_num_draft_tokens_total", "counter", "Draft tokens proposed.", m,
         static_cast<double>(st.spec_draft_tokens));
  Metric(&out, "deepinfer_spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted by verification.", m,
         static_cast<double>(st.spec_accepted_tokens));
  out += "# HELP deepinfer_spec_decode_num_accepted_tokens_per_pos_total Drafts accepted at each position of a verify "
         "row (0: the first draft).\n# TYPE deepinfer_spec_decode_num_accepted_tokens_per_pos_total counter\n";
  int positions = 1;
  for (int i = 0; i < kMaxSpecTokens; ++i)
    if (st.spec_accepted_per_pos[i] > 0) positions = i + 1;
  for (int i = 0; i < positions; ++i)
    out += "deepinfer_spec_decode_num_accepted_tokens_per_pos_total{model_name=\"" + model + "\",position=\"" +
           std::to_string(i) + "\"} " + std::to_string(st.spec_accepted_per_pos[i]) + "\n";
  out += "# HELP deepinfer_spec_decode_accepted_length Drafts accepted per verify row.\n"
         "# TYPE deepinfer_spec_decode_accepted_length histogram\n";
  int64_t cum = 0, sum = 0;
  for (int len = 0; len <= kMaxSpecTokens; ++len) {
    cum += st.spec_accepted_len[len];
    sum += st.spec_accepted_len[len] * len;
    if (len <= positions)
      out += "deepinfer_spec_decode_accepted_length_bucket{model_name=\"" + model + "\",le=\"" + std::to_string(len) +
             "\"} " + std::to_string(cum) + "\n";
  }
  out += "deepinfer_spec_decode_accepted_length_bucket{model_name=\"" + model + "\",le=\"+Inf\"} " + std::to_string(cum) + "\n";
  out += "deepinfer_spec_decode_accepted_length_sum" + m + " " + std::to_string(sum) + "\n";
  out += "deepinfer_spec_decode_accepted_length_count" + m + " " + std::to_string(cum) + "\n";
  ttft.Render("deepinfer_time_to_first_token_seconds", "Time from request arrival to its first token.", &out);
  inter_token.Render("deepinfer_inter_token_latency_seconds", "Time between consecutive tokens of a sample.", &out);
  e2e.Render("deepinfer_e2e_request_latency_seconds", "Time from request arrival to its last token.", &out);
  return out;
}

std::string RenderRankMetrics(const std::vector<RankReport>& reports, const dist::ParallelConfig& pc0, const std::string& model) {
  struct Series {
    const char* name;
    const char* type;
    const char* help;
    int64_t RankReport::*field;
  };
  static const Series kSeries[] = {
      {"deepinfer_rank_steps_total", "counter", "Engine steps this rank ran (empty steps included).", &RankReport::steps},
      {"deepinfer_rank_generation_tokens_total", "counter", "Tokens this rank's attention group generated.", &RankReport::generated_tokens},
      {"deepinfer_rank_prompt_tokens_computed_total", "counter", "Prompt tokens this rank computed.", &RankReport::prompt_tokens_computed},
      {"deepinfer_rank_requests_finished_total", "counter", "Requests this rank's group finished.", &RankReport::requests_finished},
      {"deepinfer_rank_requests", "gauge", "Requests assigned to this rank's group now.", &RankReport::assigned_requests},
      {"deepinfer_rank_num_requests_running", "gauge", "Sequences running on this rank.", &RankReport::running},
      {"deepinfer_rank_kv_blocks_free", "gauge", "Free KV cache blocks on this rank.", &RankReport::kv_blocks_free},
      {"deepinfer_rank_moe_dispatch_bytes_total", "counter", "Bytes this rank sent in MoE dispatch/combine.", &RankReport::moe_bytes_sent},
      {"deepinfer_rank_expert_rows_total", "counter", "Expert rows (token x routed expert) this rank computed for any rank.", &RankReport::expert_rows},
      {"deepinfer_rank_attention_work_total", "counter", "Query x key pairs this rank's attention computed (context parallelism: its share).", &RankReport::attention_work},
      {"deepinfer_rank_cp_exchange_bytes_total", "counter", "Bytes this rank sent in context-parallel K/V exchanges.", &RankReport::cp_bytes_sent},
      {"deepinfer_rank_kv_tier_ram_hits_total", "counter", "KV blocks this rank loaded from its RAM tier.", &RankReport::kv_tier_ram_hits},
      {"deepinfer_rank_kv_tier_disk_hits_total", "counter", "KV blocks this rank loaded from its disk tier.", &RankReport::kv_tier_disk_hits},
      {"deepinfer_rank_kv_tier_ram_blocks_written_total", "counter", "KV blocks this rank wrote to its RAM tier.", &RankReport::kv_tier_ram_blocks_written},
      {"deepinfer_rank_kv_tier_disk_blocks_written_total", "counter", "KV blocks this rank wrote to its disk tier.", &RankReport::kv_tier_disk_blocks_written},
  };
  std::string out;
  for (const Series& s : kSeries) {
    out += std::string("# HELP ") + s.name + " " + s.help + "\n# TYPE " + s.name + " " + s.type + "\n";
    for (size_t r = 0; r < reports.size(); ++r) {
      dist::ParallelConfig pc = pc0;
      pc.rank = static_cast<int>(r);
      out += std::string(s.name) + "{model_name=\"" + model + "\",rank=\"" + std::to_string(r) + "\",dp_rank=\"" +
             std::to_string(pc.dp_rank()) + "\",cp_rank=\"" + std::to_string(pc.cp_rank()) + "\",tp_rank=\"" + std::to_string(pc.tp_rank()) + "\",ep_rank=\"" +
             std::to_string(pc.ep_rank()) + "\"} " + Num(static_cast<double>(reports[r].*s.field)) + "\n";
    }
  }
  // Rank 0's routing over the data-parallel groups (--dp-policy), on each group leader's entry, named as
  // `deepinfer route`'s decisions are.
  const std::pair<const char*, int64_t RoutingCounts::*> kOutcomes[] = {
      {"cache_hit", &RoutingCounts::cache_hit}, {"cache_miss", &RoutingCounts::cache_miss},
      {"imbalance", &RoutingCounts::imbalance}, {"least_load", &RoutingCounts::least_load},
      {"round_robin", &RoutingCounts::round_robin}};
  struct BlockSeries {
    const char* name;
    const char* help;
    int64_t RoutingCounts::*field;
  };
  static const BlockSeries kBlocks[] = {
      {"deepinfer_dp_routing_matched_blocks_total", "Leading prompt blocks the chosen group held by its KV events, at routing.", &RoutingCounts::matched_blocks},
      {"deepinfer_dp_routing_prompt_blocks_total", "Full blocks of the prompts routed to the group by KV events.", &RoutingCounts::prompt_blocks}};
  out += "# HELP deepinfer_dp_routing_decisions_total Requests rank 0 routed to each data-parallel group, by why.\n"
         "# TYPE deepinfer_dp_routing_decisions_total counter\n";
  for (int g = 0; g < pc0.dp; ++g)
    for (const auto& [outcome, field] : kOutcomes)
      out += "deepinfer_dp_routing_decisions_total{model_name=\"" + model + "\",dp_rank=\"" + std::to_string(g) +
             "\",outcome=\"" + outcome + "\"} " + std::to_string(reports[pc0.group_leader(g)].routed.*field) + "\n";
  for (const BlockSeries& b : kBlocks) {
    out += std::string("# HELP ") + b.name + " " + b.help + "\n# TYPE " + b.name + " counter\n";
    for (int g = 0; g < pc0.dp; ++g)
      out += std::string(b.name) + "{model_name=\"" + model + "\",dp_rank=\"" + std::to_string(g) + "\"} " +
             std::to_string(reports[pc0.group_leader(g)].routed.*b.field) + "\n";
  }
  // Expert load imbalance over the expert-parallel ranks since start: max / mean of the rows each computed (1.0 is
  // perfect; EPLB's target).
  int64_t total = 0, most = 0;
  for (const RankReport& r : reports) total += r.expert_rows, most = std::max(most, r.expert_rows);
  const double imbalance = total > 0 ? static_cast<double>(most) * static_cast<double>(reports.size()) / static_cast<double>(total) : 1.0;
  out += "# HELP deepinfer_expert_load_imbalance Max over mean of the expert rows the ranks computed (1 = balanced).\n"
         "# TYPE deepinfer_expert_load_imbalance gauge\ndeepinfer_expert_load_imbalance{model_name=\"" + model + "\"} " +
         Num(imbalance) + "\n";
  return out;
}

}  // namespace deepinfer
