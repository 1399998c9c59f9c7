#include "base/memory_backer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <utility>
#include <cstring>

#include "base/host_buffer.h"
#include "base/logging.h"

namespace deepinfer {

Status PopulateWrite(void* p, size_t bytes) {
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;  // Linux 5.14; older headers lack the name
#endif
  if (bytes == 0 || ::madvise(p, bytes, MADV_POPULATE_WRITE) == 0) return Status::Ok();
  if (errno == EINVAL) return Unimplemented("this kernel has no MADV_POPULATE_WRITE (Linux 5.14)");
  return IoError("cannot back " + std::to_string(bytes) + " bytes of memory: " + std::strerror(errno));
}

MemoryBacker::MemoryBacker(std::vector<Range> ranges, std::string what)
    : ranges_(std::move(ranges)), what_(std::move(what)), thread_([this] { Run(); }) {}

MemoryBacker::~MemoryBacker() {
  stop_.store(true, std::memory_order_relaxed);
  thread_.join();
}

Status MemoryBacker::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return done_; });
  return status_;
}

void MemoryBacker::Run() {
  const auto t0 = std::chrono::steady_clock::now();
  const uintptr_t page = 4096, huge = uintptr_t{2} << 20;
  // Backing commits memory the pool would otherwise take only as it fills; several processes on one host (--dp
  // ranks, each sizing its pool from the same MemAvailable) could then commit more than the machine has. So the
  // backer leaves the last GiB (or 5% of RAM, if more) to the rest of the system, and pages past that are backed
  // on first write as before.
  const size_t keep = std::max<size_t>(size_t{1} << 30, TotalMemoryBytes() / 20);
  size_t total = 0;
  Status st;
  bool low = false;
  for (const Range& r : ranges_) {
    // madvise wants a page-aligned start: from the page holding r.data (the buffer's own; buffers start on one).
    uint8_t* p = reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(r.data) / page * page);
    uint8_t* const end = r.data + r.bytes;
    while (p < end && st.ok() && !low) {
      if (stop_.load(std::memory_order_relaxed)) break;
      const size_t avail = AvailableMemoryBytes();
      if (avail != 0 && avail < keep + kPieceBytes) {
        low = true;
        break;
      }
      // Pieces end on 2 MiB boundaries, so a huge page is never split between two calls.
      const uintptr_t cut = (reinterpret_cast<uintptr_t>(p) + kPieceBytes) / huge * huge;
      uint8_t* q = cut < reinterpret_cast<uintptr_t>(end) ? reinterpret_cast<uint8_t*>(cut) : end;
      st = PopulateWrite(p, static_cast<size_t>(q - p));
      if (st.ok()) total += static_cast<size_t>(q - p);
      p = q;
    }
    if (!st.ok() || low || stop_.load(std::memory_order_relaxed)) break;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (st.code() == StatusCode::kUnimplemented)
    DI_LOG_DEBUG("%s: pages are backed on first write (%s)", what_.c_str(), st.message().c_str());
  else if (!st.ok())
    DI_LOG_WARN("%s: backing its pages stopped after %.1f MiB: %s", what_.c_str(), total / 1048576.0,
                st.message().c_str());
  else if (low)
    DI_LOG_INFO("%s: backed %.1f MiB, then stopped with %.1f MiB of RAM available; the rest is backed on first "
                "write", what_.c_str(), total / 1048576.0, AvailableMemoryBytes() / 1048576.0);
  else if (s > 0.5)
    DI_LOG_INFO("%s: %.1f MiB backed in %.2f s, beside the engine", what_.c_str(), total / 1048576.0, s);
  std::lock_guard<std::mutex> lock(mu_);
  status_ = low ? Status(StatusCode::kOutOfRange, "stopped: RAM low") : st;
  done_ = true;
  done_cv_.notify_all();
}

}  // namespace deepinfer
