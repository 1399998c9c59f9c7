// Counters of the KV tiers (kv/kv_tiers.h), as EngineStats and /metrics report them.
#pragma once
#include <cstddef>
#include <cstdint>

namespace deepinfer {

struct KvTierStats {
  bool enabled = false;
  // Blocks served by each tier on a prefix-cache miss of the pool, and their bytes (K/V and tokens).
  int64_t ram_hits = 0, disk_hits = 0;
  int64_t ram_bytes_read = 0, disk_bytes_read = 0;
  // Blocks written through and their bytes; offers dropped because the writer was behind (never blocks the engine).
  int64_t ram_bytes_written = 0, disk_bytes_written = 0;
  int64_t ram_blocks_written = 0, disk_blocks_written = 0, dropped_offers = 0;
  // Loads that brought at least one block, and the seconds they took in all.
  int64_t loads = 0;
  double load_seconds = 0;  // from StartLoad to the last block written (queueing included)
  // Now: loads queued or running, and the requests waiting on them (the engine's count: several requests with
  // one prefix wait on one load).
  int64_t loads_in_flight = 0, loading_requests = 0;
  // Disk entries that failed validation on read (served as misses), write errors (a full disk), evictions.
  int64_t disk_rejected_reads = 0, disk_write_errors = 0, disk_evictions = 0;
  // Writes that found the disk full below --kv-store-size (the store then keeps below the size it had reached,
  // which disk_capacity reports).
  int64_t disk_full_events = 0;
  // The disk tier's start-up scan: files that failed validation (removed) and files of other models (left alone).
  int64_t disk_rejected_at_open = 0, disk_foreign_at_open = 0;
  // Sizes now.
  int64_t ram_entries = 0, disk_entries = 0;
  int64_t ram_bytes = 0, disk_bytes = 0;
  int64_t ram_capacity = 0, disk_capacity = 0;
};

}  // namespace deepinfer
