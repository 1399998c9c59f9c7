// GET /v1/kv_events: the prefix cache's changes as a Server-Sent Events stream, for a KV-aware router
// (`deepinfer route --model`, or anything that consumes vLLM-style KV events as Dynamo and llm-d do).
//
// Each subscriber first gets a `snapshot` event (block size, hash scheme, model digest, every block hash of the
// full-attention group the pool caches now in "hashes", and those the KV tiers hold in "tiers": {"ram", "disk"};
// a large one continues in `snapshot_part` events, "more": true until the last), then `delta` events ({"seq", "medium": "pool"|"ram"|"disk", "stored":[{"hash","parent"}], "removed"}) as blocks
// enter and leave each medium, and every `load_interval_s` a `load` event (waiting, running, KV blocks used and
// total). Hashes are 16-digit hex strings (JSON numbers lose 64-bit integers in JavaScript).
//
// The engine thread only appends to the KvEventLog; this publisher's own thread reads it every poll interval
// and queues the bytes on the HTTP loop, so no subscriber ever slows the step loop. A subscriber that falls
// behind the bounded log gets a fresh snapshot (and one whose socket stops taking bytes is dropped by the HTTP
// server's output limit), never an unbounded backlog.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "engine/engine.h"
#include "server/http_server.h"

namespace deepinfer {

struct KvEventPublisherOptions {
  double poll_interval_s = 0.05;  // how often the log is read (the events' latency to a router)
  double load_interval_s = 0.5;   // how often load events go out
  size_t max_events_per_delta = 4096;
  // A snapshot goes out in events of at most this many blocks (`snapshot`, then `snapshot_part`s, one per poll),
  // so a large cache (a disk store of millions of blocks) never makes one event past the HTTP output bound.
  size_t max_hashes_per_snapshot_event = 65536;
  std::string model_name;
  uint64_t prompt_digest = 0;  // protocol/prompt_digest.h: a router checks its token ids would be ours
};

class KvEventPublisher {
 public:
  KvEventPublisher(Engine& engine, HttpServer& http, KvEventPublisherOptions opt);
  ~KvEventPublisher();  // stops the thread
  // On the HTTP loop: starts the SSE answer on `c` and adds it (its first event is the snapshot).
  void Subscribe(HttpServer::ConnId c);
  // The connection closed (client gone, or dropped for not reading).
  void Unsubscribe(HttpServer::ConnId c);

  static const char* HashScheme() { return "fnv1a64-chain-v1"; }  // kv/prefix_hash.h PrefixChainHashes
  static std::string Hex(uint64_t v);

 private:
  struct Sub {
    uint64_t seq = 0;
    bool need_snapshot = true;
    // A snapshot being sent in slices: the rest from snap_off on (deltas wait in the log until it is whole).
    bool snapping = false;
    KvEventLog::Snapshot snap;
    size_t snap_off = 0;
  };
  void Loop();
  // The next slice of sub->snap: the `snapshot` event first, then `snapshot_part`s; the last sets sub->seq.
  std::string SnapshotEvent(Sub* sub) const;
  std::string LoadEvent() const;
  // The delta events after `sub.seq` (several when the same hash comes twice, so that a reader applying
  // "stored" then "removed" of one event keeps the order); false if the reader fell behind the log.
  bool DeltaEvents(Sub* sub, std::string* out) const;

  Engine& engine_;
  HttpServer& http_;
  KvEventPublisherOptions opt_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::unordered_map<HttpServer::ConnId, Sub> subs_;
  std::thread thread_;
};

}  // namespace deepinfer
