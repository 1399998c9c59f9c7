// The host-RAM tier of the KV store (--kv-offload-ram): prefix blocks the pool evicted, kept in process memory,
// least-recently-used first out once every slot is taken. Entries live in one arena of fixed-size slots
// (capacity / entry bytes of them), reserved at start and backed by huge pages as they fill (HostBuffer), so
// filling the tier costs one page fault per 2 MiB rather than one per 4 KiB, and no entry is ever allocated.
// Thread-safe: the tiers' writer thread puts, the loader reads, the engine thread asks what is held. Copies in
// and out run outside the lock: a slot being filled is not yet findable, and a slot being read is pinned (never
// evicted until the read is done).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "base/host_buffer.h"
#include "deepinfer/status.h"
#include "kv/kv_event_log.h"

namespace deepinfer {

class KvRamTier {
 public:
  // capacity_bytes / entry_bytes slots (at least one: the caller refuses a capacity below one entry). Entries put
  // with a reported hash are announced to `events` (KvMedium::kRam) when stored and when evicted; null: nowhere.
  static StatusOr<std::unique_ptr<KvRamTier>> Create(size_t capacity_bytes, size_t entry_bytes,
                                                     KvEventLog* events = nullptr);

  size_t capacity() const { return slots_ * entry_bytes_; }
  size_t entry_bytes() const { return entry_bytes_; }
  // Copies `data` (entry_bytes: tokens then K/V, kv/kv_tier_format.h) in under `key` with its parent chain hash,
  // evicting the least recently used unpinned entry when every slot is taken. An entry already present is only
  // made most recent. False when nothing was stored (present already, or every slot pinned). `reported_hash`: the
  // chain hash the KV events know the entry by (group 0's block), 0 for an entry they do not report.
  bool Put(uint64_t key, uint64_t parent_hash, const uint8_t* data, uint64_t reported_hash = 0);
  // Calls use(entry) (entry_bytes bytes, outside the lock, the slot pinned) when the entry for `key` exists and its
  // parent hash and leading `prefix_n` bytes (the block's tokens) equal the caller's: the collision check. Marks it
  // most recent. False (use not called) otherwise.
  bool Read(uint64_t key, uint64_t parent_hash, const uint8_t* prefix, size_t prefix_n,
            const std::function<void(const uint8_t*)>& use);
  bool Contains(uint64_t key) const;
  // Marks the entry most recent (the pool served this block: its prefix is in use, keep it longest). False when
  // absent.
  bool Touch(uint64_t key);

  size_t bytes() const;
  size_t entries() const;

 private:
  KvRamTier(std::unique_ptr<HostBuffer> arena, size_t slots, size_t entry_bytes, KvEventLog* events);
  uint8_t* slot(int32_t s) { return arena_->data() + static_cast<size_t>(s) * entry_bytes_; }

  struct Entry {
    uint64_t parent_hash = 0;
    uint64_t reported_hash = 0;
    int32_t slot = -1;
    int pins = 0;
    std::list<uint64_t>::iterator lru_pos;
  };
  std::unique_ptr<HostBuffer> arena_;
  const size_t slots_, entry_bytes_;
  KvEventLog* const events_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Entry> map_;
  std::list<uint64_t> lru_;      // least recent first
  std::vector<int32_t> free_;    // slots no entry holds
};

}  // namespace deepinfer
