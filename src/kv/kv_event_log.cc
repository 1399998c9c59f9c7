#include "kv/kv_event_log.h"

namespace deepinfer {

void KvEventLog::Append(Event e) {
  e.seq = ++seq_;
  events_.push_back(e);
  while (events_.size() > capacity_) events_.pop_front();
}

void KvEventLog::Stored(uint64_t hash, uint64_t parent) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!live_.insert(hash).second) return;
  Append({0, true, hash, parent});
}

void KvEventLog::Removed(uint64_t hash) {
  std::lock_guard<std::mutex> lock(mu_);
  if (live_.erase(hash) == 0) return;
  Append({0, false, hash, 0});
}

KvEventLog::Snapshot KvEventLog::TakeSnapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  Snapshot s;
  s.seq = seq_;
  s.hashes.assign(live_.begin(), live_.end());
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

size_t KvEventLog::num_cached() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_.size();
}

}  // namespace deepinfer
