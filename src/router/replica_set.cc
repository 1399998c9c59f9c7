#include "router/replica_set.h"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "base/logging.h"
#include "routing/kv_block_index.h"

namespace deepinfer::router {

const char* ReplicaStateName(ReplicaState s) {
  switch (s) {
    case ReplicaState::kDown: return "down";
    case ReplicaState::kUp: return "up";
    case ReplicaState::kWrongModel: return "wrong_model";
  }
  return "unknown";
}

ReplicaSet::ReplicaSet(std::vector<Url> urls, std::unique_ptr<RoutingPolicy> policy, ReplicaSetOptions opt)
    : opt_(opt), policy_(std::move(policy)) {
  replicas_.resize(urls.size());
  for (size_t i = 0; i < urls.size(); ++i) replicas_[i].url = std::move(urls[i]);
}

ReplicaSet::~ReplicaSet() { Stop(); }

ReplicaSet::Probe ReplicaSet::ProbeOne(const Url& url) const {
  Probe p;
  ClientResponse r;
  Status s = HttpClient::Fetch(url, "GET", "/health", {}, "", opt_.health_timeout_s, &r);
  if (!s.ok()) {
    p.error = s.message();
    return p;
  }
  if (r.status != 200) {
    p.error = "GET /health answered " + std::to_string(r.status);
    return p;
  }
  p.reachable = true;
  // The model it serves; a replica that wants a key (401) cannot be checked and is taken as it is.
  s = HttpClient::Fetch(url, "GET", "/v1/models", {}, "", opt_.health_timeout_s, &r);
  if (s.ok() && r.status == 200) {
    auto j = nlohmann::json::parse(r.body, nullptr, false);
    if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() && j["data"][0].is_object() &&
        j["data"][0].contains("id") && j["data"][0]["id"].is_string())
      p.model = j["data"][0]["id"].get<std::string>();
  }
  return p;
}

std::vector<ReplicaSet::Probe> ReplicaSet::ProbeAll() const {
  // In parallel: one hung replica must not hold up the checks of the others for its whole timeout.
  std::vector<Probe> out(replicas_.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < replicas_.size(); ++i) threads.emplace_back([&, i] { out[i] = ProbeOne(replicas_[i].url); });
  for (auto& t : threads) t.join();
  return out;
}

void ReplicaSet::Start() {
  const std::vector<Probe> probes = ProbeAll();
  std::lock_guard<std::mutex> lock(mu_);
  // The model most replicas serve (ties: the one listed first) is the router's; the others are excluded.
  std::map<std::string, int> votes;
  for (const Probe& p : probes)
    if (!p.model.empty()) ++votes[p.model];
  int best = 0;
  for (const Probe& p : probes)
    if (!p.model.empty() && votes[p.model] > best) {
      best = votes[p.model];
      model_ = p.model;
    }
  for (size_t i = 0; i < probes.size(); ++i) Apply(static_cast<int>(i), probes[i], true);
  int up = 0;
  for (const Replica& r : replicas_) up += r.state == ReplicaState::kUp;
  if (up == 0)
    DI_LOG_ERROR("route: no replica reachable (%s): requests get 503 until one answers GET /health", SummaryLocked().c_str());
  else
    DI_LOG_INFO("route: %d of %d replicas serving model '%s' (policy %s)", up, size(), model_.c_str(), policy_->name());
  health_ = std::thread([this] { HealthLoop(); });
}

void ReplicaSet::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (health_.joinable()) health_.join();
}

void ReplicaSet::Apply(int i, const Probe& p, bool at_start) {
  Replica& r = replicas_[i];
  const char* url = r.url.text.c_str();
  if (!p.reachable) {
    if (at_start)
      DI_LOG_WARN("route: replica %s unreachable at start (%s): serving without it; it is taken in once it answers /health",
                  url, p.error.c_str());
    else if (r.state == ReplicaState::kUp)
      MarkDownLocked(i, "stopped answering GET /health: " + p.error);
    return;
  }
  if (!p.model.empty()) r.model = p.model;
  // Nothing was reachable at start: the first replica that answers decides the model.
  if (model_.empty() && !p.model.empty()) model_ = p.model;
  if (!p.model.empty() && p.model != model_) {
    if (r.state != ReplicaState::kWrongModel) {
      if (r.state == ReplicaState::kUp) MarkDownLocked(i, "now serves another model");
      DI_LOG_ERROR("route: replica %s serves model '%s', not '%s' like the others: excluded", url, p.model.c_str(), model_.c_str());
      r.state = ReplicaState::kWrongModel;
    }
    return;
  }
  if (r.state != ReplicaState::kUp) {
    if (!at_start) DI_LOG_INFO("route: replica %s answers again: taken back in", url);
    r.state = ReplicaState::kUp;
  }
}

void ReplicaSet::HealthLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, std::chrono::duration<double>(opt_.health_interval_s), [&] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    const std::vector<Probe> probes = ProbeAll();
    lock.lock();
    if (stopping_) break;
    for (size_t i = 0; i < probes.size(); ++i) Apply(static_cast<int>(i), probes[i], false);
  }
}

ReplicaSet::Lease ReplicaSet::Acquire(std::string_view text, const std::vector<int>& exclude) {
  return Acquire(text, nullptr, exclude);
}

