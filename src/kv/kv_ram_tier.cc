#include "kv/kv_ram_tier.h"

#include <cstring>

namespace deepinfer {

void KvRamTier::Put(uint64_t key, uint64_t parent_hash, std::vector<uint8_t>* data,
                    std::vector<std::vector<uint8_t>>* spare) {
  if (data->size() > capacity_) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it != map_.end()) {
    lru_.splice(lru_.end(), lru_, it->second.lru_pos);
    return;
  }
  while (bytes_ + data->size() > capacity_ && !lru_.empty()) {
    auto victim = map_.find(lru_.front());
    bytes_ -= victim->second.data.size();
    if (spare) spare->push_back(std::move(victim->second.data));
    map_.erase(victim);
    lru_.pop_front();
  }
  Entry& e = map_[key];
  e.parent_hash = parent_hash;
  e.data = std::move(*data);
  data->clear();
  bytes_ += e.data.size();
  e.lru_pos = lru_.insert(lru_.end(), key);
}

bool KvRamTier::Get(uint64_t key, uint64_t parent_hash, const uint8_t* prefix, size_t prefix_n, uint8_t* out,
                    size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return false;
  const Entry& e = it->second;
  if (e.data.size() != n || e.parent_hash != parent_hash || prefix_n > n ||
      std::memcmp(e.data.data(), prefix, prefix_n) != 0)
    return false;  // a key collision: another prefix's block
  std::memcpy(out, e.data.data(), n);
  lru_.splice(lru_.end(), lru_, it->second.lru_pos);
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
  return bytes_;
}

size_t KvRamTier::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.size();
}

}  // namespace deepinfer
