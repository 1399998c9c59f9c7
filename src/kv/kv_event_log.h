// The prefix cache's change log for the KV events endpoint (GET /v1/kv_events, docs/architecture.md "KV events"):
// which blocks of the full-attention group (group 0, keyed by the plain chain hash of kv/prefix_hash.h, so a
// router can compute the same keys from token ids) entered and left the prefix cache, in order, numbered.
//
// Written by the engine thread (BlockPool::Publish / Uncache) and read by the server's event publisher, so it
// is thread-safe; the writer only appends under a short lock and never waits on a reader's I/O. The log is
// bounded: past `capacity` events the oldest are dropped, and a reader whose position was dropped resyncs from
// a snapshot (the live set, kept here for that purpose) instead of the log growing for a slow subscriber.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <unordered_set>
#include <vector>

namespace deepinfer {

class KvEventLog {
 public:
  struct Event {
    uint64_t seq = 0;
    bool stored = false;  // false: removed
    uint64_t hash = 0;
    uint64_t parent = 0;  // stored: the chain hash of the block before it (0 for a prompt's first block)
  };
  struct Snapshot {
    uint64_t seq = 0;             // the newest event the set includes; deltas continue after it
    std::vector<uint64_t> hashes;  // every block hash cached now
  };

  explicit KvEventLog(size_t capacity = 1 << 16) : capacity_(capacity ? capacity : 1) {}

  // Engine thread. A hash stored twice without a removal between (or removed while absent) is not logged, so
  // a reader replaying the log always holds the live set.
  void Stored(uint64_t hash, uint64_t parent);
  void Removed(uint64_t hash);

  Snapshot TakeSnapshot() const;
  // Appends the events after `after_seq` (at most `max`) to `out`. False when some of them were dropped
  // already: the reader fell behind and must start over from TakeSnapshot.
  bool Since(uint64_t after_seq, size_t max, std::vector<Event>* out) const;
  uint64_t last_seq() const;
  size_t num_cached() const;

 private:
  void Append(Event e);  // mu_ held

  const size_t capacity_;
  mutable std::mutex mu_;
  std::deque<Event> events_;  // seq increasing by one, the newest last
  uint64_t seq_ = 0;
  std::unordered_set<uint64_t> live_;
};

}  // namespace deepinfer
