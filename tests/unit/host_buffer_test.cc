// HostBuffer::Prefault and the KV cache that uses it: every page of the buffer is backed once it returns, so no
// engine step pays a first-touch page fault (docs/architecture.md, "Latency target", steps that fault memory).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "base/host_buffer.h"
#include "kv/kv_layout.h"
#include "kv/paged_kv_cache.h"

namespace deepinfer {
namespace {

// Pages of [p, p + bytes) that are resident, and how many pages the range spans.
std::pair<size_t, size_t> ResidentPages(const void* p, size_t bytes) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) / page * page;
  const size_t n = (reinterpret_cast<uintptr_t>(p) + bytes - begin + page - 1) / page;
  std::vector<unsigned char> vec(n);
  if (::mincore(reinterpret_cast<void*>(begin), n * page, vec.data()) != 0) return {0, n};
  size_t resident = 0;
  for (unsigned char v : vec) resident += v & 1;
  return {resident, n};
}

TEST(HostBuffer, PrefaultBacksEveryPage) {
  for (bool huge : {false, true}) {
    auto buf = HostBuffer::Allocate(size_t{24} << 20, huge);
    ASSERT_TRUE(buf.ok()) << buf.status().ToString();
    // Fresh anonymous memory: nothing backed yet (else this test could not tell Prefault did anything).
    auto [before, pages] = ResidentPages((*buf)->data(), (*buf)->size());
    EXPECT_EQ(before, 0u) << "huge " << huge;
    ASSERT_TRUE((*buf)->Prefault().ok());
    auto [after, pages2] = ResidentPages((*buf)->data(), (*buf)->size());
    EXPECT_EQ(after, pages2) << "huge " << huge << ": " << after << " of " << pages2 << " pages backed";
    // Backing does not change what the buffer holds: zeros.
    const uint8_t* d = (*buf)->data();
    size_t nonzero = 0;
    for (size_t i = 0; i < (*buf)->size(); i += 4093) nonzero += d[i] != 0;
    EXPECT_EQ(nonzero, 0u);
  }
}

// The KV pool is backed when it is created: the blocks a step writes first never fault inside the step.
TEST(HostBuffer, KvCacheIsBackedWhenCreated) {
  auto kv = PagedKvCache::Create(KvLayout::Plain(4, 512, 512), 256, 16, DType::kF32);  // 32 MiB
  ASSERT_TRUE(kv.ok()) << kv.status().ToString();
  auto [resident, pages] = ResidentPages((*kv)->k(0), (*kv)->bytes());
  EXPECT_EQ(resident, pages) << resident << " of " << pages << " pages of the KV pool backed";
}

}  // namespace
}  // namespace deepinfer
