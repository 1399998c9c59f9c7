// The host-RAM tier's arena (kv/kv_ram_tier.h): fixed-size slots, least recently used out first, entries being
// read never evicted, and a key collision (another parent or other tokens) never served.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kv/kv_ram_tier.h"

namespace deepinfer {
namespace {

constexpr size_t kEntry = 4096 + 64;  // one page of K/V and 16 tokens

std::vector<uint8_t> Entry(std::mt19937* rng) {
  std::vector<uint8_t> e(kEntry);
  for (auto& b : e) b = static_cast<uint8_t>((*rng)());
  return e;
}

bool ReadInto(KvRamTier& t, uint64_t key, uint64_t parent, const std::vector<uint8_t>& expect, size_t prefix_n,
              std::vector<uint8_t>* out) {
  return t.Read(key, parent, expect.data(), prefix_n, [&](const uint8_t* p) { out->assign(p, p + kEntry); });
}

TEST(KvRamTierTest, ReportsWhatItHoldsToTheKvEvents) {
  std::mt19937 rng(37);
  KvEventLog log;
  auto made = KvRamTier::Create(2 * kEntry, kEntry, &log);
  ASSERT_TRUE(made.ok());
  KvRamTier& t = **made;
  const auto e = Entry(&rng);
  ASSERT_TRUE(t.Put(101, 0, e.data(), /*reported_hash=*/11));
  ASSERT_TRUE(t.Put(102, 11, e.data(), 12));
  ASSERT_TRUE(t.Put(103, 0, e.data(), 0));   // a window's entry: not reported
  ASSERT_TRUE(t.Put(104, 12, e.data(), 14));  // evicts 102 (101 went for 103)
  std::vector<KvEventLog::Event> evs;
  ASSERT_TRUE(log.Since(0, 100, &evs));
  ASSERT_EQ(evs.size(), 5u);
  for (const auto& ev : evs) EXPECT_EQ(ev.medium, KvMedium::kRam);
  EXPECT_TRUE(evs[1].stored && evs[1].hash == 12 && evs[1].parent == 11);
  EXPECT_TRUE(!evs[2].stored && evs[2].hash == 11);
  EXPECT_TRUE(!evs[3].stored && evs[3].hash == 12);
  EXPECT_TRUE(evs[4].stored && evs[4].hash == 14);
  EXPECT_EQ(log.num_cached(KvMedium::kRam), 1u);
}

TEST(KvRamTierTest, RefusesACapacityBelowOneEntry) {
  EXPECT_FALSE(KvRamTier::Create(kEntry - 1, kEntry).ok());
  auto t = KvRamTier::Create(3 * kEntry + 100, kEntry);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->capacity(), 3 * kEntry);  // whole slots only
}

TEST(KvRamTierTest, EvictsLeastRecentlyUsedAndValidatesEveryRead) {
  std::mt19937 rng(31);
  auto made = KvRamTier::Create(3 * kEntry, kEntry);
  ASSERT_TRUE(made.ok());
  KvRamTier& t = **made;
  std::vector<std::vector<uint8_t>> e;
  for (int i = 0; i < 4; ++i) e.push_back(Entry(&rng));
  for (uint64_t k = 1; k <= 3; ++k) EXPECT_TRUE(t.Put(k, 100 + k, e[k - 1].data()));
  EXPECT_FALSE(t.Put(2, 102, e[1].data())) << "present: only made most recent";
  EXPECT_TRUE(t.Touch(1));  // order now 3, 2, 1 (least recent first)
  EXPECT_TRUE(t.Put(4, 104, e[3].data()));
  EXPECT_FALSE(t.Contains(3)) << "the least recently used entry goes first";
  EXPECT_EQ(t.entries(), 3u);
  EXPECT_EQ(t.bytes(), 3 * kEntry);
  std::vector<uint8_t> got;
  for (uint64_t k : {1, 2, 4}) {
    ASSERT_TRUE(ReadInto(t, k, 100 + k, e[k - 1], 64, &got)) << k;
    EXPECT_EQ(got, e[k - 1]) << k;
  }
  EXPECT_FALSE(ReadInto(t, 1, 999, e[0], 64, &got)) << "another parent: a collision, never served";
  std::vector<uint8_t> other = e[0];
  other[5] ^= 1;
  EXPECT_FALSE(ReadInto(t, 1, 101, other, 64, &got)) << "other tokens: a collision, never served";
  EXPECT_FALSE(ReadInto(t, 3, 103, e[2], 64, &got));
}

// An entry being read is pinned: puts that must evict while the read runs take other slots, and the bytes the
// reader sees stay the entry's; when every slot is pinned, a put stores nothing.
TEST(KvRamTierTest, AnEntryBeingReadIsNeverEvicted) {
  std::mt19937 rng(32);
  auto made = KvRamTier::Create(2 * kEntry, kEntry);
  ASSERT_TRUE(made.ok());
  KvRamTier& t = **made;
  const auto a = Entry(&rng), b = Entry(&rng), c = Entry(&rng), d = Entry(&rng);
  ASSERT_TRUE(t.Put(1, 11, a.data()));
  ASSERT_TRUE(t.Put(2, 12, b.data()));
  bool inner_read = false;
  ASSERT_TRUE(t.Read(1, 11, a.data(), 64, [&](const uint8_t* p) {
    // Entry 1 is the most recent now; evicting for 3 must take 2, then for 4 nothing is left unpinned but 3.
    EXPECT_TRUE(t.Put(3, 13, c.data()));
    EXPECT_FALSE(t.Contains(2));
    EXPECT_EQ(std::memcmp(p, a.data(), kEntry), 0);
    // Both slots pinned (1 by this read, 3 by the inner one): a put stores nothing.
    inner_read = t.Read(3, 13, c.data(), 64, [&](const uint8_t*) { EXPECT_FALSE(t.Put(4, 14, d.data())); });
    EXPECT_EQ(std::memcmp(p, a.data(), kEntry), 0) << "the pinned entry's bytes were overwritten";
  }));
  EXPECT_TRUE(inner_read);
  EXPECT_FALSE(t.Contains(4));
  EXPECT_TRUE(t.Put(4, 14, d.data()));  // unpinned again: the least recent (1) goes
  EXPECT_FALSE(t.Contains(1));
  std::vector<uint8_t> got;
  ASSERT_TRUE(ReadInto(t, 4, 14, d, 64, &got));
  EXPECT_EQ(got, d);
}

}  // namespace
}  // namespace deepinfer
