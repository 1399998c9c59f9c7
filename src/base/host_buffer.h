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
  uint8_t* data() { return data_; }
  size_t size() const { return size_; }

 private:
  HostBuffer(uint8_t* d, size_t n) : data_(d), size_(n) {}
  uint8_t* data_;
  size_t size_;
};

// Bytes of RAM the kernel reports as available (MemAvailable), or 0 if unknown.
size_t AvailableMemoryBytes();
// Bytes of RAM the machine has (MemTotal), or 0 if unknown.
size_t TotalMemoryBytes();

}  // namespace deepinfer
