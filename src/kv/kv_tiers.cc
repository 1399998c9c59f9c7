#include "kv/kv_tiers.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>

#include "base/logging.h"
#include "kv/kv_tier_format.h"

namespace deepinfer {

KvTiers::KvTiers(const Options& opt, PagedKvCache* kv)
    : opt_(opt),
      kv_(kv),
      block_size_(kv->block_size()),
      token_bytes_(static_cast<size_t>(kv->block_size()) * sizeof(int32_t)),
      entry_bytes_(token_bytes_ + kv->block_bytes()) {
  if (opt_.max_queue_bytes == 0) opt_.max_queue_bytes = std::max<size_t>(64 * entry_bytes_, size_t{256} << 20);
  queue_slots_ = std::max<size_t>(1, opt_.max_queue_bytes / entry_bytes_);
}

StatusOr<std::unique_ptr<KvTiers>> KvTiers::Create(const Options& opt, PagedKvCache* kv) {
  std::unique_ptr<KvTiers> t(new KvTiers(opt, kv));
  if (opt.ram_bytes > 0) {
    if (opt.ram_bytes < t->entry_bytes_)
      return InvalidArgument("--kv-offload-ram " + std::to_string(opt.ram_bytes) + " bytes holds no KV block (one is " +
                             std::to_string(t->entry_bytes_) + " bytes)");
    DI_ASSIGN_OR_RETURN(t->ram_, KvRamTier::Create(opt.ram_bytes, t->entry_bytes_, opt.events));
  }
  if (!opt.disk_dir.empty()) {
    const size_t file_bytes = sizeof(DiskBlockHeader) + t->entry_bytes_;
    if (opt.disk_bytes < file_bytes)
      return InvalidArgument("--kv-store-size " + std::to_string(opt.disk_bytes) + " bytes holds no KV block (one file is " +
                             std::to_string(file_bytes) + " bytes)");
    KvDiskTier::OpenReport& rep = t->open_report_;
    DI_ASSIGN_OR_RETURN(t->disk_, KvDiskTier::Open(opt.disk_dir, opt.disk_bytes, opt.model_digest, &rep, opt.events));
    DI_LOG_INFO("kv store %s: %lld entries of this model found (%.1f MiB of %.1f MiB), %lld rejected and removed, "
                "%lld of other models left alone, %lld stale temporary files removed",
                opt.disk_dir.c_str(), static_cast<long long>(rep.entries), rep.bytes / 1048576.0,
                opt.disk_bytes / 1048576.0, static_cast<long long>(rep.rejected), static_cast<long long>(rep.foreign),
                static_cast<long long>(rep.temp_removed));
  }
  DI_ASSIGN_OR_RETURN(t->queue_arena_, HostBuffer::Allocate(t->queue_slots_ * t->entry_bytes_, /*huge_pages=*/true,
                                                            /*reserve_only=*/true));
  for (size_t q = t->queue_slots_; q-- > 0;) t->queue_free_.push_back(static_cast<int32_t>(q));
  DI_LOG_INFO("kv tiers: RAM %.1f MiB, disk %s (%.1f MiB); %zu bytes per block (%d tokens), model digest %016llx",
              opt.ram_bytes / 1048576.0, opt.disk_dir.empty() ? "off" : opt.disk_dir.c_str(), opt.disk_bytes / 1048576.0,
              t->entry_bytes_, t->block_size_, static_cast<unsigned long long>(opt.model_digest));
  t->writer_ = std::thread([p = t.get()] { p->WriterLoop(); });
  t->loader_ = std::thread([p = t.get()] { p->LoaderLoop(); });
  return t;
}

KvTiers::~KvTiers() {
  {  // the loader finishes what is queued first: a Load is never left without done
    std::lock_guard<std::mutex> lock(load_mu_);
    load_stop_ = true;
  }
  load_cv_.notify_all();
  if (loader_.joinable()) loader_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

void KvTiers::Offer(int group, const std::vector<int32_t>& table, const int32_t* tokens, int from, int to,
                    const std::vector<uint64_t>& chains) {
  to = std::min({to, static_cast<int>(table.size()), static_cast<int>(chains.size())});
  for (int i = from; i < to; ++i) {
    if (table[i] < 0) continue;
    const uint64_t parent = i == 0 ? 0 : chains[i - 1], chain = chains[i];
    const uint64_t stored_chain = TierGroupChain(chain, group);
    const uint64_t key = TierKey(opt_.model_digest, stored_chain);
    // A block every tier holds already (one loaded from them, or another request's twin) costs no copy.
    if ((!ram_ || ram_->Contains(key)) && (!disk_ || disk_->Contains(key))) continue;
    Job job{Job::Kind::kStore, key, stored_chain, parent, -1, static_cast<uint32_t>(group)};
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_free_.empty()) {
        ++dropped_;  // the writer is behind: never stall the engine for it
        continue;
      }
      job.slot = queue_free_.back();
      queue_free_.pop_back();
    }
    // The slot is this offer's until the writer frees it: filled outside the lock.
    uint8_t* entry = queue_slot(job.slot);
    std::memcpy(entry, tokens + static_cast<size_t>(i) * block_size_, token_bytes_);
    kv_->ReadBlock(table[i], entry + token_bytes_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(job));
    }
    cv_.notify_one();
  }
}

