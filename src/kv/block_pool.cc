#include "kv/block_pool.h"

#include <algorithm>

#include "kv/prefix_hash.h"

namespace deepinfer {

BlockPool::BlockPool(int num_blocks, int block_size) : block_size_(block_size), blocks_(static_cast<size_t>(num_blocks)) {
  free_.reserve(num_blocks);
  for (int b = num_blocks - 1; b >= 0; --b) free_.push_back(b);  // hand out low ids first
}

StatusOr<std::vector<int32_t>> BlockPool::Allocate(int n) {
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
    out.push_back(b);
  }
  return out;
}

void BlockPool::Uncache(int32_t b) {
  Block& blk = blocks_[b];
  auto it = by_hash_.find(blk.hash);
  if (it != by_hash_.end() && it->second == b) by_hash_.erase(it);
  blk.cached = false;
  blk.tokens.clear();
}

void BlockPool::Release(const std::vector<int32_t>& blocks) {
  for (int32_t b : blocks) {
    Block& blk = blocks_[b];
    if (blk.refs <= 0) continue;  // double release is a caller bug; never corrupt the free lists for it
    if (--blk.refs > 0) continue;
    if (blk.cached) blk.lru_pos = lru_.insert(lru_.end(), b);
    else free_.push_back(b);
  }
}

std::vector<uint64_t> BlockPool::ChainHashes(const int32_t* tokens, int n) const {
  return PrefixChainHashes(tokens, n, block_size_);
}

std::vector<int32_t> BlockPool::MatchPrefix(const int32_t* tokens, int n) {
  std::vector<int32_t> out;
  const std::vector<uint64_t> hashes = ChainHashes(tokens, n);
  for (size_t i = 0; i < hashes.size(); ++i) {
    auto it = by_hash_.find(hashes[i]);
    if (it == by_hash_.end()) break;
    Block& blk = blocks_[it->second];
    const int32_t* own = tokens + i * block_size_;
    const bool parent_ok = i == 0 ? blk.parent == -1 : (blk.parent == out.back() && blk.parent_gen == blocks_[out.back()].gen);
    if (!parent_ok || !std::equal(blk.tokens.begin(), blk.tokens.end(), own)) break;  // collision
    if (blk.refs++ == 0) lru_.erase(blk.lru_pos);
    out.push_back(it->second);
  }
  return out;
}

void BlockPool::Publish(const std::vector<int32_t>& blocks, const int32_t* tokens, int num_full) {
  const std::vector<uint64_t> hashes = ChainHashes(tokens, num_full * block_size_);
  for (int i = 0; i < num_full && i < static_cast<int>(blocks.size()); ++i) {
    Block& blk = blocks_[blocks[i]];
    if (blk.cached || by_hash_.count(hashes[i])) continue;  // cached already, or an identical twin is
    blk.cached = true;
    blk.hash = hashes[i];
    blk.gen = next_gen_++;
    blk.tokens.assign(tokens + i * block_size_, tokens + (i + 1) * block_size_);
    blk.parent = i == 0 ? -1 : blocks[i - 1];
    blk.parent_gen = i == 0 ? 0 : blocks_[blocks[i - 1]].gen;
    by_hash_[hashes[i]] = blocks[i];
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
