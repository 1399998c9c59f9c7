// The KV tiers behind the prefix cache (docs/architecture.md, "KV tiers and persistence"): a host-RAM tier
// (--kv-offload-ram) and a disk tier (--kv-store DIR, --kv-store-size) that keep prefix blocks after the pool
// has evicted them, and (disk) after the process has exited.
//
// Write-through: when the scheduler publishes a full block to the pool's prefix cache, Offer copies its tokens
// and K/V bytes into a recycled buffer and queues it; a writer thread stores it in RAM and on disk, so the
// engine thread never waits on a disk. Offers are dropped (and counted) when the queue is over its byte bound.
// Read: at admission, after the pool's own match, LoadPrefix continues the match block by block into RAM, then
// disk, loading each hit into a fresh pool block and publishing it there, so the request gets it as cached
// tokens. The load runs on the engine thread at admission (a synchronous first version: the batch waits for it).
// The blocks the pool itself matched are touched in the tiers (most recent), so that a prefix every request
// shares, served from the pool and never written again, is not the first the tiers evict.
//
// Keys are the prefix chain hashes salted with the model-identity digest (engine/kv_identity.h); every load
// also compares the block's tokens and its parent's chain hash, as the pool does.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "deepinfer/status.h"
#include "kv/block_pool.h"
#include "kv/kv_disk_tier.h"
#include "kv/kv_ram_tier.h"
#include "kv/kv_tier_stats.h"
#include "kv/paged_kv_cache.h"

namespace deepinfer {

class KvTiers {
 public:
  struct Options {
    size_t ram_bytes = 0;        // 0: no RAM tier
    std::string disk_dir;        // empty: no disk tier
    size_t disk_bytes = 0;       // the disk tier's capacity
    uint64_t model_digest = 0;
    size_t max_queue_bytes = 0;  // write-through backlog bound; 0: 64 blocks or 256 MiB, whichever is more
  };
  // `kv` (the engine's cache, which must outlive the tiers) is read at Offer and written at LoadPrefix, both on
  // the engine thread, and only in blocks no step in flight uses (published full blocks; fresh blocks).
  static StatusOr<std::unique_ptr<KvTiers>> Create(const Options& opt, PagedKvCache* kv);
  ~KvTiers();  // stores what is queued, then stops the writer

  // Engine thread: offers blocks [from, to) of a group-0 block table (full, published, K/V written) to the tiers.
  void Offer(const std::vector<int32_t>& table, const int32_t* tokens, int from, int to);
  // Engine thread: extends `table` (the pool's match for `tokens`, holding references) block by block from the
  // tiers while they hold the next block of this prefix, up to `max_blocks` blocks in all; each loaded block is
  // a fresh pool block (a reference held), published to the pool's prefix cache. Returns the blocks added.
  int LoadPrefix(BlockPool* pool, const int32_t* tokens, int max_blocks, std::vector<int32_t>* table);
  // Waits until every queued block is stored (tests; shutdown).
  void Flush();

  KvTierStats Stats() const;
  uint64_t model_digest() const { return opt_.model_digest; }

 private:
  KvTiers(const Options& opt, PagedKvCache* kv);
  void WriterLoop();
  std::vector<uint8_t> TakeBuffer();  // mu_ held
  // The tiers' copy of the block of this prefix into staging_, true on a hit (counted per tier).
  bool Fetch(uint64_t key, uint64_t chain, uint64_t parent, const int32_t* tokens);

  struct Job {
    enum class Kind {
      kStore,        // a published block (data) to write to the tiers that lack it
      kPromote,      // a disk hit to copy into RAM: the writer reads the file again (from the page cache), so the
                     // engine thread neither copies nor allocates for it
      kRefreshTime,  // a pool hit on a stored block: refresh its file's time (the order after a restart)
    };
    Kind kind;
    uint64_t key, chain, parent;
    std::vector<uint8_t> data;
  };
  Options opt_;
  PagedKvCache* kv_;
  const int block_size_;
  const size_t token_bytes_, entry_bytes_;
  std::unique_ptr<KvRamTier> ram_;
  std::unique_ptr<KvDiskTier> disk_;
  KvDiskTier::OpenReport open_report_;

  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<Job> queue_;
  size_t queued_bytes_ = 0;
  bool writing_ = false, stop_ = false;
  std::vector<std::vector<uint8_t>> spare_;  // recycled entry buffers
  std::thread writer_;

  // Engine thread only.
  std::vector<uint8_t> staging_, disk_scratch_;
  // Writer thread only.
  std::vector<uint8_t> promote_scratch_;

  std::atomic<int64_t> ram_hits_{0}, disk_hits_{0}, ram_read_{0}, disk_read_{0}, ram_written_{0}, disk_written_{0},
      ram_blocks_{0}, disk_blocks_{0}, dropped_{0}, loads_{0}, load_ns_{0};
};

}  // namespace deepinfer