void KvTiers::WriterLoop() {
  bool dir_dirty = false;  // files renamed since the directory was last fsynced
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (queue_.empty() && dir_dirty) {  // a burst is stored: make its renames durable, once
      lock.unlock();
      disk_->SyncDirectory();
      dir_dirty = false;
      lock.lock();
      continue;
    }
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) break;  // stop_ and nothing left to store
    Job job = queue_.front();
    queue_.pop_front();
    writing_ = true;
    lock.unlock();
    if (job.kind == Job::Kind::kRefreshTime) {
      disk_->RefreshTime(job.key);
    } else if (job.kind == Job::Kind::kPromote) {
      // Validated again as any read is (another server may have replaced or removed the file meanwhile), then
      // copied from the read buffer into a RAM slot.
      if (!ram_->Contains(job.key) &&
          disk_->Get(job.key, job.chain, job.parent, nullptr, 0, nullptr, entry_bytes_, &promote_scratch_) &&
          ram_->Put(job.key, job.parent, promote_scratch_.data() + sizeof(DiskBlockHeader), job.group == 0 ? job.chain : 0)) {
        ram_written_ += static_cast<int64_t>(entry_bytes_);
        ++ram_blocks_;
      }
    } else {
      const uint8_t* entry = queue_slot(job.slot);
      if (disk_) {
        const size_t w =
            disk_->Put(job.key, job.chain, job.parent, static_cast<uint32_t>(block_size_), entry, entry_bytes_, job.group);
        if (w > 0) {
          dir_dirty = true;
          disk_written_ += static_cast<int64_t>(w);
          ++disk_blocks_;
        }
      }
      if (ram_ && ram_->Put(job.key, job.parent, entry, job.group == 0 ? job.chain : 0)) {
        ram_written_ += static_cast<int64_t>(entry_bytes_);
        ++ram_blocks_;
      }
    }
    lock.lock();
    if (job.kind == Job::Kind::kStore) queue_free_.push_back(job.slot);
    if (job.kind == Job::Kind::kPromote) --promotes_queued_;
    writing_ = false;
    if (queue_.empty()) idle_cv_.notify_all();
  }
  writing_ = false;
  idle_cv_.notify_all();
}

void KvTiers::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && !writing_; });
}

