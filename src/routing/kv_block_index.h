// What the router knows of one replica's prefix cache, fed by its KV event stream (GET /v1/kv_events,
// server/kv_event_publisher.h): the chain hashes (kv/prefix_hash.h) of the full-attention blocks it holds, in its
// KV pool or in a KV tier behind it (kv/kv_event_log.h's media: a tier hit is a hit, loaded instead of computed), the
// block size they were computed with, and the load it last reported. Plus the blocks the router predicts: a
// request routed here will cache its prompt's blocks a prefill later, and until the replica's events confirm
// them (or `predict_ttl_s` passes) they count as held, so the second request of a new prefix follows the first
// instead of racing the events (Dynamo's router does the same).
//
// Under `serve --dp` a replica is a data-parallel group, fed by its KvEventFeed (engine/kv_event_feed.h) on rank
// 0's engine thread, which also routes.
//
// Thread-safe: the replica's subscriber thread writes, the forwarding threads read and predict.
#pragma once
#include <chrono>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace deepinfer::router {

// A replica's own account of its load (its `load` events); known == false before the first one.
struct ReplicaLoad {
  bool known = false;
  int64_t waiting = 0, running = 0, kv_used_blocks = 0, kv_total_blocks = 0;
};

class KvBlockIndex {
 public:
  using Clock = std::chrono::steady_clock;
  explicit KvBlockIndex(double predict_ttl_s = 5.0) : predict_ttl_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(predict_ttl_s))) {}

  // A snapshot: the replica holds exactly `hashes` now (on connect, and on every resync), each in the media of
  // `media` (kv/kv_event_log.h MediumBit masks; empty: all in the pool).
  void Reset(int block_size, const std::vector<uint64_t>& hashes, const std::vector<uint8_t>& media = {});
  // A delta of one medium (a MediumBit), applied in order: stored first, then removed (the publisher splits
  // deltas where that matters). False (nothing applied) when the index was cleared since its snapshot.
  bool Apply(const std::vector<uint64_t>& stored, const std::vector<uint64_t>& removed, uint8_t medium_bit = 1);
  // The replica went down or its stream broke: nothing is known until the next snapshot.
  void Clear();
  void SetLoad(const ReplicaLoad& load);
  // The replica's token ids differ from the router's (another tokenizer or chat template): its hashes match
  // nothing the router computes, so it scores no blocks (degraded to load balancing), and /metrics says so.
  void SetMismatch(bool m);

  // `hashes` (a prompt's chain hashes) are routed here: count them as held until confirmed or expired.
  void Predict(const std::vector<uint64_t>& hashes, Clock::time_point now);
  // How many of `hashes` from the first on the replica holds (or is predicted to).
  int LeadingBlocks(const std::vector<uint64_t>& hashes, Clock::time_point now) const;

  int block_size() const;  // 0 before the first snapshot (and after Clear)
  bool synced() const { return block_size() > 0; }
  bool mismatch() const;
  size_t size() const;       // blocks held in the pool (as reported)
  size_t tier_size() const;  // blocks held only in a KV tier (RAM, disk)
  size_t footprint() const;  // blocks held or predicted: how much of the replica's cache the router expects in use
  ReplicaLoad load() const;
  uint64_t events() const;   // stored + removed entries received
  uint64_t resyncs() const;  // snapshots after the first
  uint64_t snapshots() const;

 private:
  const Clock::duration predict_ttl_;
  mutable std::mutex mu_;
  int block_size_ = 0;
  bool mismatch_ = false;
  std::unordered_map<uint64_t, uint8_t> blocks_;  // hash -> media mask (bit 0: the pool; never 0)
  size_t in_pool_ = 0;
  std::unordered_map<uint64_t, Clock::time_point> predicted_;  // hash -> expiry
  ReplicaLoad load_;
  uint64_t events_ = 0, snapshots_ = 0;
};

}  // namespace deepinfer::router
