#include "kv/block_pool.h"

#include <algorithm>

#include "kv/kv_event_log.h"
#include "kv/prefix_hash.h"

namespace deepinfer {

BlockPool::BlockPool(int num_blocks, int block_size) : block_size_(block_size), blocks_(static_cast<size_t>(num_blocks)) {
  free_.reserve(num_blocks);
  for (int b = num_blocks - 1; b >= 0; --b) free_.push_back(b);  // hand out low ids first
}

uint64_t BlockPool::Key(uint64_t h, int group) {
  if (group == 0) return h;
  uint64_t x = h ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(group));  // splitmix64 finalizer
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void BlockPool::Referenced(int32_t b) {
  const int g = blocks_[b].group;
  if (g >= static_cast<int>(in_use_.size())) {
    in_use_.resize(g + 1, 0);
    peak_.resize(g + 1, 0);
  }
  peak_[g] = std::max(peak_[g], ++in_use_[g]);
}

void BlockPool::Unreferenced(int32_t b) { --in_use_[blocks_[b].group]; }

StatusOr<std::vector<int32_t>> BlockPool::Allocate(int n, int group) {
  if (n < 0 || n > num_available())
    return OutOfRange("KV cache: " + std::to_string(n) + " blocks requested, " + std::to_string(num_available()) + " of " +
                      std::to_string(num_blocks()) + " available");
  std::vector<int32_t> out;
  out.reserve(n);
  for (int k = 0; k < n; ++k) {
    int32_t b;
    if (!free_.empty()) {
      b = free_.back();
      free_.pop_back();
    } else {
      b = lru_.front();
      Uncache(b);
      lru_.pop_front();
    }
    blocks_[b].refs = 1;
    blocks_[b].group = group;
    Referenced(b);
    out.push_back(b);
  }
  return out;
}

void BlockPool::Uncache(int32_t b) {
  Block& blk = blocks_[b];
  auto it = by_hash_.find(blk.hash);
  if (it != by_hash_.end() && it->second == b) {
    by_hash_.erase(it);
    if (events_ && blk.cached && blk.group == 0) events_->Removed(blk.hash);
  }
  blk.cached = false;
  blk.tokens.clear();
}

void BlockPool::Release(const std::vector<int32_t>& blocks) {
  for (int32_t b : blocks) {
    Block& blk = blocks_[b];
    if (blk.refs <= 0) continue;  // double release is a caller bug; never corrupt the free lists for it
    if (--blk.refs > 0) continue;
    Unreferenced(b);
    if (blk.cached) blk.lru_pos = lru_.insert(lru_.end(), b);
    else free_.push_back(b);
  }
}

void BlockPool::ReleaseUncached(const std::vector<int32_t>& blocks) {
  for (int32_t b : blocks) {
    Block& blk = blocks_[b];
    if (blk.refs <= 0) continue;
    if (--blk.refs > 0) continue;
    Unreferenced(b);
    if (blk.cached) Uncache(b);
    free_.push_back(b);
  }
}

std::vector<uint64_t> BlockPool::ChainHashes(const int32_t* tokens, int n) const {
  return PrefixChainHashes(tokens, n, block_size_);
}

std::vector<int32_t> BlockPool::MatchPrefix(const int32_t* tokens, int n, int group) {
  std::vector<int32_t> out;
  const std::vector<uint64_t> hashes = ChainHashes(tokens, n);
  for (size_t i = 0; i < hashes.size(); ++i) {
    auto it = by_hash_.find(Key(hashes[i], group));
    if (it == by_hash_.end()) break;
    Block& blk = blocks_[it->second];
    if (blk.group != group) break;  // a key collision across groups
    const int32_t* own = tokens + i * block_size_;
    const bool parent_ok = i == 0 ? blk.parent == -1 : (blk.parent == out.back() && blk.parent_gen == blocks_[out.back()].gen);
    if (!parent_ok || !std::equal(blk.tokens.begin(), blk.tokens.end(), own)) break;  // collision
    if (blk.refs++ == 0) {
      lru_.erase(blk.lru_pos);
      Referenced(it->second);
    }
    out.push_back(it->second);
  }
  return out;
}

void BlockPool::Publish(const std::vector<int32_t>& blocks, const int32_t* tokens, int num_full, int group, int from,
                        int held_from, const std::vector<int32_t>* twins) {
  const std::vector<uint64_t> hashes = ChainHashes(tokens, num_full * block_size_);
  for (int i = std::max(from, held_from); i < num_full && i < static_cast<int>(blocks.size()); ++i) {
    if (blocks[i] < 0) continue;  // a window's hole (a tier load that missed this block): nothing to publish
    // The previous block, as the cache holds it: this sequence's own block when it is the cached one; else the
    // block cached under the previous prefix's key. That is another request's identical block when both computed
    // the same head at once (this one's copy was not published, below) - linking to this sequence's uncached copy
    // made every later block unreachable for MatchPrefix, which follows the cached chain. A released block (a
    // sliding window) may also have been evicted and reused for another prefix; with no cached previous block the
    // chain ends here.
    int32_t parent = i == 0 ? -1 : blocks[i - 1];
    if (i > 0 && (parent < 0 || !blocks_[parent].cached || blocks_[parent].hash != Key(hashes[i - 1], group))) {
      if (link_own_blocks_only_ && !twins) break;  // set_link_own_blocks_only
      auto prev = by_hash_.find(Key(hashes[i - 1], group));
      parent = prev != by_hash_.end() && blocks_[prev->second].group == group ? prev->second : -1;
    }
    if (i > 0 && parent < 0 && !twins) break;  // a chain-only block needs its parent
    int32_t twin = -1;
    if (twins) {
      twin = i < static_cast<int>(twins->size()) ? (*twins)[i] : -1;
      if (twin < 0 || !blocks_[twin].cached || blocks_[twin].hash != hashes[i]) continue;  // the anchor's is not cached
    }
    Block& blk = blocks_[blocks[i]];
    const uint64_t key = Key(hashes[i], group);
    if (twins) {
      // A window cached earlier whose anchor block has since left the cache (and maybe come back) can no longer
      // be found (FindWindowBlock checks the tie): it gives its key up to this one if nobody holds it.
      auto it = by_hash_.find(key);
      if (it != by_hash_.end() && it->second != blocks[i]) {
        Block& old = blocks_[it->second];
        if (old.refs == 0 && (old.twin != twin || old.twin_gen != blocks_[twin].gen)) {
          const int32_t b = it->second;
          lru_.erase(old.lru_pos);
          Uncache(b);
          free_.push_back(b);
        }
      }
    }
    if (blk.cached || by_hash_.count(key)) continue;  // cached already, or an identical twin is
    blk.cached = true;
    blk.hash = key;
    blk.gen = next_gen_++;
    blk.tokens.assign(tokens + i * block_size_, tokens + (i + 1) * block_size_);
    blk.parent = i == 0 ? -1 : parent;
    blk.parent_gen = parent < 0 ? 0 : blocks_[parent].gen;
    blk.twin = twin;
    blk.twin_gen = twin < 0 ? 0 : blocks_[twin].gen;
    by_hash_[key] = blocks[i];
    if (events_ && group == 0) events_->Stored(key, blk.parent < 0 ? 0 : blocks_[blk.parent].hash);
  }
}

int32_t BlockPool::FindWindowBlock(int group, uint64_t hash, const int32_t* tokens, int32_t twin) const {
  auto it = by_hash_.find(Key(hash, group));
  if (it == by_hash_.end() || twin < 0) return -1;
  const Block& blk = blocks_[it->second];
  if (blk.group != group || blk.twin != twin || blk.twin_gen != blocks_[twin].gen) return -1;
  if (!std::equal(blk.tokens.begin(), blk.tokens.end(), tokens)) return -1;
  return it->second;
}

void BlockPool::Acquire(int32_t b) {
  Block& blk = blocks_[b];
  if (blk.refs++ == 0) {
    if (blk.cached) lru_.erase(blk.lru_pos);
    Referenced(b);
  }
}

Status BlockPool::CheckNoLeaks() const {
  int referenced = 0;
  std::string first;
  for (size_t b = 0; b < blocks_.size(); ++b)
    if (blocks_[b].refs > 0) {
      if (referenced++ == 0) first = std::to_string(b);
    }
  if (referenced == 0 && num_available() == num_blocks()) return Status::Ok();
  return Internal("KV cache leak: " + std::to_string(referenced) + " block(s) still referenced (first: " + first + "), " +
                  std::to_string(num_available()) + "/" + std::to_string(num_blocks()) + " available");
}

}  // namespace deepinfer