bool KvTiers::Fetch(int group, uint64_t key, uint64_t chain, uint64_t parent, const int32_t* tokens, int32_t block,
                    bool* from_ram) {
  const auto* tok = reinterpret_cast<const uint8_t*>(tokens);
  *from_ram = false;
  // A fresh block: no step reads it until FinishLoad publishes it and a request is admitted with it. The RAM
  // entry is written into it straight from its slot, the disk entry from the read buffer.
  if (ram_ && ram_->Read(key, parent, tok, token_bytes_,
                         [&](const uint8_t* entry) { kv_->WriteBlock(block, entry + token_bytes_); })) {
    ++ram_hits_;
    ram_read_ += static_cast<int64_t>(entry_bytes_);
    *from_ram = true;
    return true;
  }
  if (disk_ && disk_->Get(key, chain, parent, tok, token_bytes_, nullptr, entry_bytes_, &disk_scratch_)) {
    kv_->WriteBlock(block, disk_scratch_.data() + sizeof(DiskBlockHeader) + token_bytes_);
    ++disk_hits_;
    disk_read_ += static_cast<int64_t>(entry_bytes_ + sizeof(DiskBlockHeader));
    if (ram_) {  // promote (on the writer thread): the pool's next miss of it finds it in RAM
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (promotes_queued_ >= queue_slots_) return true;  // behind: skip the promotion
        ++promotes_queued_;
        queue_.push_back(Job{Job::Kind::kPromote, key, chain, parent, -1, static_cast<uint32_t>(group)});
      }
      cv_.notify_one();
    }
    return true;
  }
  return false;
}

uint64_t KvTiers::Key(int group, uint64_t chain) const {
  return TierKey(opt_.model_digest, TierGroupChain(chain, group));
}

bool KvTiers::Held(uint64_t key) const {
  return (ram_ && ram_->Contains(key)) || (disk_ && disk_->Contains(key));
}

void KvTiers::TouchMatched(const BlockPool& pool, const std::vector<std::vector<int32_t>>& tables) {
  const std::vector<int32_t>& table = tables[0];
  const int start = static_cast<int>(table.size());
  // The pool's hits are touched in the tiers too: a prefix every request shares is served from the pool and never
  // written again, and without this it would be the first the tiers evict (and the oldest file after a restart).
  // A prefix whose first block the tiers do not hold was never stored or is gone: nothing to touch, and the
  // admission path skips the lookups. Group 0's cached keys are the chain hashes, which name the other full
  // groups' blocks of the same positions too (as far as group 0's match goes).
  if (start == 0 || !Held(Key(0, pool.cached_key(table[0])))) return;
  std::vector<uint64_t> keys;
  for (size_t g = 0; g < tables.size(); ++g) {
    const int n = std::min(start, static_cast<int>(tables[g].size()));
    for (int i = 0; i < n; ++i) keys.push_back(Key(static_cast<int>(g), pool.cached_key(table[i])));
  }
  Touch(keys);
}

void KvTiers::Touch(const std::vector<uint64_t>& keys) {
  std::vector<Job> refresh;
  for (const uint64_t key : keys) {
    if (ram_) ram_->Touch(key);
    // The file's time orders eviction after a restart; the writer refreshes it (the chain is not needed).
    if (disk_ && disk_->Touch(key)) refresh.push_back(Job{Job::Kind::kRefreshTime, key, 0, 0});
  }
  if (refresh.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Job& j : refresh) queue_.push_back(std::move(j));
  }
  cv_.notify_one();
}

