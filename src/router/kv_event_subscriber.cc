#include "router/kv_event_subscriber.h"

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <vector>

#include "base/logging.h"

namespace deepinfer::router {

namespace {
using json = nlohmann::json;

bool ParseHex(const json& j, uint64_t* out) {
  if (!j.is_string()) return false;
  const std::string& s = j.get_ref<const std::string&>();
  if (s.empty() || s.size() > 16) return false;
  char* end = nullptr;
  *out = std::strtoull(s.c_str(), &end, 16);
  return end == s.c_str() + s.size();
}

void ParseHexes(const json& arr, std::vector<uint64_t>* out) {
  if (!arr.is_array()) return;
  out->reserve(out->size() + arr.size());
  for (const json& h : arr) {
    uint64_t v;
    if (ParseHex(h, &v)) out->push_back(v);
  }
}

// A medium's bit in KvBlockIndex's masks (kv/kv_event_log.h KvMedium); 0 for a name this router does not know.
uint8_t MediumBitOf(const std::string& name) {
  if (name == "pool") return 1;
  if (name == "ram") return 2;
  if (name == "disk") return 4;
  return 0;
}
}  // namespace

KvEventSubscriber::KvEventSubscriber(Url url, KvBlockIndex* index, KvEventSubscriberOptions opt)
    : url_(std::move(url)), index_(index), opt_(std::move(opt)) {}

KvEventSubscriber::~KvEventSubscriber() { Stop(); }

void KvEventSubscriber::Start() { thread_ = std::thread([this] { Loop(); }); }

void KvEventSubscriber::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    if (client_) client_->Abort();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool KvEventSubscriber::OnEvent(std::string_view data) {
  const json j = json::parse(data, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return false;
  const std::string type = j.value("type", "");
  if (type == "snapshot") {
    uint64_t digest = 0;
    const bool mismatch = opt_.prompt_digest != 0 && (!j.contains("prompt_digest") || !ParseHex(j["prompt_digest"], &digest) ||
                                                      digest != opt_.prompt_digest);
    if (mismatch != logged_mismatch_) {
      if (mismatch)
        DI_LOG_ERROR("route: replica %s tokenizes differently from --model (prompt digest %s, the router's %016llx): "
                     "its KV events are ignored and it is routed by load only", url_.text.c_str(),
                     j.value("prompt_digest", std::string("none")).c_str(), static_cast<unsigned long long>(opt_.prompt_digest));
      else
        DI_LOG_INFO("route: replica %s tokenizes as --model again: its KV events are used", url_.text.c_str());
      logged_mismatch_ = mismatch;
    }
    const int bs = j.value("block_size", 0);
    if (bs <= 0 || j.value("hash_scheme", "") != "fnv1a64-chain-v1") return false;
    snap_mismatch_ = mismatch;  // applied with the set it comes with
    snap_block_size_ = bs;
    snap_hashes_.clear();
    snap_media_.clear();
    snap_pending_ = true;
  }
  if (type == "snapshot" || type == "snapshot_part") {
    if (!snap_pending_) return false;  // a part with no snapshot begun
    // "hashes": the pool's blocks; "tiers": {"ram": [...], "disk": [...]}, blocks the KV tiers hold.
    if (auto it = j.find("hashes"); it != j.end()) ParseHexes(*it, &snap_hashes_);
    snap_media_.resize(snap_hashes_.size(), MediumBitOf("pool"));
    if (auto t = j.find("tiers"); t != j.end() && t->is_object())
      for (const auto& [name, arr] : t->items()) {
        const uint8_t bit = MediumBitOf(name);
        if (bit == 0) continue;
        ParseHexes(arr, &snap_hashes_);
        snap_media_.resize(snap_hashes_.size(), bit);
      }
    if (j.value("more", false)) return true;  // the rest comes in snapshot_part events
    index_->SetMismatch(snap_mismatch_);
    index_->Reset(snap_block_size_, snap_hashes_, snap_media_);
    snap_pending_ = false;
    std::vector<uint64_t>().swap(snap_hashes_);
    std::vector<uint8_t>().swap(snap_media_);
    return true;
  }
  if (snap_pending_ && type != "load") return false;  // a delta inside a snapshot's parts: start over
  if (type == "delta") {
    const uint8_t medium = MediumBitOf(j.value("medium", "pool"));
    if (medium == 0) return true;  // a medium this router does not know: not a hit it can count
    std::vector<uint64_t> stored, removed;
    if (auto it = j.find("stored"); it != j.end() && it->is_array())
      for (const json& e : *it) {
        uint64_t v;
        if (e.is_object() && e.contains("hash") && ParseHex(e["hash"], &v)) stored.push_back(v);
      }
    if (auto it = j.find("removed"); it != j.end() && it->is_array())
      for (const json& e : *it) {
        uint64_t v;
        if (ParseHex(e, &v)) removed.push_back(v);
      }
    return index_->Apply(stored, removed, medium);  // false: cleared meanwhile (taken out), start over from a snapshot
  }
  if (type == "load") {
    ReplicaLoad l;
    l.waiting = j.value("waiting", int64_t{0});
    l.running = j.value("running", int64_t{0});
    l.kv_used_blocks = j.value("kv_used_blocks", int64_t{0});
    l.kv_total_blocks = j.value("kv_total_blocks", int64_t{0});
    index_->SetLoad(l);
    return true;
  }
  return true;  // an event type of a later version: ignored
}

namespace {
constexpr size_t kMaxEventBytes = size_t{256} << 20;  // a snapshot of ~13M blocks
}  // namespace

bool KvEventSubscriber::OnBytes(std::string_view bytes) {
  // A snapshot of a large cache arrives in many reads: the search for the event's end resumes where the last one
  // stopped (one scan in all, not one per read), and a peer that never ends an event is cut off past the bound.
  const size_t resume = buf_.size() > 0 ? buf_.size() - 1 : 0;
  buf_.append(bytes.data(), bytes.size());
  if (buf_.size() > kMaxEventBytes) return false;
  size_t end = buf_.find("\n\n", resume);
  for (; end != std::string::npos; end = buf_.find("\n\n")) {
    const std::string ev = buf_.substr(0, end);
    buf_.erase(0, end + 2);
    // The data lines of the event, joined (the publisher writes one).
    std::string data;
    size_t pos = 0;
    while (pos < ev.size()) {
      size_t nl = ev.find('\n', pos);
      if (nl == std::string::npos) nl = ev.size();
      const std::string_view line(ev.data() + pos, nl - pos);
      if (line.rfind("data:", 0) == 0) data.append(line.substr(line.size() > 5 && line[5] == ' ' ? 6 : 5));
      pos = nl + 1;
    }
    if (!data.empty() && !OnEvent(data)) return false;
  }
  return true;
}

void KvEventSubscriber::Loop() {
  double backoff = opt_.backoff_min_s;
  HeaderList headers = {{"Accept", "text/event-stream"}};
  if (!opt_.api_key.empty()) headers.emplace_back("Authorization", "Bearer " + opt_.api_key);
  bool was_connected = false;
  int warned_status = 0;  // the refusal last logged: a replica that keeps refusing is named once, not every retry
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    HttpClient client(url_, opt_.connect_timeout_s, opt_.idle_timeout_s);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      client_ = &client;
    }
    buf_.clear();
    snap_pending_ = false;
    int status = 0;
    bool synced_once = false;
    const Status st = client.Run(
        "GET", "/v1/kv_events", headers, "",
        [&](int s, const HeaderList&) {
          status = s;
          return s == 200;
        },
        [&](std::string_view data) {
          if (!OnBytes(data)) return false;
          if (!synced_once && index_->synced()) {
            synced_once = true;
            if (!was_connected) DI_LOG_INFO("route: KV events of %s: subscribed (%zu blocks cached)", url_.text.c_str(), index_->size());
            was_connected = true;
          }
          return true;
        });
    {
      std::lock_guard<std::mutex> lock(mu_);
      client_ = nullptr;
      if (stop_) return;
    }
    // Whatever the replica held is unknown from now until its next snapshot.
    index_->Clear();
    if (synced_once) {
      backoff = opt_.backoff_min_s;
      warned_status = 0;
    }
    if (was_connected && synced_once)
      DI_LOG_WARN("route: KV events of %s: stream ended (%s); reconnecting", url_.text.c_str(),
                  st.ok() ? (status == 200 ? "closed by the replica" : ("HTTP " + std::to_string(status)).c_str()) : st.message().c_str());
    else if (status != 0 && status != 200 && status != warned_status) {
      DI_LOG_WARN("route: KV events of %s: HTTP %d (a replica without /v1/kv_events, or another --api-key); retrying "
                  "quietly every %g s at most", url_.text.c_str(), status, opt_.backoff_max_s);
      warned_status = status;
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::duration<double>(backoff), [&] { return stop_; });
    if (stop_) return;
    backoff = std::min(opt_.backoff_max_s, backoff * 2);
  }
}

}  // namespace deepinfer::router
