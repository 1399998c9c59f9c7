// One replica's KV event stream (GET /v1/kv_events, server/kv_event_publisher.h), kept open on a thread of its
// own and applied to the replica's KvBlockIndex: a snapshot (in parts, for a large cache) replaces the index, deltas update it, load events
// set its load. When the stream breaks (replica down, restarted) the index is cleared, since the router must
// not route by a cache it can no longer see, and the subscriber reconnects with exponential backoff; the
// replica's next snapshot then replaces whatever it held. A snapshot whose prompt digest differs from the
// router's (another tokenizer or chat template: the router's hashes would name other prefixes) marks the index
// mismatched and is logged, once per change.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "router/http_client.h"
#include "routing/kv_block_index.h"

namespace deepinfer::router {

struct KvEventSubscriberOptions {
  std::string api_key;         // sent as Authorization: Bearer to the replica ("" none)
  uint64_t prompt_digest = 0;  // the router's (protocol/prompt_digest.h); 0: not checked
  double connect_timeout_s = 2;
  double idle_timeout_s = 5;   // the replica sends load events twice a second: silence this long is a dead stream
  double backoff_min_s = 0.1, backoff_max_s = 2;
};

class KvEventSubscriber {
 public:
  KvEventSubscriber(Url url, KvBlockIndex* index, KvEventSubscriberOptions opt);
  ~KvEventSubscriber();  // Stop()
  void Start();
  void Stop();
  // Feeds one SSE event's data (a JSON object) to the index; false when the stream must start over (a delta
  // before any snapshot, or the index was cleared meanwhile because the replica was taken out). Public for tests.
  bool OnEvent(std::string_view data);

 private:
  void Loop();
  // Splits the bytes into SSE events; false to drop the connection.
  bool OnBytes(std::string_view bytes);

  Url url_;
  KvBlockIndex* index_;
  KvEventSubscriberOptions opt_;
  std::string buf_;
  bool logged_mismatch_ = false;
  // A snapshot arriving in parts (`snapshot` with "more", then `snapshot_part`s): applied once whole.
  bool snap_pending_ = false, snap_mismatch_ = false;
  int snap_block_size_ = 0;
  std::vector<uint64_t> snap_hashes_;
  std::vector<uint8_t> snap_media_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  HttpClient* client_ = nullptr;  // the connection in progress (guarded by mu_), for Stop to abort
  std::thread thread_;
};

}  // namespace deepinfer::router
