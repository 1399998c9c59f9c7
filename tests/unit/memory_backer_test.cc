// MemoryBacker and the KV cache that uses it: every page of the pool gets backed beside the engine, so no step pays
// a first-touch page fault (base/memory_backer.h), and what the owner writes meanwhile is kept.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "base/host_buffer.h"
#include "base/memory_backer.h"
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

// The tests need the kernel's MADV_POPULATE_WRITE (Linux 5.14, Debian 12's is 6.1): without it the backer leaves
// pages to first write, and these tests fail rather than skip.
TEST(MemoryBacker, BacksEveryRangeAndKeepsWhatIsWritten) {
  for (bool huge : {false, true}) {
    auto buf = HostBuffer::Allocate(size_t{24} << 20, huge);
    ASSERT_TRUE(buf.ok()) << buf.status().ToString();
    uint8_t* d = (*buf)->data();
    const size_t n = (*buf)->size();
    // Fresh anonymous memory: nothing backed yet (else this test could not tell the backer did anything).
    EXPECT_EQ(ResidentPages(d, n).first, 0u) << "huge " << huge;
    // Written before the backer reaches it: kept (populating never changes a page's contents).
    std::memset(d + n - 4096, 0x5A, 4096);
    MemoryBacker backer({{d + n / 2, n / 2}, {d, n / 2}}, "test buffer");
    ASSERT_TRUE(backer.Wait().ok());
    auto [resident, pages] = ResidentPages(d, n);
    EXPECT_EQ(resident, pages) << "huge " << huge << ": " << resident << " of " << pages << " pages backed";
    size_t wrong = 0;
    for (size_t i = 0; i < n; i += 511) wrong += d[i] != (i >= n - 4096 ? 0x5A : 0);
    EXPECT_EQ(wrong, 0u) << "huge " << huge;
  }
}

// Destroyed while backing: stops within a piece and joins, so the memory can be unmapped right after (ASan and
// the leak check would catch a thread left touching it).
TEST(MemoryBacker, StopsWhenDestroyedMidway) {
  auto buf = HostBuffer::Allocate(size_t{512} << 20, true);
  ASSERT_TRUE(buf.ok()) << buf.status().ToString();
  {
    MemoryBacker backer({{(*buf)->data(), (*buf)->size()}}, "test buffer");
    // Under way (some pages backed) before it is destroyed, up to 10 s.
    for (int i = 0; i < 10000 && ResidentPages((*buf)->data(), (*buf)->size()).first == 0; ++i) ::usleep(1000);
    EXPECT_GT(ResidentPages((*buf)->data(), (*buf)->size()).first, 0u);
  }
  buf->reset();
}

// The KV pool gets backed once created, beside whoever writes K/V into it.
TEST(MemoryBacker, KvCacheIsBackedAfterCreation) {
  auto kv = PagedKvCache::Create(KvLayout::Plain(4, 512, 512), 256, 16, DType::kF32);  // 32 MiB
  ASSERT_TRUE(kv.ok()) << kv.status().ToString();
  ASSERT_TRUE((*kv)->WaitBacked().ok());
  auto [resident, pages] = ResidentPages((*kv)->k(0), (*kv)->bytes());
  EXPECT_EQ(resident, pages) << resident << " of " << pages << " pages of the KV pool backed";
}

}  // namespace
}  // namespace deepinfer
