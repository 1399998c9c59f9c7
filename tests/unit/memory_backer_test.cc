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

// Destroyed while backing: stops within a piece and joins, so the memory can be unmapped right after.
TEST(MemoryBacker, StopsWhenDestroyedMidway) {
  auto buf = HostBuffer::Allocate(size_t{1} << 30, true);
  ASSERT_TRUE(buf.ok()) << buf.status().ToString();
  const uint8_t* d = (*buf)->data();
  const size_t n = (*buf)->size();
  {
    MemoryBacker backer({{(*buf)->data(), n}}, "test buffer");
    // Under way (some pages backed) before it is destroyed, up to 10 s.
    for (int i = 0; i < 10000 && ResidentPages(d, n).first == 0; ++i) ::usleep(1000);
    EXPECT_GT(ResidentPages(d, n).first, 0u);
  }
  // Backing the whole GiB takes 0.1 s (memory the machine backed before) to 4 s (fresh VM memory); a stopped
  // backer has done a few 4 MiB pieces.
  auto [resident, pages] = ResidentPages(d, n);
  EXPECT_LT(resident, pages / 2) << resident << " of " << pages << " pages backed after the backer was destroyed";
  buf->reset();
}

// The KV pool gets backed once created, beside whoever writes K/V into it, whatever its rows' sizes: plain f32, a
// K-only bf16 pool of 576-element rows (MLA's latent: 18 KiB blocks, so chunks and the V-less planes start off
// 4 KiB pages), an odd block count, and a hybrid layout of several planes.
TEST(MemoryBacker, KvCacheIsBackedAfterCreation) {
  KvLayout hybrid = KvLayout::Plain(6, 128, 128);
  hybrid.layer_group = {0, 1, 0, 1, 0, 1};
  hybrid.layer_plane = {0, 0, 1, 1, 2, 2};
  hybrid.group_window = {0, 64};
  hybrid.planes = 3;
  const struct {
    KvLayout layout;
    int blocks;
    DType dtype;
  } cases[] = {{KvLayout::Plain(4, 512, 512), 256, DType::kF32},
               {KvLayout::Plain(3, 576, 0), 333, DType::kBF16},
               {KvLayout::Plain(2, 72, 40), 1001, DType::kF16},
               {hybrid, 77, DType::kF32}};
  for (const auto& c : cases) {
    auto kv = PagedKvCache::Create(c.layout, c.blocks, 16, c.dtype);
    ASSERT_TRUE(kv.ok()) << kv.status().ToString();
    ASSERT_TRUE((*kv)->WaitBacked().ok()) << (*kv)->WaitBacked().ToString();
    auto [resident, pages] = ResidentPages((*kv)->k(0), (*kv)->bytes());
    EXPECT_EQ(resident, pages) << resident << " of " << pages << " pages of a pool of " << c.blocks << " blocks, "
                               << c.layout.k_elems << " + " << c.layout.v_elems << " elements a row backed";
  }
}

}  // namespace
}  // namespace deepinfer
