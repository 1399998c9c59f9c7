// The KV tiers behind the prefix cache (docs/architecture.md, "KV tiers and persistence"): a host-RAM tier
// (--kv-offload-ram) and a disk tier (--kv-store DIR, --kv-store-size) that keep prefix blocks after the pool
// has evicted them, and (disk) after the process has exited.
//
// Write-through: when the scheduler publishes a full block to the pool's prefix cache, Offer copies its tokens
// and K/V bytes into a slot of the queue's arena and queues it; a writer thread stores it in RAM and on disk, so
// the engine thread never waits on a disk. Offers are dropped (and counted) when no queue slot is free.
// Read: at admission, after the pool's own match, StartLoad checks whether the tiers hold the prefix's next blocks;
// if so it takes fresh pool blocks for them and queues a Load, and the request waits in a loading state while the
// step loop goes on without it (the batch never waits on a disk). A loader thread of its own (so reads never queue
// behind write-through) copies each block from RAM, else disk, into its pool block; the scheduler then publishes
// them to the pool's prefix cache (FinishLoad), and the request is admitted with them as cached tokens (vLLM's
// WAITING_FOR_REMOTE_KVS, SGLang HiCache's prefetch). The blocks the pool itself matched are touched in the tiers
// (most recent), so that a prefix every request shares, served from the pool and never written again, is not the
// first the tiers evict.
//
// Keys are the prefix chain hashes salted with the model-identity digest (engine/kv_identity.h); every load
// also compares the block's tokens and its parent's chain hash, as the pool does.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "deepinfer/status.h"
#include "kv/block_pool.h"
#include "kv/kv_disk_tier.h"
#include "kv/kv_event_log.h"
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
    // Called on the loader thread after each load completes (the engine wakes its loop with it).
    std::function<void()> on_load_done;
    // Tests: called on the loader thread before each load, to hold loads in flight while steps run.
    std::function<void()> before_load;
    // Where group 0's entries entering and leaving each tier are reported (GET /v1/kv_events: a router counts a
    // tier hit as a hit); null: nowhere. Must outlive the tiers.
    KvEventLog* events = nullptr;
  };

  // What a load reads, planned by the scheduler (which owns the hit rule): group 0's blocks [start, end) past the
  // pool's match and, in a hybrid cache, other groups' blocks: windowed groups' (each tied to group 0's block of
  // the same positions), so that a hit finds the windows it resumes from rather than recomputing them, and other
  // full-attention groups' (chained, as group 0's).
  struct LoadPlan {
    int start = 0, end = 0;
    std::vector<uint64_t> chains;  // the prefix's chain hashes, at least through `end` and every window entry
    struct Window {
      int group, index;
      bool chained;  // a full-attention group's block (published by chain), else a window's (tied to group 0's)
    };
    std::vector<Window> windows;
    std::vector<int32_t> pinned;  // pool blocks the plan relies on (windows the hit resumes from): held by the load
    uint64_t key = 0;             // names the load: requests that would start an equal one wait on it instead
  };
  // A prefix load: StartLoad (engine thread) queues it, the loader thread fills its fresh blocks and sets done,
  // FinishLoad (engine thread) publishes them. Shared so that several requests with the same prefix wait on one.
  struct Load {
    std::vector<int32_t> table;   // group 0, references held: the pool's match [0, start), then the fresh blocks
    std::vector<int32_t> tokens;  // the prefix's tokens, chains.size() blocks of them
    std::vector<uint64_t> chains;
    struct WindowBlock {
      int group, index;
      bool chained;
      int32_t block;  // fresh, reference held until FinishLoad
      bool loaded = false;
    };
    std::vector<WindowBlock> windows;
    std::vector<int32_t> held;  // references to release at FinishLoad: other full groups' matches, pinned blocks
    int start = 0;
    uint64_t key = 0;  // LoadPlan::key
    std::chrono::steady_clock::time_point began;
    int loaded = 0, from_ram = 0;  // group 0 blocks filled from `start` on (a miss ends them); written before done
    int windows_loaded = 0;
    std::atomic<bool> done{false};
    bool finished = false;  // engine thread: FinishLoad ran
  };
  // `kv` (the engine's cache, which must outlive the tiers) is read at Offer (engine thread) and written by the
  // loader thread, only in blocks no step in flight uses (published full blocks; a load's fresh blocks).
  static StatusOr<std::unique_ptr<KvTiers>> Create(const Options& opt, PagedKvCache* kv);
  ~KvTiers();  // finishes the queued loads, stores what is queued, then stops both threads

  // Engine thread: offers blocks [from, to) of one KV group's block table (full, published, K/V written; entries
  // below 0 are blocks a sliding window released, skipped) to the tiers. `chains`: the prefix's chain hashes
  // (PrefixChainHashes of `tokens`, at least `to` of them).
  void Offer(int group, const std::vector<int32_t>& table, const int32_t* tokens, int from, int to,
             const std::vector<uint64_t>& chains);
  // Engine thread, at admission: the pool's matches (`tables`: each full group's, by chain) are touched in the
  // tiers (most recent).
  void TouchMatched(const BlockPool& pool, const std::vector<std::vector<int32_t>>& tables);
  // Engine thread: entries (Key) the pool served, touched in the tiers (a hit's windows).
  void Touch(const std::vector<uint64_t>& keys);
  // The tier key of group `group`'s block ending the prefix with chain hash `chain`, and whether a tier holds it
  // (by key only: a load validates what it reads).
  uint64_t Key(int group, uint64_t chain) const;
  bool Held(uint64_t key) const;
  // Engine thread, at admission: `tables` are the pool's matches for `tokens` (references held; group 0's size is
  // plan.start). Takes fresh pool blocks for the plan (nothing when the pool cannot give them all) and queues the
  // load, which then owns every table's references (the tables are left empty), the pinned blocks' and the
  // fresh blocks. Null, with `tables` untouched, when nothing started.
  std::shared_ptr<Load> StartLoad(BlockPool* pool, const int32_t* tokens, LoadPlan plan,
                                  std::vector<std::vector<int32_t>>* tables);
  // Engine thread, once load->done: publishes the loaded blocks to the pool's prefix cache (windows tied to group
  // 0's blocks, other full groups' by chain) and returns group 0's blocks the load held (the match and the loaded ones, still referenced; the
  // caller releases them) after giving back the blocks a miss left unfilled.
  std::vector<int32_t> FinishLoad(BlockPool* pool, Load* load);
  // Loads completed since start (a wait key: WaitForLoad(seen) returns once it has moved past `seen`).
  uint64_t loads_completed() const { return loads_completed_.load(std::memory_order_acquire); }
  void WaitForLoad(uint64_t seen);
  // Waits until every queued block is stored (tests; shutdown).
  void Flush();

  KvTierStats Stats() const;
  uint64_t model_digest() const { return opt_.model_digest; }

 private:
  KvTiers(const Options& opt, PagedKvCache* kv);
  void WriterLoop();
  void LoaderLoop();
  void RunLoad(Load* load);  // loader thread
  // The tiers' copy of the block of this prefix written into pool block `block` (loader thread), true on a hit
  // (counted per tier; *from_ram says which). A miss may leave the block partly written (it is fresh: unused).
  bool Fetch(int group, uint64_t key, uint64_t chain, uint64_t parent, const int32_t* tokens, int32_t block,
             bool* from_ram);
  uint8_t* queue_slot(int32_t s) { return queue_arena_->data() + static_cast<size_t>(s) * entry_bytes_; }

  struct Job {
    enum class Kind {
      kStore,        // a published block (data) to write to the tiers that lack it
      kPromote,      // a disk hit to copy into RAM: the writer reads the file again (from the page cache), so the
                     // loader neither copies nor waits for it
      kRefreshTime,  // a pool hit on a stored block: refresh its file's time (the order after a restart)
    };
    Kind kind;
    uint64_t key, chain, parent;
    int32_t slot = -1;  // kStore: the queue slot holding the entry
    uint32_t group = 0;  // the KV group (group 0's entries are reported to the KV events)
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
  // Write-through entries wait in the slots of one arena (max_queue_bytes of them, huge pages): an offer finds a
  // free slot or is dropped, and no entry is ever allocated. Promotions (no data) are bounded by the same count.
  std::unique_ptr<HostBuffer> queue_arena_;
  std::vector<int32_t> queue_free_;
  size_t queue_slots_ = 0, promotes_queued_ = 0;
  bool writing_ = false, stop_ = false;
  std::thread writer_;

  // The loader: its queue, and loads_completed_ (bumped under load_mu_ so that WaitForLoad cannot miss it).
  std::mutex load_mu_;
  std::condition_variable load_cv_, load_done_cv_;
  std::deque<std::shared_ptr<Load>> load_queue_;
  bool load_stop_ = false;
  std::atomic<uint64_t> loads_completed_{0};
  std::atomic<int64_t> loads_in_flight_{0};
  std::thread loader_;
  // Loader thread only.
  std::vector<uint8_t> disk_scratch_;
  // Writer thread only.
  std::vector<uint8_t> promote_scratch_;

  std::atomic<int64_t> ram_hits_{0}, disk_hits_{0}, ram_read_{0}, disk_read_{0}, ram_written_{0}, disk_written_{0},
      ram_blocks_{0}, disk_blocks_{0}, dropped_{0}, loads_{0}, load_ns_{0};
};

}  // namespace deepinfer
