// One data-parallel group's prefix-cache changes (kv/kv_event_log.h), carried to rank 0 inside the per-iteration
// Sync collective (engine/dist_control.h), for rank 0's router policy to score the group by the blocks it holds:
// the second transport of the KV events, next to GET /v1/kv_events (server/kv_event_publisher.h) that feeds
// `deepinfer route`. Both ends apply the same protocol to the same index (routing/kv_block_index.h): a snapshot
// first, then deltas in order, and a fresh snapshot whenever the sender fell behind its bounded log.
//
// Blocks are reported per medium (the pool, the KV tiers: kv/kv_event_log.h). Bounded per iteration: a Write
// carries at most `max_hashes` hashes (9 bytes each on the wire), so a burst of
// evictions or a large snapshot never makes one Sync large. A backlog longer than that drains over the next
// iterations; a snapshot goes out in slices (its deltas wait in the log meanwhile); a sender whose position the
// log dropped starts over from a snapshot, as the HTTP subscriber does.
//
// One object per end: a group leader's feed Writes its own log, and rank 0 holds one per group to Read into
// that group's index. Not thread-safe (the engine thread calls both ends).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/wire.h"
#include "kv/kv_event_log.h"

namespace deepinfer {
namespace router {
class KvBlockIndex;
}
class KvEventUnion;

class KvEventFeed {
 public:
  static constexpr size_t kDefaultMaxHashes = 4096;  // 36 KiB per group per iteration at most

  // The sending end over `log` (nullptr: writes empty deltas), or a receiving end (pass nullptr).
  explicit KvEventFeed(const KvEventLog* log, size_t max_hashes = kDefaultMaxHashes);

  // Sender: appends this iteration's part (a delta, or the next snapshot slice).
  void Write(wire::Writer& w);
  // Receiver: reads one Write's part and applies it to `index` (nullptr: not routed by events), whose block size
  // is `block_size`, and as group `group`'s to `all` (the job's union; nullptr: none). False when the part is
  // malformed.
  bool Read(wire::Reader& r, router::KvBlockIndex* index, int block_size, KvEventUnion* all = nullptr, int group = 0);

  uint64_t hashes_sent() const { return hashes_sent_; }
  uint64_t snapshots() const { return snapshots_; }  // sender: snapshots begun (the first and every resync)

 private:
  enum : uint8_t { kSnapshotBegin = 1, kSnapshotEnd = 2 };
  const KvEventLog* log_;
  const size_t max_hashes_;
  // Sender.
  uint64_t seq_ = 0;          // the newest event sent (or covered by the last snapshot)
  bool need_snapshot_ = true;  // the first part is a snapshot, so the receiver never applies a delta to nothing
  bool snapping_ = false;
  std::vector<uint64_t> snap_;  // the snapshot being sent, from snap_off_ on
  std::vector<uint8_t> snap_media_;
  size_t snap_off_ = 0;
  uint64_t snap_seq_ = 0;
  std::vector<KvEventLog::Event> events_;  // scratch
  uint64_t hashes_sent_ = 0, snapshots_ = 0;
  // Receiver.
  bool receiving_snapshot_ = false;
  std::vector<uint64_t> pending_;  // the snapshot's slices so far
  std::vector<uint8_t> pending_media_;
};

}  // namespace deepinfer
