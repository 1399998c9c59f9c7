#include "engine/kv_event_union.h"

namespace deepinfer {

void KvEventUnion::Change(uint64_t hash, int m, bool held) {
  const KvMedium medium = static_cast<KvMedium>(m);
  if (held) {
    if (holders_[hash][m]++ == 0) log_.Stored(hash, 0, medium);
    return;
  }
  auto it = holders_.find(hash);
  if (it == holders_.end() || it->second[m] == 0) return;  // not reached: a group only releases what it held
  if (--it->second[m] == 0) {
    log_.Removed(hash, medium);
    bool any = false;
    for (uint16_t c : it->second) any = any || c > 0;
    if (!any) holders_.erase(it);
  }
}

void KvEventUnion::Reset(int group, const std::vector<uint64_t>& hashes, const std::vector<uint8_t>& media) {
  std::unordered_map<uint64_t, uint8_t> now;
  now.reserve(hashes.size());
  for (size_t i = 0; i < hashes.size() && i < media.size(); ++i)
    if (media[i]) now[hashes[i]] |= media[i];
  std::unordered_map<uint64_t, uint8_t>& had = groups_[static_cast<size_t>(group)];
  // What the group gained, then what it lost (a block it moved between media is never absent from the union).
  for (const auto& [hash, mask] : now) {
    auto it = had.find(hash);
    const uint8_t before = it == had.end() ? 0 : it->second;
    for (int m = 0; m < kNumKvMedia; ++m)
      if ((mask & ~before) & MediumBit(static_cast<KvMedium>(m))) Change(hash, m, true);
  }
  for (const auto& [hash, mask] : had) {
    auto it = now.find(hash);
    const uint8_t after = it == now.end() ? 0 : it->second;
    for (int m = 0; m < kNumKvMedia; ++m)
      if ((mask & ~after) & MediumBit(static_cast<KvMedium>(m))) Change(hash, m, false);
  }
  had = std::move(now);
}

void KvEventUnion::Apply(int group, const std::vector<uint64_t>& stored, const std::vector<uint64_t>& removed,
                         uint8_t medium_bit) {
  std::unordered_map<uint64_t, uint8_t>& held = groups_[static_cast<size_t>(group)];
  int m = 0;
  while (m < kNumKvMedia && MediumBit(static_cast<KvMedium>(m)) != medium_bit) ++m;
  if (m == kNumKvMedia) return;
  for (uint64_t h : stored) {
    uint8_t& mask = held[h];
    if (mask & medium_bit) continue;
    mask |= medium_bit;
    Change(h, m, true);
  }
  for (uint64_t h : removed) {
    auto it = held.find(h);
    if (it == held.end() || !(it->second & medium_bit)) continue;
    it->second &= static_cast<uint8_t>(~medium_bit);
    if (it->second == 0) held.erase(it);
    Change(h, m, false);
  }
}

}  // namespace deepinfer
