#include "server/kv_event_publisher.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <unordered_set>
#include <vector>

#include "server/answer_json.h"

namespace deepinfer {

using nlohmann::json;

namespace {
std::string Sse(const char* type, const json& data) { return std::string("event: ") + type + "\ndata: " + DumpJson(data) + "\n\n"; }
}  // namespace

std::string KvEventPublisher::Hex(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

KvEventPublisher::KvEventPublisher(Engine& engine, HttpServer& http, KvEventPublisherOptions opt)
    : engine_(engine), http_(http), opt_(std::move(opt)) {
  thread_ = std::thread([this] { Loop(); });
}

KvEventPublisher::~KvEventPublisher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void KvEventPublisher::Subscribe(HttpServer::ConnId c) {
  http_.StartStream(c, 200, "text/event-stream", {{"Cache-Control", "no-cache"}});
  {
    std::lock_guard<std::mutex> lock(mu_);
    subs_[c] = Sub{};
  }
  cv_.notify_all();  // the snapshot goes out now, not at the next poll
}

void KvEventPublisher::Unsubscribe(HttpServer::ConnId c) {
  std::lock_guard<std::mutex> lock(mu_);
  subs_.erase(c);
}

std::string KvEventPublisher::SnapshotEvent(Sub* sub) const {
  const KvEventLog::Snapshot& s = sub->snap;
  const size_t first = sub->snap_off;
  const size_t end = std::min(s.hashes.size(), first + std::max<size_t>(opt_.max_hashes_per_snapshot_event, 1));
  json by_medium[kNumKvMedia];
  for (json& j : by_medium) j = json::array();
  for (size_t i = first; i < end; ++i)
    for (int m = 0; m < kNumKvMedia; ++m)
      if (s.media[i] & MediumBit(static_cast<KvMedium>(m))) by_medium[m].push_back(Hex(s.hashes[i]));
  json tiers = json::object();
  for (int m = 0; m < kNumKvMedia; ++m)
    if (static_cast<KvMedium>(m) != KvMedium::kPool) tiers[KvMediumName(static_cast<KvMedium>(m))] = std::move(by_medium[m]);
  const bool more = end < s.hashes.size();
  json body;
  if (first == 0)
    body = {{"type", "snapshot"}, {"seq", s.seq}, {"block_size", engine_.options().block_size}, {"hash_scheme", HashScheme()},
            {"group", 0}, {"model", opt_.model_name}, {"kv_digest", Hex(engine_.model_digest())},
            {"prompt_digest", Hex(opt_.prompt_digest)}};
  else
    body = {{"type", "snapshot_part"}, {"seq", s.seq}};
  body["hashes"] = std::move(by_medium[static_cast<int>(KvMedium::kPool)]);
  body["tiers"] = std::move(tiers);
  body["more"] = more;
  sub->snap_off = end;
  if (!more) {
    sub->seq = s.seq;
    sub->snapping = false;
    sub->snap = KvEventLog::Snapshot{};  // its memory back
  }
  return Sse(first == 0 ? "snapshot" : "snapshot_part", body);
}

std::string KvEventPublisher::LoadEvent() const {
  const EngineStats st = engine_.Stats();
  return Sse("load", {{"type", "load"}, {"waiting", st.waiting}, {"running", st.running},
                      {"kv_used_blocks", st.kv_blocks_total - st.kv_blocks_free}, {"kv_total_blocks", st.kv_blocks_total}});
}

bool KvEventPublisher::DeltaEvents(Sub* sub, std::string* out) const {
  std::vector<KvEventLog::Event> evs;
  if (!engine_.kv_events().Since(sub->seq, opt_.max_events_per_delta, &evs)) return false;
  json stored = json::array(), removed = json::array();
  std::unordered_set<uint64_t> seen;
  KvMedium medium = KvMedium::kPool;
  auto flush = [&](uint64_t seq) {
    if (stored.empty() && removed.empty()) return;
    *out += Sse("delta", {{"type", "delta"}, {"seq", seq}, {"medium", KvMediumName(medium)}, {"stored", std::move(stored)},
                          {"removed", std::move(removed)}});
    stored = json::array();
    removed = json::array();
    seen.clear();
  };
  for (const KvEventLog::Event& e : evs) {
    // One delta is one medium's, and names a hash once (so "stored then removed" keeps the log's order).
    if (e.medium != medium || seen.count(e.hash)) flush(sub->seq);
    medium = e.medium;
    seen.insert(e.hash);
    if (e.stored) stored.push_back({{"hash", Hex(e.hash)}, {"parent", Hex(e.parent)}});
    else removed.push_back(Hex(e.hash));
    sub->seq = e.seq;
  }
  flush(sub->seq);
  return true;
}

void KvEventPublisher::Loop() {
  using Clock = std::chrono::steady_clock;
  auto next_load = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::duration<double>(opt_.poll_interval_s));
    if (stop_) break;
    const bool load_due = Clock::now() >= next_load;
    if (load_due) next_load = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(opt_.load_interval_s));
    const std::string load = load_due && !subs_.empty() ? LoadEvent() : "";
    for (auto& [conn, sub] : subs_) {
      std::string out;
      if (!sub.need_snapshot && !sub.snapping && !DeltaEvents(&sub, &out)) {
        out.clear();
        sub.need_snapshot = true;  // fell behind the bounded log: start over
      }
      if (sub.need_snapshot) {
        sub.snap = engine_.kv_events().TakeSnapshot();
        sub.snap_off = 0;
        sub.snapping = true;
        sub.need_snapshot = false;
      }
      if (sub.snapping) out += SnapshotEvent(&sub);  // one slice per poll
      out += load;
      if (!out.empty()) http_.SendChunk(conn, std::move(out));
    }
  }
}

}  // namespace deepinfer
