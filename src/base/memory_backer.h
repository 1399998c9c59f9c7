// Backs anonymous memory with pages ahead of its first write, on a thread of its own (MADV_POPULATE_WRITE).
//
// Why: a buffer written a little at a time, as the KV cache is step by step, otherwise pays its page faults inside
// the steps that first reach each page. With transparent huge pages every layer's plane crosses into a new 2 MiB
// page at the same step (the f32 KV of a Llama-3.2-1B does every 1024 tokens), and on a VM whose host backs guest
// memory on first touch that step ran 1.5-2x its time, with both compute threads waiting on the faulting one
// (docs/benchmarks.md, "Session 16"). Backing it all before serving instead took 19.6 s for a 5.7 GiB pool there
// (~0.3 GB/s for memory the VM had not touched yet), so it runs beside the engine, in the order the memory will be
// used: the thread's time is what the steps would have spent faulting, without stalling a step on it.
// MADV_POPULATE_WRITE never changes what a page holds, so the owner may write the memory meanwhile; a kernel
// without it (before 5.14) leaves the pages to be backed on first write, as before. It stops short of the last
// GiB of RAM (or 5%, if more): several processes sizing pools from the same MemAvailable must not commit more
// than the machine has just because the pools got backed early.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer {

// Backs [p, p + bytes) now, on the calling thread. Unimplemented on a kernel without MADV_POPULATE_WRITE; an
// I/O error when the memory cannot be had (ENOMEM).
Status PopulateWrite(void* p, size_t bytes);

class MemoryBacker {
 public:
  // Inside a page-aligned mapping (a HostBuffer): a range's first page is backed from its start.
  struct Range {
    uint8_t* data;
    size_t bytes;
  };
  // Starts backing `ranges`, in that order; `what` names the memory in the log.
  MemoryBacker(std::vector<Range> ranges, std::string what);
  // Stops after the piece in progress (at most kPieceBytes) and joins: the memory may be unmapped after this.
  ~MemoryBacker();
  MemoryBacker(const MemoryBacker&) = delete;
  MemoryBacker& operator=(const MemoryBacker&) = delete;

  // Blocks until every range is backed, or backing stopped: its status (Unimplemented: an old kernel; OutOfRange:
  // RAM ran low; an I/O error: the kernel refused the memory).
  Status Wait();

  // Pieces small enough that the destructor never waits long, large enough to cover whole huge pages.
  static constexpr size_t kPieceBytes = size_t{4} << 20;

 private:
  void Run();

  std::vector<Range> ranges_;
  std::string what_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable done_cv_;
  bool done_ = false;  // under mu_: Run has returned
  Status status_;      // under mu_, set when Run returns
  std::thread thread_;
};

}  // namespace deepinfer
