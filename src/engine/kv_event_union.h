// The KV events of a whole `serve --dp` job, for GET /v1/kv_events on rank 0: the union of every data-parallel
// group's blocks, per medium (pool, RAM, disk). Each group's own log (kv/kv_event_log.h) reaches rank 0 through
// its KvEventFeed in the per-iteration Sync (engine/kv_event_feed.h); this applies those snapshots and deltas per
// group and logs a block stored when the first group holds it in a medium and removed when the last lets it go,
// so a router in front of the job (`deepinfer route`) sees one replica holding what any of its groups holds, and
// the job's own --dp routing then finds the group.
//
// Parents are not carried through the feed: the union's stored events name parent 0.
// Written by rank 0's engine thread only; the log is thread-safe for the event publisher.
#pragma once
#include <array>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kv/kv_event_log.h"

namespace deepinfer {

class KvEventUnion {
 public:
  explicit KvEventUnion(int groups) : groups_(static_cast<size_t>(groups)) {}

  // Group `group` holds exactly `hashes` now, each in the media of `media` (MediumBit masks).
  void Reset(int group, const std::vector<uint64_t>& hashes, const std::vector<uint8_t>& media);
  // A delta of one medium (`medium_bit`), stored first, then removed.
  void Apply(int group, const std::vector<uint64_t>& stored, const std::vector<uint64_t>& removed, uint8_t medium_bit);

  const KvEventLog& log() const { return log_; }

 private:
  // One group's hold of `hash` in medium `m` began (held) or ended: the union's count, and the log at 0 <-> 1.
  void Change(uint64_t hash, int m, bool held);

  std::vector<std::unordered_map<uint64_t, uint8_t>> groups_;  // per group: hash -> media mask
  std::unordered_map<uint64_t, std::array<uint16_t, kNumKvMedia>> holders_;  // hash -> groups holding it, per medium
  KvEventLog log_;
};

}  // namespace deepinfer
