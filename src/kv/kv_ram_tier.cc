#include "kv/kv_ram_tier.h"

#include <cstdint>
#include <cstring>

namespace deepinfer {

StatusOr<std::unique_ptr<KvRamTier>> KvRamTier::Create(size_t capacity_bytes, size_t entry_bytes, KvEventLog* events) {
  const size_t slots = entry_bytes == 0 ? 0 : capacity_bytes / entry_bytes;
  if (slots == 0) return InvalidArgument("the RAM tier holds no entry of " + std::to_string(entry_bytes) + " bytes");
  if (slots > static_cast<size_t>(INT32_MAX))
    return InvalidArgument("--kv-offload-ram holds more than 2^31 KV blocks: use a larger --block-size or less RAM");
  // Reserved, not touched: pages are backed as entries are written (huge pages where the kernel allows).
  DI_ASSIGN_OR_RETURN(auto arena, HostBuffer::Allocate(slots * entry_bytes, /*huge_pages=*/true, /*reserve_only=*/true));
  return std::unique_ptr<KvRamTier>(new KvRamTier(std::move(arena), slots, entry_bytes, events));
}

KvRamTier::KvRamTier(std::unique_ptr<HostBuffer> arena, size_t slots, size_t entry_bytes, KvEventLog* events)
    : arena_(std::move(arena)), slots_(slots), entry_bytes_(entry_bytes), events_(events) {
  free_.reserve(slots);
  for (size_t s = slots; s-- > 0;) free_.push_back(static_cast<int32_t>(s));  // slot 0 first: the arena fills in order
}

bool KvRamTier::Put(uint64_t key, uint64_t parent_hash, const uint8_t* data, uint64_t reported_hash) {
  int32_t s = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) {
      lru_.splice(lru_.end(), lru_, it->second.lru_pos);
      return false;
    }
    if (!free_.empty()) {
      s = free_.back();
      free_.pop_back();
    } else {
      for (auto v = lru_.begin(); v != lru_.end(); ++v) {  // the least recent entry no read holds
        auto victim = map_.find(*v);
        if (victim->second.pins > 0) continue;
        s = victim->second.slot;
        if (events_ && victim->second.reported_hash) events_->Removed(victim->second.reported_hash, KvMedium::kRam);
        map_.erase(victim);
        lru_.erase(v);
        break;
      }
      if (s < 0) return false;
    }
  }
  // The slot is no entry's now: nobody reads it while it is filled. Only the writer thread puts, so `key` cannot
  // have been stored meanwhile.
  std::memcpy(slot(s), data, entry_bytes_);
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = map_[key];
  e.parent_hash = parent_hash;
  e.reported_hash = events_ ? reported_hash : 0;
  e.slot = s;
  e.lru_pos = lru_.insert(lru_.end(), key);
  if (e.reported_hash) events_->Stored(reported_hash, parent_hash, KvMedium::kRam);
  return true;
}

bool KvRamTier::Read(uint64_t key, uint64_t parent_hash, const uint8_t* prefix, size_t prefix_n,
                     const std::function<void(const uint8_t*)>& use) {
  const uint8_t* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) return false;
    Entry& e = it->second;
    p = slot(e.slot);
    if (e.parent_hash != parent_hash || prefix_n > entry_bytes_ || std::memcmp(p, prefix, prefix_n) != 0)
      return false;  // a key collision: another prefix's block
    ++e.pins;
    lru_.splice(lru_.end(), lru_, e.lru_pos);
  }
  use(p);
  std::lock_guard<std::mutex> lock(mu_);
  --map_.at(key).pins;  // pinned: still there
  return true;
}

bool KvRamTier::Touch(uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return false;
  lru_.splice(lru_.end(), lru_, it->second.lru_pos);
  return true;
}

bool KvRamTier::Contains(uint64_t key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.count(key) != 0;
}

size_t KvRamTier::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.size() * entry_bytes_;
}

size_t KvRamTier::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.size();
}

}  // namespace deepinfer
