// Paged KV cache bookkeeping: a pool of fixed-size blocks with reference counts, and a prefix cache of full
// blocks keyed by a hash chain over their tokens (block i's key covers every token up to the end of block i),
// with LRU eviction of blocks nobody references. The pool is synchronous: when a block may still be read by a
// step in flight, the engine defers Release() until that step's fence has passed (docs/architecture.md).
#pragma once
#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer {

class BlockPool {
 public:
  BlockPool(int num_blocks, int block_size);

  int block_size() const { return block_size_; }
  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  // Blocks that can be handed out now: never used, or cached with no references (evictable).
  int num_available() const { return static_cast<int>(free_.size() + lru_.size()); }
  int num_cached() const { return static_cast<int>(by_hash_.size()); }

  // Takes n blocks (reference count 1 each), evicting least-recently-used cached blocks when the free list runs
  // out. ResourceExhausted-style OutOfRange error when fewer than n are available; nothing is taken then.
  StatusOr<std::vector<int32_t>> Allocate(int n);
  // Drops one reference from each block. A block at zero references returns to the free list, or, if it holds a
  // cached prefix, stays findable until evicted (most recently released = last evicted).
  void Release(const std::vector<int32_t>& blocks);

  // Chain hashes of the full blocks of `tokens` (a trailing partial block has none).
  std::vector<uint64_t> ChainHashes(const int32_t* tokens, int n) const;
  // The longest run of leading full blocks of `tokens` already in the cache; each returned block gains a
  // reference. Each block's own tokens and its link to the previous matched block are compared, not only the
  // hash, so a hash collision can never alias two prefixes.
  std::vector<int32_t> MatchPrefix(const int32_t* tokens, int n);
  // Publishes the first `num_full` blocks of a sequence (its block table `blocks`, filled with `tokens`) to the
  // prefix cache. Blocks already cached, or whose identical twin is, are left as they are.
  void Publish(const std::vector<int32_t>& blocks, const int32_t* tokens, int num_full);

  // Every block unreferenced (cached blocks count as free). Returns a description of the leak otherwise.
  Status CheckNoLeaks() const;
  int ref_count(int32_t block) const { return blocks_[block].refs; }

 private:
  struct Block {
    int refs = 0;
    bool cached = false;
    uint64_t hash = 0;
    std::vector<int32_t> tokens;  // this block's own tokens
    int32_t parent = -1;          // the cached block before it in the prefix (-1 for the first block)
    uint64_t parent_gen = 0;      // parent's generation when linked: a recycled parent no longer matches
    uint64_t gen = 0;             // bumped every time the block enters the cache
    std::list<int32_t>::iterator lru_pos;
  };
  void Uncache(int32_t b);

  int block_size_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;    // never cached or evicted
  std::list<int32_t> lru_;       // cached and unreferenced, least recently released first
  std::unordered_map<uint64_t, int32_t> by_hash_;
  uint64_t next_gen_ = 1;
};

}  // namespace deepinfer
