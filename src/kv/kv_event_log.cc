#include "kv/kv_event_log.h"

namespace deepinfer {

void KvEventLog::Append(Event e) {
  e.seq = ++seq_;
  events_.push_back(e);
  while (events_.size() > capacity_) events_.pop_front();
}

const char* KvMediumName(KvMedium m) {
  switch (m) {
    case KvMedium::kPool: return "pool";
    case KvMedium::kRam: return "ram";
    case KvMedium::kDisk: return "disk";
  }
  return "?";
}

void KvEventLog::Stored(uint64_t hash, uint64_t parent, KvMedium medium) {
  std::lock_guard<std::mutex> lock(mu_);
  uint8_t& mask = live_[hash];
  if (mask & MediumBit(medium)) return;
  mask |= MediumBit(medium);
  ++held_[static_cast<int>(medium)];
  Append({0, true, hash, parent, medium});
}

void KvEventLog::Removed(uint64_t hash, KvMedium medium) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(hash);
  if (it == live_.end() || !(it->second & MediumBit(medium))) return;
  it->second &= static_cast<uint8_t>(~MediumBit(medium));
  if (it->second == 0) live_.erase(it);
  --held_[static_cast<int>(medium)];
  Append({0, false, hash, 0, medium});
}

KvEventLog::Snapshot KvEventLog::TakeSnapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  Snapshot s;
  s.seq = seq_;
  s.hashes.reserve(live_.size());
  s.media.reserve(live_.size());
  for (const auto& [hash, mask] : live_) {
    s.hashes.push_back(hash);
    s.media.push_back(mask);
  }
  return s;
}

bool KvEventLog::Since(uint64_t after_seq, size_t max, std::vector<Event>* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (after_seq >= seq_) return true;
  // The oldest retained event is seq_ - size + 1; the reader needs after_seq + 1.
  const uint64_t oldest = seq_ - events_.size() + 1;
  if (after_seq + 1 < oldest) return false;
  for (size_t i = after_seq + 1 - oldest; i < events_.size() && max > 0; ++i, --max) out->push_back(events_[i]);
  return true;
}

uint64_t KvEventLog::last_seq() const {
  std::lock_guard<std::mutex> lock(mu_);
  return seq_;
}

size_t KvEventLog::num_cached(KvMedium medium) const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_[static_cast<int>(medium)];
}

}  // namespace deepinfer