std::shared_ptr<KvTiers::Load> KvTiers::StartLoad(BlockPool* pool, const int32_t* tokens, LoadPlan plan,
                                                  std::vector<std::vector<int32_t>>* tables) {
  const int fresh = plan.end - plan.start + static_cast<int>(plan.windows.size());
  // The pinned blocks are cached and unreferenced (available) until held: counted with the fresh ones.
  if (fresh <= 0 || fresh + static_cast<int>(plan.pinned.size()) > pool->num_available()) return nullptr;
  auto load = std::make_shared<Load>();
  for (const int32_t b : plan.pinned) pool->Acquire(b);  // before the allocations, which may evict cached blocks
  load->held = std::move(plan.pinned);
  for (size_t g = 1; g < tables->size(); ++g) {
    std::vector<int32_t>& t = (*tables)[g];
    load->held.insert(load->held.end(), t.begin(), t.end());
    t.clear();
  }
  load->table = std::move((*tables)[0]);
  (*tables)[0].clear();
  // Free or evicted blocks: no step in flight reads them.
  if (plan.end > plan.start) {
    auto got = pool->Allocate(plan.end - plan.start, 0);  // counted above: cannot fail
    load->table.insert(load->table.end(), got->begin(), got->end());
  }
  for (const LoadPlan::Window& w : plan.windows) {
    auto got = pool->Allocate(1, w.group);
    if (!got.ok()) {  // not reached (counted above); the load goes on without this window
      continue;
    }
    load->windows.push_back(Load::WindowBlock{w.group, w.index, w.chained, (*got)[0]});
  }
  load->tokens.assign(tokens, tokens + plan.chains.size() * static_cast<size_t>(block_size_));
  load->chains = std::move(plan.chains);
  load->start = plan.start;
  load->key = plan.key;
  load->began = std::chrono::steady_clock::now();
  ++loads_in_flight_;
  {
    std::lock_guard<std::mutex> lock(load_mu_);
    load_queue_.push_back(load);
  }
  load_cv_.notify_one();
  return load;
}

void KvTiers::LoaderLoop() {
  std::unique_lock<std::mutex> lock(load_mu_);
  for (;;) {
    load_cv_.wait(lock, [&] { return load_stop_ || !load_queue_.empty(); });
    if (load_queue_.empty()) break;  // stopping and nothing left
    std::shared_ptr<Load> load = std::move(load_queue_.front());
    load_queue_.pop_front();
    lock.unlock();
    if (opt_.before_load) opt_.before_load();
    RunLoad(load.get());
    lock.lock();
    loads_completed_.fetch_add(1, std::memory_order_release);
    load_done_cv_.notify_all();
    if (opt_.on_load_done) {
      lock.unlock();
      opt_.on_load_done();
      lock.lock();
    }
  }
}

void KvTiers::RunLoad(Load* load) {
  const int n = static_cast<int>(load->table.size());
  int loaded = 0, from_ram = 0, windows_loaded = 0;
  // The blocks in the order they are read: group 0's, then the other groups'. The disk files of the next
  // kPrefetch are handed to the kernel's readahead ahead of their turn, so a load from a cold page cache keeps
  // several reads in flight rather than one (the files RAM holds are skipped).
  std::vector<uint64_t> order;
  for (int i = load->start; i < n; ++i) order.push_back(Key(0, load->chains[i]));
  for (const Load::WindowBlock& w : load->windows) order.push_back(Key(w.group, load->chains[w.index]));
  constexpr size_t kPrefetch = 16;
  size_t next = 0, prefetched = 0;
  auto fetch = [&](int group, int i, int32_t block) {
    if (disk_)
      for (; prefetched < std::min(order.size(), next + kPrefetch); ++prefetched)
        if (!ram_ || !ram_->Contains(order[prefetched])) disk_->Prefetch(order[prefetched]);
    ++next;
    const int32_t* own = load->tokens.data() + static_cast<size_t>(i) * block_size_;
    const uint64_t parent = i == 0 ? 0 : load->chains[i - 1];
    const uint64_t chain = TierGroupChain(load->chains[i], group);
    bool ram = false;
    if (!Fetch(group, TierKey(opt_.model_digest, chain), chain, parent, own, block, &ram)) return false;  // gone, or invalid
    from_ram += ram;
    return true;
  };
  for (int i = load->start; i < n && fetch(0, i, load->table[i]); ++i) ++loaded;
  // A window is published tied to group 0's block of its positions: one past what group 0 holds now is of no use.
  const int anchored = load->start + loaded;
  next = static_cast<size_t>(n - load->start);  // the windows' place in `order`
  prefetched = std::max(prefetched, next);      // group 0's files past a miss are never read: not prefetched
  for (Load::WindowBlock& w : load->windows)
    if (w.index < anchored && fetch(w.group, w.index, w.block)) {
      w.loaded = true;
      ++windows_loaded;
    }
  load->loaded = loaded;
  load->windows_loaded = windows_loaded;
  load->from_ram = from_ram;
  const int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - load->began).count();
  if (loaded + windows_loaded > 0) {
    ++loads_;
    load_ns_ += ns;
  }
  --loads_in_flight_;
  DI_LOG_DEBUG("kv tiers: prefix blocks %d..%d and %d of %zu window blocks loaded (%d from RAM, %d from disk) in "
               "%.3f ms (queued included)",
               load->start, load->start + loaded - 1, windows_loaded, load->windows.size(), from_ram,
               loaded + windows_loaded - from_ram, ns * 1e-6);
  load->done.store(true, std::memory_order_release);
}

