// The disk tier of the KV store (--kv-store DIR, --kv-store-size): one file per prefix block, named by its tier
// key, least-recently-used first out when the files' bytes pass the capacity.
//
// Crash and sharing safety: a file is written to a unique temporary name, fsynced, then renamed over its final
// name (atomic on POSIX), and the directory is fsynced once per burst (SyncDirectory); so a reader, in this process or another server sharing
// the directory, sees either no file or a whole one, and a kill -9 leaves at most a stray temporary file. Every
// read validates the header (magic, version, model digest, chain and parent hash, sizes, header checksum) and
// the payload checksum: anything that does not validate is a miss, and the file is removed. At start-up (Open)
// each file's header is checked; files that fail are removed and counted as rejected, files of another model
// (another digest) or of another format version are left alone for whoever owns them and counted as foreign.
//
// A full disk: a write that fails with ENOSPC or EDQUOT below the capacity evicts the least recent entries and
// retries once, and the store then keeps below the size it had reached (effective_capacity, never under four
// entries) until five minutes pass without a full disk: the service degrades to a smaller store, logged once and
// counted (disk_full_events), and never fails a request.
//
// Thread-safe: the tiers' writer thread stores and evicts, the engine thread reads.
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "deepinfer/status.h"
#include "kv/kv_event_log.h"

namespace deepinfer {

struct DiskBlockHeader;  // kv/kv_tier_format.h

class KvDiskTier {
 public:
  struct OpenReport {
    int64_t entries = 0, rejected = 0, foreign = 0, temp_removed = 0;
    size_t bytes = 0;
  };
  // Creates the directory if needed and indexes the valid entries of `model_digest` (oldest file = least
  // recent). Entries beyond the capacity are evicted now. Group 0's entries are announced to `events`
  // (KvMedium::kDisk; null: nowhere): those found here, then each stored and each removed.
  static StatusOr<std::unique_ptr<KvDiskTier>> Open(const std::string& dir, size_t capacity_bytes,
                                                    uint64_t model_digest, OpenReport* report,
                                                    KvEventLog* events = nullptr);

  const std::string& dir() const { return dir_; }
  size_t capacity() const { return capacity_; }
  // Writes one entry (data = tokens then K/V bytes, of which the first `token_bytes` are the tokens) and evicts
  // least-recent files past the capacity. Returns the bytes written (0: present already, too large, or an I/O
  // error, which is logged once and counted).
  size_t Put(uint64_t key, uint64_t chain_hash, uint64_t parent_hash, uint32_t num_tokens, const uint8_t* data,
             size_t n, uint32_t group = 0);
  // Makes the renames so far durable (fsync of the directory). Put leaves it to the caller so that a burst of
  // writes pays for it once: until then a crash can lose the newest entries (misses), never tear one.
  void SyncDirectory();
  // Reads and validates the entry (n bytes): true only when it is whole, of this model, of this prefix (chain and
  // parent hash, and the leading prefix_n bytes equal `prefix`). A file that fails is removed. `scratch` is the
  // caller's reusable buffer, which holds the file on return: the entry is copied to out[0, n), or, with a null
  // `out`, left at scratch->data() + sizeof(DiskBlockHeader) (one copy fewer).
  bool Get(uint64_t key, uint64_t chain_hash, uint64_t parent_hash, const uint8_t* prefix, size_t prefix_n,
           uint8_t* out, size_t n, std::vector<uint8_t>* scratch);
  bool Contains(uint64_t key) const;
  // Marks the entry most recent (the pool served this block). Returns true when its file's modification time,
  // which orders the entries after a restart, should be refreshed (RefreshTime, off the engine thread): at most
  // once a minute per entry, so a hot prefix costs no system call per request.
  bool Touch(uint64_t key);
  void RefreshTime(uint64_t key) const;
  // Asks the kernel to start reading the entry's file into the page cache (posix_fadvise WILLNEED), so that a
  // load's next reads overlap instead of waiting on the disk one file at a time. Nothing if absent.
  void Prefetch(uint64_t key) const;

  size_t bytes() const;
  size_t entries() const;
  int64_t rejected_reads() const;  // reads that failed validation (corrupt, truncated, vanished)
  int64_t write_errors() const;
  int64_t evictions() const;
  int64_t disk_full_events() const;  // writes that found the disk full (ENOSPC, EDQUOT)
  size_t effective_capacity() const;  // the capacity, or less once the disk was found full

 private:
  KvDiskTier(std::string dir, size_t capacity, uint64_t digest, KvEventLog* events)
      : dir_(std::move(dir)), capacity_(capacity), digest_(digest), events_(events) {}
  std::string PathOf(uint64_t key) const;
  void Forget(uint64_t key);  // drops the index entry, reported removed (mu_ held)
  // Drops least-recent index entries until the stored bytes are at most `limit` (mu_ held); returns their keys,
  // whose files the caller unlinks after releasing mu_.
  std::vector<uint64_t> EvictDownTo(size_t limit);
  void Unlink(const std::vector<uint64_t>& keys) const;
  // temp -> fsync -> rename; false with *err the failing step's errno.
  bool WriteFile(const std::string& path, const DiskBlockHeader& h, const uint8_t* data, size_t n, int* err);

  struct Entry {
    size_t bytes = 0;
    std::list<uint64_t>::iterator lru_pos;
    int64_t time_s = INT64_MIN / 2;  // steady seconds of the file's last write or time refresh (found at Open: never)
    uint64_t reported_hash = 0;      // group 0's entry: its chain hash, announced to events_ (0: not reported)
  };
  const std::string dir_;
  const size_t capacity_;
  const uint64_t digest_;
  KvEventLog* const events_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Entry> map_;
  std::list<uint64_t> lru_;  // least recent first
  size_t bytes_ = 0;
  int64_t rejected_reads_ = 0, write_errors_ = 0, evictions_ = 0, disk_full_events_ = 0;
  bool found_full_ = false;
  size_t full_limit_ = 0;  // while found_full_: the store's bound
  int64_t full_at_s_ = 0;  // steady seconds of the last full-disk write
  uint64_t temp_seq_ = 0;
};

}  // namespace deepinfer
