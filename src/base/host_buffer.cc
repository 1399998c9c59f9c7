#include "base/host_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace deepinfer {

StatusOr<std::unique_ptr<HostBuffer>> HostBuffer::Allocate(size_t bytes, bool huge_pages, bool reserve_only) {
  if (bytes == 0) bytes = 1;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | (reserve_only ? MAP_NORESERVE : 0),
                   -1, 0);
  if (p == MAP_FAILED) return IoError("cannot allocate " + std::to_string(bytes) + " bytes: " + std::strerror(errno));
  if (huge_pages) ::madvise(p, bytes, MADV_HUGEPAGE);  // advisory: fine if THP is off
  return std::unique_ptr<HostBuffer>(new HostBuffer(static_cast<uint8_t*>(p), bytes));
}

HostBuffer::~HostBuffer() { ::munmap(data_, size_); }

namespace {
// A /proc/meminfo field in bytes, or 0 if unknown.
size_t MemInfoBytes(const char* format) {
  FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  size_t kb = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, format, &kb) == 1) break;
  std::fclose(f);
  return kb * 1024;
}
}  // namespace

size_t AvailableMemoryBytes() { return MemInfoBytes("MemAvailable: %zu kB"); }
size_t TotalMemoryBytes() { return MemInfoBytes("MemTotal: %zu kB"); }

}  // namespace deepinfer
