#include "routing/kv_block_index.h"

namespace deepinfer::router {

namespace {
constexpr uint8_t kPoolBit = 1;  // kv/kv_event_log.h MediumBit(KvMedium::kPool)
}

void KvBlockIndex::Reset(int block_size, const std::vector<uint64_t>& hashes, const std::vector<uint8_t>& media) {
  std::lock_guard<std::mutex> lock(mu_);
  block_size_ = block_size;
  blocks_.clear();
  in_pool_ = 0;
  for (size_t i = 0; i < hashes.size(); ++i) {
    const uint8_t m = i < media.size() ? media[i] : kPoolBit;
    if (m == 0) continue;
    uint8_t& mask = blocks_[hashes[i]];
    if ((m & kPoolBit) && !(mask & kPoolBit)) ++in_pool_;
    mask |= m;
    predicted_.erase(hashes[i]);
  }
  snapshots_++;
}

bool KvBlockIndex::Apply(const std::vector<uint64_t>& stored, const std::vector<uint64_t>& removed, uint8_t medium_bit) {
  std::lock_guard<std::mutex> lock(mu_);
  // Cleared (the replica taken out) since the caller last looked: a delta must not refill an index with no
  // snapshot under it; the caller starts over from a snapshot.
  if (block_size_ <= 0) return false;
  for (uint64_t h : stored) {
    uint8_t& mask = blocks_[h];
    if (medium_bit == kPoolBit && !(mask & kPoolBit)) ++in_pool_;
    mask |= medium_bit;
    predicted_.erase(h);  // confirmed
  }
  for (uint64_t h : removed) {
    auto it = blocks_.find(h);
    if (it != blocks_.end() && (it->second & medium_bit)) {
      if (medium_bit == kPoolBit) --in_pool_;
      it->second &= static_cast<uint8_t>(~medium_bit);
      if (it->second == 0) blocks_.erase(it);
    }
    // Evicted from the pool: whatever was predicted of it is gone too (a tier holding it still counts).
    if (medium_bit == kPoolBit) predicted_.erase(h);
  }
  events_ += stored.size() + removed.size();
  return true;
}

void KvBlockIndex::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  block_size_ = 0;
  blocks_.clear();
  in_pool_ = 0;
  predicted_.clear();
  load_ = ReplicaLoad{};
}

void KvBlockIndex::SetLoad(const ReplicaLoad& load) {
  std::lock_guard<std::mutex> lock(mu_);
  load_ = load;
  load_.known = true;
}

void KvBlockIndex::SetMismatch(bool m) {
  std::lock_guard<std::mutex> lock(mu_);
  mismatch_ = m;
}

void KvBlockIndex::Predict(const std::vector<uint64_t>& hashes, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (mismatch_ || block_size_ <= 0) return;
  // Expired predictions go when the map has grown past what the replica could hold twice over.
  if (predicted_.size() > 2 * in_pool_ + 4096)
    for (auto it = predicted_.begin(); it != predicted_.end();) it = it->second <= now ? predicted_.erase(it) : std::next(it);
  for (uint64_t h : hashes)
    if (!blocks_.count(h)) predicted_[h] = now + predict_ttl_;
}

int KvBlockIndex::LeadingBlocks(const std::vector<uint64_t>& hashes, Clock::time_point now) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (mismatch_ || block_size_ <= 0) return 0;
  int n = 0;
  for (uint64_t h : hashes) {
    if (!blocks_.count(h)) {
      auto it = predicted_.find(h);
      if (it == predicted_.end() || it->second <= now) break;
    }
    ++n;
  }
  return n;
}

int KvBlockIndex::block_size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return block_size_;
}
bool KvBlockIndex::mismatch() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mismatch_;
}
size_t KvBlockIndex::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_pool_;
}
size_t KvBlockIndex::tier_size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return blocks_.size() - in_pool_;
}
size_t KvBlockIndex::footprint() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_pool_ + predicted_.size();
}
ReplicaLoad KvBlockIndex::load() const {
  std::lock_guard<std::mutex> lock(mu_);
  return load_;
}
uint64_t KvBlockIndex::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_;
}
uint64_t KvBlockIndex::snapshots() const {
  std::lock_guard<std::mutex> lock(mu_);
  return snapshots_;
}
uint64_t KvBlockIndex::resyncs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return snapshots_ > 0 ? snapshots_ - 1 : 0;
}

}  // namespace deepinfer::router
