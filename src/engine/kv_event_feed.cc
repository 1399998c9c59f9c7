#include "engine/kv_event_feed.h"

#include <algorithm>
#include <unordered_set>

#include "engine/kv_event_union.h"
#include "routing/kv_block_index.h"

namespace deepinfer {

KvEventFeed::KvEventFeed(const KvEventLog* log, size_t max_hashes) : log_(log), max_hashes_(std::max<size_t>(max_hashes, 1)) {}

// The wire: flags (kSnapshotBegin / kSnapshotEnd; 0 = a delta), the hashes, and one byte per hash: in a delta
// the medium << 1 | stored (1 stored, 0 removed), in the log's order; in a snapshot the media mask.
void KvEventFeed::Write(wire::Writer& w) {
  std::vector<uint64_t> hashes;
  std::vector<uint8_t> bytes;
  uint8_t flags = 0;
  if (log_ && !snapping_ && !need_snapshot_) {
    events_.clear();
    if (log_->Since(seq_, max_hashes_, &events_)) {
      for (const KvEventLog::Event& e : events_)
        hashes.push_back(e.hash), bytes.push_back(static_cast<uint8_t>(static_cast<uint8_t>(e.medium) << 1 | e.stored));
      if (!events_.empty()) seq_ = events_.back().seq;
    } else {
      need_snapshot_ = true;  // the log dropped events this end never sent: start over
    }
  }
  if (log_ && need_snapshot_) {
    KvEventLog::Snapshot s = log_->TakeSnapshot();
    snap_ = std::move(s.hashes);
    snap_media_ = std::move(s.media);
    snap_seq_ = s.seq;
    snap_off_ = 0;
    snapping_ = true;
    need_snapshot_ = false;
    flags |= kSnapshotBegin;
    ++snapshots_;
  }
  if (snapping_) {
    const size_t n = std::min(max_hashes_, snap_.size() - snap_off_);
    hashes.assign(snap_.begin() + snap_off_, snap_.begin() + snap_off_ + n);
    bytes.assign(snap_media_.begin() + snap_off_, snap_media_.begin() + snap_off_ + n);
    snap_off_ += n;
    if (snap_off_ == snap_.size()) {
      flags |= kSnapshotEnd;
      snapping_ = false;
      seq_ = snap_seq_;  // deltas continue after what the snapshot covers
      snap_.clear();
      snap_.shrink_to_fit();
      snap_media_.clear();
      snap_media_.shrink_to_fit();
    }
  }
  hashes_sent_ += hashes.size();
  w.Put(flags);
  w.PutVector(hashes);
  w.PutVector(bytes);
}

bool KvEventFeed::Read(wire::Reader& r, router::KvBlockIndex* index, int block_size, KvEventUnion* all, int group) {
  const uint8_t flags = r.Get<uint8_t>();
  const std::vector<uint64_t> hashes = r.GetVector<uint64_t>();
  const std::vector<uint8_t> bytes = r.GetVector<uint8_t>();
  if (!r.ok() || (flags & ~(kSnapshotBegin | kSnapshotEnd)) != 0 || bytes.size() != hashes.size()) return false;
  if (flags & kSnapshotBegin) {
    receiving_snapshot_ = true;
    pending_.clear();
    pending_media_.clear();
  }
  if (receiving_snapshot_) {
    for (uint8_t b : bytes)
      if (b == 0 || b >= (1u << kNumKvMedia)) return false;  // a media mask names at least one known medium
    pending_.insert(pending_.end(), hashes.begin(), hashes.end());
    pending_media_.insert(pending_media_.end(), bytes.begin(), bytes.end());
    if (flags & kSnapshotEnd) {
      if (index) index->Reset(block_size, pending_, pending_media_);
      if (all) all->Reset(group, pending_, pending_media_);
      receiving_snapshot_ = false;
      pending_.clear();
      pending_.shrink_to_fit();
      pending_media_.clear();
      pending_media_.shrink_to_fit();
    }
    return true;
  }
  if (flags != 0) return false;
  for (uint8_t b : bytes)
    if ((b >> 1) >= kNumKvMedia) return false;
  if (!index && !all) return true;
  // KvBlockIndex::Apply takes one medium's stored then removed: a hash met twice, or another medium, splits the
  // part there, so the order of the log is kept (as the HTTP publisher splits its deltas).
  std::vector<uint64_t> st, rm;
  std::unordered_set<uint64_t> seen;
  uint8_t medium = 0;
  auto flush = [&] {
    if (st.empty() && rm.empty()) return;
    if (index) index->Apply(st, rm, MediumBit(static_cast<KvMedium>(medium)));
    if (all) all->Apply(group, st, rm, MediumBit(static_cast<KvMedium>(medium)));
    st.clear(), rm.clear(), seen.clear();
  };
  for (size_t i = 0; i < hashes.size(); ++i) {
    const uint8_t m = bytes[i] >> 1;
    if (m != medium || seen.count(hashes[i])) flush();
    medium = m;
    seen.insert(hashes[i]);
    (bytes[i] & 1 ? st : rm).push_back(hashes[i]);
  }
  flush();
  return true;
}

}  // namespace deepinfer
