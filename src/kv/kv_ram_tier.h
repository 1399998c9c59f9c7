// The host-RAM tier of the KV store (--kv-offload-ram): prefix blocks the pool evicted, kept in process memory,
// least-recently-used first out when their bytes pass the capacity. Thread-safe: the tiers' writer thread puts,
// the engine thread finds and copies out. Buffers of evicted entries are handed back (TakeEvicted) for reuse,
// so a steady workload allocates nothing per block.
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace deepinfer {

class KvRamTier {
 public:
  explicit KvRamTier(size_t capacity_bytes) : capacity_(capacity_bytes) {}

  size_t capacity() const { return capacity_; }
  // Stores `data` (tokens then K/V, kv/kv_tier_format.h) under `key` with its parent chain hash; the buffer is
  // moved in. An entry already present is only made most recent (the buffer is left in *data for reuse). An
  // entry larger than the whole capacity is not stored. Evicted buffers go to `spare` (bounded by the caller).
  void Put(uint64_t key, uint64_t parent_hash, std::vector<uint8_t>* data, std::vector<std::vector<uint8_t>>* spare);
  // Copies the entry for `key` into out[0, n) when it exists, has exactly n bytes, and its parent hash and
  // leading `prefix_n` bytes (the block's tokens) equal the caller's: the collision check. Marks it most recent.
  bool Get(uint64_t key, uint64_t parent_hash, const uint8_t* prefix, size_t prefix_n, uint8_t* out, size_t n);
  bool Contains(uint64_t key) const;
  // Marks the entry most recent (the pool served this block: its prefix is in use, keep it longest). False when
  // absent.
  bool Touch(uint64_t key);

  size_t bytes() const;
  size_t entries() const;

 private:
  struct Entry {
    uint64_t parent_hash = 0;
    std::vector<uint8_t> data;
    std::list<uint64_t>::iterator lru_pos;
  };
  const size_t capacity_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Entry> map_;
  std::list<uint64_t> lru_;  // least recent first
  size_t bytes_ = 0;
};

}  // namespace deepinfer