ReplicaSet::Lease ReplicaSet::Acquire(std::string_view text, const std::vector<int32_t>* ids, const std::vector<int>& exclude) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ReplicaView> views(replicas_.size());
  for (size_t i = 0; i < replicas_.size(); ++i) {
    views[i].available = replicas_[i].state == ReplicaState::kUp &&
                         std::find(exclude.begin(), exclude.end(), static_cast<int>(i)) == exclude.end();
    views[i].in_flight = replicas_[i].in_flight;
  }
  Lease l;
  l.decision = ids ? policy_->PickTokens(text, *ids, views) : policy_->Pick(text, views);
  l.replica = l.decision.replica;
  if (l.replica >= 0) {
    Replica& r = replicas_[l.replica];
    ++r.in_flight;
    ++r.requests;
    r.matched_chars += l.decision.matched_chars;
    r.text_chars += l.decision.text_chars;
    r.matched_blocks += l.decision.matched_blocks;
    r.prompt_blocks += l.decision.prompt_blocks;
  }
  return l;
}

ReplicaSet::Lease ReplicaSet::AcquireAny(const std::vector<int>& exclude) {
  std::lock_guard<std::mutex> lock(mu_);
  Lease l;
  for (size_t i = 0; i < replicas_.size(); ++i) {
    if (replicas_[i].state != ReplicaState::kUp || std::find(exclude.begin(), exclude.end(), static_cast<int>(i)) != exclude.end())
      continue;
    if (l.replica < 0 || replicas_[i].in_flight < replicas_[l.replica].in_flight) l.replica = static_cast<int>(i);
  }
  if (l.replica >= 0) ++replicas_[l.replica].in_flight;
  return l;
}

void ReplicaSet::Release(int replica, bool failed) {
  std::lock_guard<std::mutex> lock(mu_);
  --replicas_[replica].in_flight;
  if (failed) ++replicas_[replica].failures;
}

void ReplicaSet::MarkDown(int replica, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  MarkDownLocked(replica, reason);
}

void ReplicaSet::MarkDownLocked(int i, const std::string& reason) {
  Replica& r = replicas_[i];
  if (r.state != ReplicaState::kUp) return;
  r.state = ReplicaState::kDown;
  ++r.down_events;
  DI_LOG_WARN("route: replica %s down (%s): taken out; %lld request(s) in flight there end or are retried elsewhere",
              r.url.text.c_str(), reason.c_str(), static_cast<long long>(r.in_flight));
  policy_->OnReplicaDown(i);  // a replica that comes back has lost its cache (a restart) or may have
  for (HttpClient* c : r.calls) c->Abort();
}

void ReplicaSet::Track(int replica, HttpClient* c) {
  std::lock_guard<std::mutex> lock(mu_);
  replicas_[replica].calls.insert(c);
  // Taken out between the pick and now: the call fails at once and is retried.
  if (replicas_[replica].state != ReplicaState::kUp || stopping_) c->Abort();
}

void ReplicaSet::Untrack(int replica, HttpClient* c) {
  std::lock_guard<std::mutex> lock(mu_);
  replicas_[replica].calls.erase(c);
}

void ReplicaSet::AbortAll() {
  std::lock_guard<std::mutex> lock(mu_);
  stopping_ = true;
  for (Replica& r : replicas_)
    for (HttpClient* c : r.calls) c->Abort();
  cv_.notify_all();
}

bool ReplicaSet::stopping() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stopping_;
}

int ReplicaSet::NumUp() const {
  std::lock_guard<std::mutex> lock(mu_);
  int up = 0;
  for (const Replica& r : replicas_) up += r.state == ReplicaState::kUp;
  return up;
}

std::string ReplicaSet::model() const {
  std::lock_guard<std::mutex> lock(mu_);
  return model_;
}

std::string ReplicaSet::Summary() const {
  std::lock_guard<std::mutex> lock(mu_);
  return SummaryLocked();
}

std::string ReplicaSet::SummaryLocked() const {
  int up = 0, down = 0, wrong = 0;
  for (const Replica& r : replicas_) {
    up += r.state == ReplicaState::kUp;
    down += r.state == ReplicaState::kDown;
    wrong += r.state == ReplicaState::kWrongModel;
  }
  std::string s = std::to_string(up) + " of " + std::to_string(replicas_.size()) + " replicas up (" + std::to_string(down) + " down";
  if (wrong) s += ", " + std::to_string(wrong) + " serving another model";
  return s + ")";
}

std::vector<ReplicaSnapshot> ReplicaSet::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ReplicaSnapshot> out;
  for (size_t i = 0; i < replicas_.size(); ++i) {
    const Replica& r = replicas_[i];
    ReplicaSnapshot s;
    s.url = r.url.text;
    s.state = r.state;
    s.model = r.model;
    s.in_flight = r.in_flight;
    s.requests = r.requests;
    s.failures = r.failures;
    s.down_events = r.down_events;
    s.matched_chars = r.matched_chars;
    s.text_chars = r.text_chars;
    s.estimate_chars = policy_->EstimateSize(static_cast<int>(i));
    s.matched_blocks = r.matched_blocks;
    s.prompt_blocks = r.prompt_blocks;
    if (const KvBlockIndex* idx = policy_->kv_index(static_cast<int>(i))) {
      s.kv_events = true;
      s.kv_synced = idx->synced();
      s.kv_mismatch = idx->mismatch();
      s.kv_blocks = idx->size();
      s.kv_tier_blocks = idx->tier_size();
      s.kv_events_received = idx->events();
      s.kv_resyncs = idx->resyncs();
      const ReplicaLoad load = idx->load();
      s.reported_waiting = load.waiting;
      s.reported_running = load.running;
      s.reported_kv_used = load.kv_used_blocks;
      s.reported_kv_total = load.kv_total_blocks;
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace deepinfer::router