std::vector<int32_t> KvTiers::FinishLoad(BlockPool* pool, Load* load) {
  std::vector<int32_t> table = std::move(load->table);
  const int kept = load->start + load->loaded;
  if (load->loaded > 0) pool->Publish(table, load->tokens.data(), kept, 0, load->start);
  pool->Release(std::vector<int32_t>(table.begin() + kept, table.end()));  // never filled: back to the free list
  table.resize(kept);
  // The other groups, group by group: windows tied to group 0's cached blocks (the match, or just published), full
  // groups' blocks chained to the group's cached prefix. Then released: the published ones stay in the prefix
  // cache, the rest return to the free list.
  std::vector<int32_t> windows;
  for (size_t a = 0; a < load->windows.size();) {
    const int g = load->windows[a].group;
    std::vector<int32_t> wt;
    int lo = INT32_MAX;
    size_t b = a;
    for (; b < load->windows.size() && load->windows[b].group == g; ++b) {
      const Load::WindowBlock& w = load->windows[b];
      windows.push_back(w.block);
      if (!w.loaded) continue;
      if (static_cast<int>(wt.size()) <= w.index) wt.resize(w.index + 1, -1);
      wt[w.index] = w.block;
      lo = std::min(lo, w.index);
    }
    if (!wt.empty())
      pool->Publish(wt, load->tokens.data(), static_cast<int>(wt.size()), g, lo, lo,
                    load->windows[a].chained ? nullptr : &table);
    a = b;
  }
  pool->Release(windows);
  pool->Release(load->held);
  load->held.clear();
  load->finished = true;
  return table;
}

void KvTiers::WaitForLoad(uint64_t seen) {
  std::unique_lock<std::mutex> lock(load_mu_);
  load_done_cv_.wait(lock, [&] { return loads_completed_.load(std::memory_order_relaxed) != seen; });
}

KvTierStats KvTiers::Stats() const {
  KvTierStats s;
  s.enabled = true;
  s.ram_hits = ram_hits_;
  s.disk_hits = disk_hits_;
  s.ram_bytes_read = ram_read_;
  s.disk_bytes_read = disk_read_;
  s.ram_bytes_written = ram_written_;
  s.disk_bytes_written = disk_written_;
  s.ram_blocks_written = ram_blocks_;
  s.disk_blocks_written = disk_blocks_;
  s.dropped_offers = dropped_;
  s.loads = loads_;
  s.loads_in_flight = loads_in_flight_;
  s.load_seconds = static_cast<double>(load_ns_.load()) * 1e-9;
  if (ram_) {
    s.ram_entries = static_cast<int64_t>(ram_->entries());
    s.ram_bytes = static_cast<int64_t>(ram_->bytes());
    s.ram_capacity = static_cast<int64_t>(ram_->capacity());
  }
  if (disk_) {
    s.disk_entries = static_cast<int64_t>(disk_->entries());
    s.disk_bytes = static_cast<int64_t>(disk_->bytes());
    s.disk_capacity = static_cast<int64_t>(disk_->effective_capacity());
    s.disk_rejected_reads = disk_->rejected_reads();
    s.disk_write_errors = disk_->write_errors();
    s.disk_evictions = disk_->evictions();
    s.disk_full_events = disk_->disk_full_events();
    s.disk_rejected_at_open = open_report_.rejected;
    s.disk_foreign_at_open = open_report_.foreign;
  }
  return s;
}

}  // namespace deepinfer
