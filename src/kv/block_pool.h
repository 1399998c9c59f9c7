// Paged KV cache bookkeeping: a pool of fixed-size blocks with reference counts, and a prefix cache of full
// blocks keyed by a hash chain over their tokens (block i's key covers every token up to the end of block i),
// with LRU eviction of blocks nobody references. A hybrid KV cache (kv/kv_layout.h) draws every KV group's
// blocks from this one pool: each block is tagged with the group it serves, and a group's prefixes are cached
// under keys of their own (group 0 keeps the plain chain hash, which also names a prefix across replicas). The pool is synchronous: when a block may still be read by a
// step in flight, the engine defers Release() until that step's fence has passed (docs/architecture.md).
#pragma once
#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer {

class KvEventLog;

class BlockPool {
 public:
  BlockPool(int num_blocks, int block_size);

  int block_size() const { return block_size_; }
  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  // Blocks that can be handed out now: never used, or cached with no references (evictable).
  int num_available() const { return static_cast<int>(free_.size() + lru_.size()); }
  int num_cached() const { return static_cast<int>(by_hash_.size()); }
  // MTP speculation: the module's K/V at a block's last position pairs it with the next block's first token, so a
  // cached block is linked only to its own sequence's previous block (Publish), never to another request's twin
  // that went on with a different token: a chain found by MatchPrefix then holds one continuation's pairs.
  void set_link_own_blocks_only(bool on) { link_own_blocks_only_ = on; }

  // Takes n blocks (reference count 1 each), evicting least-recently-used cached blocks when the free list runs
  // out. ResourceExhausted-style OutOfRange error when fewer than n are available; nothing is taken then.
  // `group`: the KV group the blocks serve (per-group usage counters, cache keys).
  StatusOr<std::vector<int32_t>> Allocate(int n, int group = 0);
  // Drops one reference from each block. A block at zero references returns to the free list, or, if it holds a
  // cached prefix, stays findable until evicted (most recently released = last evicted).
  void Release(const std::vector<int32_t>& blocks);
  // As Release, but a block left with no reference leaves the prefix cache for the free list at once (a window
  // block no checkpoint keeps: Scheduler::Slide). One still referenced (a sibling sharing it) stays as it is.
  void ReleaseUncached(const std::vector<int32_t>& blocks);

  // Chain hashes of the full blocks of `tokens` (a trailing partial block has none).
  std::vector<uint64_t> ChainHashes(const int32_t* tokens, int n) const;
  // The longest run of leading full blocks of `tokens` already in the cache; each returned block gains a
  // reference. Each block's own tokens and its link to the previous matched block are compared, not only the
  // hash, so a hash collision can never alias two prefixes.
  std::vector<int32_t> MatchPrefix(const int32_t* tokens, int n, int group = 0);
  // Publishes blocks [from, num_full) of a sequence's block table of `group` (`blocks`, filled with `tokens`) to
  // the prefix cache. Blocks already cached, or whose identical twin is, are left as they are. Entries below
  // `held_from` were released by the sequence (a sliding window): they are not published, and a block after
  // one is linked to it only while it is still cached as that very prefix (else publication stops there).
  // `twins` (a sliding-window group with a full-attention anchor): the sequence's anchor table; block i is then
  // published only when twins[i] is the anchor's cached block for the same prefix, and is tied to it (its id and
  // generation): FindWindowBlock finds it without the chain before it, which a window no longer holds. A negative
  // entry (a block a tier load missed) is skipped; the block after it links to the one cached under the previous
  // prefix's key, if any.
  void Publish(const std::vector<int32_t>& blocks, const int32_t* tokens, int num_full, int group = 0, int from = 0,
               int held_from = 0, const std::vector<int32_t>* twins = nullptr);
  // The cached block of window group `group` for the prefix whose block ends with `tokens` (chain hash `hash`),
  // tied to the anchor's cached block `twin` as it is now; -1 if none. Takes no reference (Acquire does).
  int32_t FindWindowBlock(int group, uint64_t hash, const int32_t* tokens, int32_t twin) const;
  // One more reference to a block (a cached one leaves the LRU).
  void Acquire(int32_t block);
  // Tests: evicts every cached, unreferenced block of the groups `evict(group)` selects, as memory pressure would.
  template <typename Pred>
  void EvictCached(Pred evict) {
    for (auto it = lru_.begin(); it != lru_.end();) {
      const int32_t b = *it;
      if (!evict(blocks_[b].group)) {
        ++it;
        continue;
      }
      Uncache(b);
      it = lru_.erase(it);
      free_.push_back(b);
    }
  }

  // Where group 0's blocks entering and leaving the prefix cache are reported (GET /v1/kv_events); null: nowhere.
  // Group 0 only: its keys are the plain chain hashes a router can compute from token ids, and in a hybrid cache
  // it is the full-attention anchor a prefix hit starts from.
  void set_event_log(KvEventLog* log) { events_ = log; }

  // Blocks of group g referenced now, and the most since the last ResetPeaks (tests, bench, logs).
  int in_use(int group) const { return group < static_cast<int>(in_use_.size()) ? in_use_[group] : 0; }
  int peak(int group) const { return group < static_cast<int>(peak_.size()) ? peak_[group] : 0; }
  void ResetPeaks() { peak_ = in_use_; }

  // Every block unreferenced (cached blocks count as free). Returns a description of the leak otherwise.
  Status CheckNoLeaks() const;
  int ref_count(int32_t block) const { return blocks_[block].refs; }
  // The key a cached block is found by: for group 0, the chain hash of the prefix it ends (ChainHashes).
  uint64_t cached_key(int32_t block) const { return blocks_[block].hash; }

 private:
  struct Block {
    int refs = 0;
    int group = 0;
    bool cached = false;
    uint64_t hash = 0;
    std::vector<int32_t> tokens;  // this block's own tokens
    int32_t parent = -1;          // the cached block before it in the prefix (-1 for the first block)
    uint64_t parent_gen = 0;      // parent's generation when linked: a recycled parent no longer matches
    uint64_t gen = 0;             // bumped every time the block enters the cache
    int32_t twin = -1;            // window groups: the anchor's cached block for the same prefix
    uint64_t twin_gen = 0;        // its generation when tied
    std::list<int32_t>::iterator lru_pos;
  };
  void Uncache(int32_t b);
  void Referenced(int32_t b);    // refs went 0 -> 1
  void Unreferenced(int32_t b);  // refs went 1 -> 0
  static uint64_t Key(uint64_t chain_hash, int group);

  int block_size_;
  bool link_own_blocks_only_ = false;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;    // never cached or evicted
  std::list<int32_t> lru_;       // cached and unreferenced, least recently released first
  std::unordered_map<uint64_t, int32_t> by_hash_;
  uint64_t next_gen_ = 1;
  std::vector<int> in_use_, peak_;  // per group
  KvEventLog* events_ = nullptr;
};

}  // namespace deepinfer
