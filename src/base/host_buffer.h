// Anonymous host memory for weights, backed by transparent huge pages where the kernel allows (madvise).
// Streaming weights from 2 MiB pages lets hardware prefetchers run across what would be 4 KiB page boundaries
// in an mmapped file: decode GEMV reads ~1.5-2x faster on the machines we measured (docs/benchmarks.md).
#pragma once
#include <cstddef>
#include <memory>

#include "deepinfer/status.h"

namespace deepinfer {

class HostBuffer {
 public:
  // reserve_only: address space that is backed only as it is written (MAP_NORESERVE: not charged against the
  // commit limit up front), for caches sized by a flag that fill over time (the KV tiers' arenas).
  static StatusOr<std::unique_ptr<HostBuffer>> Allocate(size_t bytes, bool huge_pages = true, bool reserve_only = false);
  ~HostBuffer();
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  // Backs every page now (MADV_POPULATE_WRITE; on kernels before 5.14, a write per 4 KiB page, so only before the
  // buffer holds data) instead of at first write. A buffer written a little at a time, as the KV cache is step by
  // step, would otherwise pay its page faults inside the steps that first reach each page: with transparent huge
  // pages, all of a step's layers cross into a new 2 MiB page at once (the f32 KV of a Llama-3.2-1B does every
  // 1024 tokens), and on a VM whose host backs guest memory on first touch that step ran 1.5-2x its time
  // (docs/benchmarks.md, "Session 16"). llama.cpp clears its KV buffer at creation for the same effect.
  Status Prefault();
  uint8_t* data() { return data_; }
  size_t size() const { return size_; }

 private:
  HostBuffer(uint8_t* d, size_t n) : data_(d), size_(n) {}
  uint8_t* data_;
  size_t size_;
};

// Bytes of RAM the kernel reports as available (MemAvailable), or 0 if unknown.
size_t AvailableMemoryBytes();

}  // namespace deepinfer
