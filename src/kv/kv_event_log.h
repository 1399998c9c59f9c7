// The prefix cache's change log for the KV events endpoint (GET /v1/kv_events, docs/architecture.md "KV events"):
// which blocks of the full-attention group (group 0, keyed by the plain chain hash of kv/prefix_hash.h, so a
// router can compute the same keys from token ids) entered and left each medium that can serve a prefix hit, in
// order, numbered: the KV pool, and the KV tiers behind it (host RAM, disk; kv/kv_tiers.h), as vLLM's events carry
// a `medium`. A router counts a block held in any medium as a hit (a tier hit loads in tens of milliseconds where
// recomputing the prefix takes seconds).
//
// Written by the engine thread (BlockPool::Publish / Uncache) and the tiers' threads (stores, evictions, the disk
// store's entries found at start-up), read by the server's event publisher, so it is thread-safe; a writer only
// appends under a short lock and never waits on a reader's I/O. The log is
// bounded: past `capacity` events the oldest are dropped, and a reader whose position was dropped resyncs from
// a snapshot (the live set, kept here for that purpose) instead of the log growing for a slow subscriber.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace deepinfer {

// Where a block is held. The values are the wire's (engine/kv_event_feed.h) and bit positions of a media mask.
enum class KvMedium : uint8_t { kPool = 0, kRam = 1, kDisk = 2 };
constexpr int kNumKvMedia = 3;
constexpr uint8_t MediumBit(KvMedium m) { return static_cast<uint8_t>(1u << static_cast<int>(m)); }
const char* KvMediumName(KvMedium m);  // "pool", "ram", "disk" (the JSON events' `medium`)

class KvEventLog {
 public:
  struct Event {
    uint64_t seq = 0;
    bool stored = false;  // false: removed
    uint64_t hash = 0;
    uint64_t parent = 0;  // stored: the chain hash of the block before it (0 for a prompt's first block)
    KvMedium medium = KvMedium::kPool;
  };
  struct Snapshot {
    uint64_t seq = 0;              // the newest event the set includes; deltas continue after it
    std::vector<uint64_t> hashes;  // every block hash held now, in some medium
    std::vector<uint8_t> media;    // for each of hashes: the media holding it (MediumBit mask, never 0)
  };

  explicit KvEventLog(size_t capacity = 1 << 16) : capacity_(capacity ? capacity : 1) {}

  // A hash stored twice in one medium without a removal between (or removed while absent) is not logged, so a
  // reader replaying the log always holds the live set.
  void Stored(uint64_t hash, uint64_t parent, KvMedium medium = KvMedium::kPool);
  void Removed(uint64_t hash, KvMedium medium = KvMedium::kPool);

  Snapshot TakeSnapshot() const;
  // Appends the events after `after_seq` (at most `max`) to `out`. False when some of them were dropped
  // already: the reader fell behind and must start over from TakeSnapshot.
  bool Since(uint64_t after_seq, size_t max, std::vector<Event>* out) const;
  uint64_t last_seq() const;
  size_t num_cached(KvMedium medium = KvMedium::kPool) const;  // hashes held in `medium`

 private:
  void Append(Event e);  // mu_ held

  const size_t capacity_;
  mutable std::mutex mu_;
  std::deque<Event> events_;  // seq increasing by one, the newest last
  uint64_t seq_ = 0;
  std::unordered_map<uint64_t, uint8_t> live_;  // hash -> media mask (never 0: a hash held nowhere is erased)
  size_t held_[kNumKvMedia] = {};
};

}  // namespace deepinfer
