#include "engine/dist_control.h"

#include <algorithm>
#include <string>

#include "base/logging.h"
#include "engine/kv_event_feed.h"
#include "engine/kv_event_union.h"
#include "engine/wire.h"
#include "routing/kv_block_index.h"
#include "routing/routing_policy.h"

namespace deepinfer {
namespace {

// The counters a rank reports, from its engine's stats.
void FillFromStats(const EngineStats& st, RankReport& r) {
  r.steps = st.steps, r.rows = st.rows, r.prompt_tokens_computed = st.prompt_tokens_computed;
  r.generated_tokens = st.generated_tokens, r.requests_finished = st.requests_finished;
  r.running = st.running, r.waiting = st.waiting;
  r.kv_blocks_free = st.kv_blocks_free, r.kv_blocks_total = st.kv_blocks_total;
  r.kv_tier_ram_hits = st.kv_tiers.ram_hits, r.kv_tier_disk_hits = st.kv_tiers.disk_hits;
  r.kv_tier_ram_blocks_written = st.kv_tiers.ram_blocks_written;
  r.kv_tier_disk_blocks_written = st.kv_tiers.disk_blocks_written;
}

// A step timing on the wire, field by field (no padding bytes on the wire).
void PutTiming(wire::Writer& w, const StepObservation& o) {
  w.Put(o.step), w.Put<uint8_t>(o.ok), w.Put(o.seconds);
  w.Put(o.shape.tokens), w.Put(o.shape.prefill_tokens), w.Put(o.shape.decode_rows), w.Put(o.shape.attention);
  w.Put(o.shape.prefill_limit);
}
StepObservation GetTiming(wire::Reader& r) {
  StepObservation o;
  o.step = r.Get<uint64_t>(), o.ok = r.Get<uint8_t>() != 0, o.seconds = r.Get<double>();
  o.shape.tokens = r.Get<int>(), o.shape.prefill_tokens = r.Get<int>(), o.shape.decode_rows = r.Get<int>();
  o.shape.attention = r.Get<double>(), o.shape.prefill_limit = r.Get<int>();
  return o;
}

std::string StepList(const std::vector<StepObservation>& v) {
  std::string s;
  for (const StepObservation& o : v) s += (s.empty() ? "" : ", ") + std::to_string(o.step);
  return "[" + s + "]";
}

}  // namespace

DistControl::DistControl(dist::DistContext& ctx, Host& engine, RequestInbox& inbox, int block_size)
    : ctx_(ctx), e_(engine), inbox_(inbox), block_size_(block_size) {
  group_load_.assign(ctx_.pc.dp, 0);
  group_routed_.assign(ctx_.pc.dp, 0);
  reports_.assign(ctx_.pc.world, RankReport{});
  group_decisions_.assign(ctx_.pc.dp, RoutingCounts{});
  if (ctx_.pc.dp > 1) {
    // Start-up checked the name (startup.cc SetupParallel); the policy only decides on rank 0.
    auto policy = router::MakePolicy(ctx_.pc.dp_policy, ctx_.pc.dp, router::CacheAwareOptions{}, /*kv_events=*/true);
    if (!policy.ok()) ctx_.FailJob(policy.status().ToString());
    // Group leaders ship their KV events whatever the policy: rank 0's GET /v1/kv_events reports the union of
    // every group's blocks (engine/kv_event_union.h), and cache_aware routes by them.
    ship_events_ = true;
    if (is_root()) policy_ = std::move(*policy);
  }
  if (ship_events_ && ctx_.pc.is_group_leader()) feed_out_ = std::make_unique<KvEventFeed>(e_.KvEvents());
  if (ship_events_ && is_root()) {
    all_events_ = std::make_unique<KvEventUnion>(ctx_.pc.dp);
    for (int g = 0; g < ctx_.pc.dp; ++g) {
      feeds_in_.push_back(std::make_unique<KvEventFeed>(nullptr));
      // Every group starts with an empty cache; its first Sync's snapshot confirms it.
      if (router::KvBlockIndex* index = policy_->kv_index(g)) index->Reset(block_size_, {});
    }
  }
}

DistControl::~DistControl() = default;

int DistControl::LeastLoaded() const {
  // Ties go round-robin from the group after the last choice (sequential clients, each done before the next
  // arrives, still spread over every group).
  const int D = ctx_.pc.dp;
  int best = (last_routed_ + 1) % D;
  for (int i = 1; i < D; ++i) {
    const int g = (last_routed_ + 1 + i) % D;
    if (group_load_[g] < group_load_[best]) best = g;
  }
  return best;
}

int DistControl::Route(const std::vector<int32_t>& prompt, int n) {
  int best = LeastLoaded();
  router::Outcome outcome = router::Outcome::kLeastLoad;
  router::Decision d;
  // A prompt shorter than a block matches no cached block anywhere: the least loaded group takes it.
  if (policy_ && static_cast<int>(prompt.size()) >= block_size_) {
    std::vector<router::ReplicaView> views(ctx_.pc.dp);
    for (int g = 0; g < ctx_.pc.dp; ++g) views[g] = {true, group_load_[g]};
    d = policy_->PickTokens({}, prompt, views);
    if (d.replica >= 0) best = d.replica, outcome = d.outcome;
  }
  {
    std::lock_guard<std::mutex> lock(reports_mu_);
    RoutingCounts& c = group_decisions_[best];
    switch (outcome) {
      case router::Outcome::kCacheHit: ++c.cache_hit; break;
      case router::Outcome::kCacheMiss: ++c.cache_miss; break;
      case router::Outcome::kImbalance: ++c.imbalance; break;
      case router::Outcome::kLeastLoad: ++c.least_load; break;
      case router::Outcome::kRoundRobin: ++c.round_robin; break;
    }
    c.matched_blocks += d.matched_blocks;
    c.prompt_blocks += d.prompt_blocks;
  }
  group_load_[best] += n;
  ++group_routed_[best];
  last_routed_ = best;
  return best;
}

OutputCallback DistControl::LocalCallback() {
  if (!ctx_.pc.is_group_leader()) return nullptr;
  return [this](const RequestOutput& ev) { outbox_.push_back(ev); };
}

void DistControl::Exchange() {
  wire::Writer w;
  std::vector<std::unique_ptr<Request>> local;
  std::vector<uint64_t> aborts;
  if (is_root()) {
    std::vector<std::unique_ptr<Request>> inbox;
    const bool stop = inbox_.Take(&inbox, &aborts);
    w.Put<uint8_t>(stop && !stopping_);
    w.Put<uint64_t>(inbox.size());
    for (auto& r : inbox) {
      const int g = Route(r->prompt, r->params.n);
      w.Put(r->id), w.Put(g);
      wire::PutParams(w, r->params);
      w.PutVector(r->prompt);
      if (g == 0) {
        // Group 0 lives on rank 0 itself: the original callback, plus the routing load's bookkeeping.
        r->callback = [this, cb = std::move(r->callback)](const RequestOutput& ev) {
          if (ev.finished) --group_load_[0];
          if (cb) cb(ev);
        };
        local.push_back(std::move(r));
      } else {
        remote_[r->id] = Remote{std::move(r->callback), r->params.n, g};
      }
    }
    w.PutVector(aborts);
    if (stop) stopping_ = true;
  }
  // The size, then the message: idle ranks wait here (no timeout on the followers' side: rank 0 may be idle
  // for hours; a rank 0 that dies ends the job through mpirun).
  uint64_t size = w.bytes().size();
  const double wait = is_root() ? -1 : 0;
  Status s = ctx_.control->Broadcast(&size, sizeof(size), 0, wait);
  std::vector<uint8_t> msg = std::move(w.bytes());
  msg.resize(size);
  if (s.ok() && size) s = ctx_.control->Broadcast(msg.data(), size, 0);
  if (!s.ok()) ctx_.FailJob("control broadcast: " + s.ToString());
  if (!is_root()) {
    wire::Reader r(msg.data(), msg.size());
    if (r.Get<uint8_t>()) stopping_ = true;
    const uint64_t n = r.Get<uint64_t>();
    for (uint64_t i = 0; i < n && r.ok(); ++i) {
      auto req = std::make_unique<Request>();
      req->id = r.Get<uint64_t>();
      const int g = r.Get<int>();
      req->params = wire::GetParams(r);
      req->prompt = r.GetVector<int32_t>();
      if (g != ctx_.pc.dp_rank()) continue;
      req->callback = LocalCallback();
      local.push_back(std::move(req));
    }
    aborts = r.GetVector<uint64_t>();
    if (!r.ok() || !r.done()) ctx_.FailJob("control message from rank 0 is malformed (ranks run different builds?)");
  }
  e_.IngestRequests(std::move(local), aborts);
  if (stopping_) e_.AbortAll();
}

bool DistControl::Sync(bool has_rows) {
  RankReport mine;
  mine.has_rows = has_rows;
  mine.busy = has_rows || e_.HasSequences();
  FillFromStats(e_.LocalStats(), mine);
  mine.assigned_requests = e_.AssignedRequests();
  mine.moe_bytes_sent = ctx_.moe->bytes_sent();
  mine.expert_rows = ctx_.expert_rows.load(std::memory_order_relaxed);
  mine.attention_work = ctx_.attention_work.load(std::memory_order_relaxed);
  mine.cp_bytes_sent = ctx_.cp->bytes_sent();
  wire::Writer w;
  w.Put(mine);
  // Right after the report, so every rank can read every rank's (the feed and the outbox are rank 0's to read).
  const std::vector<StepObservation> timed = shares_step_times() ? e_.TakeStepTimings() : std::vector<StepObservation>{};
  w.Put<uint64_t>(timed.size());
  for (const StepObservation& o : timed) PutTiming(w, o);
  if (feed_out_) feed_out_->Write(w);
  w.Put<uint64_t>(outbox_.size());
  for (const RequestOutput& ev : outbox_) wire::PutOutput(w, ev);
  outbox_.clear();
  std::vector<uint8_t> all;
  std::vector<size_t> sizes;
  if (Status s = ctx_.control->AllGatherV(w.bytes().data(), w.bytes().size(), &all, &sizes); !s.ok())
    ctx_.FailJob("control sync: " + s.ToString());
  bool launch = false, busy = false;
  // Every rank's report first (stored before any event is delivered: a client that got its answer and then asks
  // /metrics sees counters that include it), then the events.
  std::vector<wire::Reader> readers;
  std::vector<RankReport> reports(ctx_.pc.world);
  const int leader = ctx_.pc.group_leader(ctx_.pc.dp_rank());
  std::vector<StepObservation> leader_timed;
  size_t off = 0;
  for (int rank = 0; rank < ctx_.pc.world; ++rank) {
    readers.emplace_back(all.data() + off, sizes[rank]);
    off += sizes[rank];
    reports[rank] = readers.back().Get<RankReport>();
    const uint64_t n = readers.back().Get<uint64_t>();
    for (uint64_t i = 0; i < n && readers.back().ok(); ++i) {
      StepObservation o = GetTiming(readers.back());
      if (rank == leader) leader_timed.push_back(o);
    }
    if (!readers.back().ok())
      ctx_.FailJob("control report from rank " + std::to_string(rank) + " is malformed (ranks run different builds?)");
    launch = launch || reports[rank].has_rows;
    busy = busy || reports[rank].busy;
    if (!is_root() || !ship_events_) continue;
    dist::ParallelConfig pc = ctx_.pc;
    pc.rank = rank;
    if (!pc.is_group_leader()) continue;
    // The group's cache changes, then its own account of its load (KvEventsPolicy weighs both).
    const int g = pc.dp_rank();
    router::KvBlockIndex* index = policy_->kv_index(g);  // null: a policy not fed by events
    if (!feeds_in_[g]->Read(readers.back(), index, block_size_, all_events_.get(), g))
      ctx_.FailJob("KV events from rank " + std::to_string(rank) + " are malformed (ranks run different builds?)");
    const RankReport& rr = reports[rank];
    if (index) index->SetLoad({true, rr.waiting, rr.running, rr.kv_blocks_total - rr.kv_blocks_free, rr.kv_blocks_total});
  }
  if (shares_step_times()) {
    // The group processes the same steps at the same iterations (launches are decided together, the overlap
    // depth is common): a different list means the schedules already split. Said and ended, not hung on.
    bool same = leader_timed.size() == timed.size();
    for (size_t i = 0; same && i < timed.size(); ++i) same = leader_timed[i].step == timed[i].step;
    if (!same)
      ctx_.FailJob("latency target: rank " + std::to_string(ctx_.pc.rank) + " processed steps " + StepList(timed) +
                     " since the last sync, its group leader (rank " + std::to_string(leader) + ") " +
                     StepList(leader_timed) + ": the group's schedules split (a bug)");
    e_.ObserveStepTimings(leader_timed);
  }
  if (is_root()) {
    std::lock_guard<std::mutex> lock(reports_mu_);
    reports_ = std::move(reports);
  }
  for (int rank = 1; rank < ctx_.pc.world && is_root(); ++rank) {
    wire::Reader& r = readers[rank];
    const uint64_t events = r.Get<uint64_t>();
    for (uint64_t i = 0; i < events && r.ok(); ++i) {
      RequestOutput ev = wire::GetOutput(r);
      auto it = remote_.find(ev.request_id);
      if (it == remote_.end()) continue;
      if (it->second.cb) it->second.cb(ev);
      if (ev.finished) {
        --group_load_[it->second.group];
        if (--it->second.unfinished == 0) remote_.erase(it);
      }
    }
    if (!r.ok()) ctx_.FailJob("control report from rank " + std::to_string(rank) + " is malformed");
  }
  if (stopping_ && !busy && !done_) {
    done_ = true;
    DI_LOG_INFO("parallel: rank %d: MoE dispatch/combine sent %.3f MB, waited %.3f s for peers; tensor-parallel "
                "collectives sent %.3f MB, waited %.3f s; control plane waited %.3f s; %lld expert rows computed",
                ctx_.pc.rank, ctx_.moe->bytes_sent() / 1e6, ctx_.moe->wait_seconds(), ctx_.tp->bytes_sent() / 1e6,
                ctx_.tp->wait_seconds(), ctx_.control->wait_seconds(),
                static_cast<long long>(ctx_.expert_rows.load(std::memory_order_relaxed)));
    if (ctx_.pc.expert_dispatch()) {
      // Step-time split (docs/benchmarks.md): how long the MoE exchanges ran and how much of it the executor
      // waited for (all of it without two-batch overlap; what the other micro-batch's compute did not hide with).
      double exchange = ctx_.moe_exchange_ns.load(std::memory_order_relaxed) / 1e9;
      double exposed = ctx_.moe_exposed_ns.load(std::memory_order_relaxed) / 1e9;
      if (ctx_.moe_stream) exchange += ctx_.moe_stream->busy_seconds(), exposed += ctx_.moe_stream->exposed_seconds();
      DI_LOG_INFO("parallel: rank %d: MoE exchanges ran %.3f s, %.3f s of it exposed (two-batch overlap %s)",
                  ctx_.pc.rank, exchange, exposed, ctx_.moe_stream ? "on" : "off");
    }
    if (ctx_.pc.cp > 1)
      DI_LOG_INFO("parallel: rank %d (cp %d/%d): attention work %lld query-key pairs, context-parallel K/V exchange sent "
                  "%.3f MB, waited %.3f s", ctx_.pc.rank, ctx_.pc.cp_rank(), ctx_.pc.cp,
                  static_cast<long long>(ctx_.attention_work.load(std::memory_order_relaxed)), ctx_.cp->bytes_sent() / 1e6,
                  ctx_.cp->wait_seconds());
    if (is_root()) {
      std::string routed, hits;
      for (int64_t c : group_routed_) routed += (routed.empty() ? "" : ", ") + std::to_string(c);
      int64_t matched = 0, blocks = 0;
      for (const RoutingCounts& c : group_decisions_) {
        hits += (hits.empty() ? "" : ", ") + std::to_string(c.cache_hit);
        matched += c.matched_blocks, blocks += c.prompt_blocks;
      }
      DI_LOG_INFO("parallel: job drained; requests routed per group: [%s] (policy %s: cache hits per group [%s], "
                  "%lld of %lld prompt blocks held by the chosen group)", routed.c_str(),
                  policy_ ? policy_->name() : "none", hits.c_str(), static_cast<long long>(matched),
                  static_cast<long long>(blocks));
    }
    if (feed_out_)
      DI_LOG_INFO("parallel: rank %d: shipped %llu KV event hashes to rank 0 (%llu snapshots)", ctx_.pc.rank,
                  static_cast<unsigned long long>(feed_out_->hashes_sent()),
                  static_cast<unsigned long long>(feed_out_->snapshots()));
  }
  return launch;
}

const KvEventLog* DistControl::JobKvEvents() const { return all_events_ ? &all_events_->log() : nullptr; }

std::vector<RankReport> DistControl::Reports() const {
  std::vector<RankReport> out;
  {
    std::lock_guard<std::mutex> lock(reports_mu_);
    out = reports_;
  }
  // Rank 0's own counters live (its report is from before its last iteration's processing).
  FillFromStats(e_.LocalStats(), out[0]);
  {
    std::lock_guard<std::mutex> lock(reports_mu_);
    for (int g = 0; g < ctx_.pc.dp; ++g) out[ctx_.pc.group_leader(g)].routed = group_decisions_[g];
  }
  return out;
}

}  // namespace deepinfer
