#include <gtest/gtest.h>

#include <numeric>

#include "kv/block_pool.h"

namespace deepinfer {
namespace {

std::vector<int32_t> Seq(int n, int start = 100) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(BlockPoolTest, AllocateReleaseAndExhaustion) {
  BlockPool pool(8, 4);
  auto a = pool.Allocate(5);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->size(), 5u);
  EXPECT_EQ(pool.num_available(), 3);
  auto b = pool.Allocate(4);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("4 blocks requested, 3 of 8 available"), std::string::npos);
  EXPECT_EQ(pool.num_available(), 3);  // a refused request takes nothing
  EXPECT_FALSE(pool.CheckNoLeaks().ok());
  pool.Release(*a);
  pool.Release(*a);  // double release must not corrupt the pool
  EXPECT_EQ(pool.num_available(), 8);
  EXPECT_TRUE(pool.CheckNoLeaks().ok());
}

TEST(BlockPoolTest, PrefixHitSharesBlocksAndSkipsPartialBlock) {
  BlockPool pool(16, 4);
  const auto toks = Seq(10);  // 2 full blocks + 2 tokens
  auto blocks = *pool.Allocate(3);
  pool.Publish(blocks, toks.data(), 2);
  EXPECT_EQ(pool.num_cached(), 2);
  auto hit = pool.MatchPrefix(toks.data(), 10);
  ASSERT_EQ(hit.size(), 2u);
  EXPECT_EQ(hit[0], blocks[0]);
  EXPECT_EQ(hit[1], blocks[1]);
  EXPECT_EQ(pool.ref_count(blocks[0]), 2);
  // A different second block matches only the first.
  auto other = toks;
  other[5] = 7;
  auto part = pool.MatchPrefix(other.data(), 10);
  EXPECT_EQ(part.size(), 1u);
  pool.Release(part);
  pool.Release(hit);
  pool.Release(blocks);
  EXPECT_TRUE(pool.CheckNoLeaks().ok());
  EXPECT_EQ(pool.num_cached(), 2);  // still cached while unreferenced
  EXPECT_EQ(pool.MatchPrefix(toks.data(), 8).size(), 2u);
}

// Two requests admitted together compute the same head in their own blocks; the first to publish caches it, the
// second's copy is not published. The second's later (divergent) blocks must chain to the cached head, or no
// request could ever hit them (MatchPrefix follows the cached chain).
TEST(BlockPoolTest, BlocksAfterAHeadAnotherRequestCachedFirstAreReachable) {
  BlockPool pool(16, 4);
  auto a_toks = Seq(12), b_toks = Seq(12);
  b_toks[8] = 7;  // the same two head blocks, a different third
  auto a = *pool.Allocate(3), b = *pool.Allocate(3);
  pool.Publish(a, a_toks.data(), 3);
  pool.Publish(b, b_toks.data(), 3);
  EXPECT_EQ(pool.num_cached(), 4);  // a's three, b's third
  auto hit = pool.MatchPrefix(b_toks.data(), 12);
  ASSERT_EQ(hit.size(), 3u);
  EXPECT_EQ(hit[0], a[0]);
  EXPECT_EQ(hit[1], a[1]);
  EXPECT_EQ(hit[2], b[2]);
  pool.Release(hit);
  pool.Release(a);
  pool.Release(b);
  EXPECT_TRUE(pool.CheckNoLeaks().ok());
}

// MTP speculation (set_link_own_blocks_only): the module's K/V at a block's last position was computed with the
// publisher's next token. The second request's third block must not chain to the first's second block (whose
// last pair holds token 108, not 7): a third request with the second's tokens then hits only the shared head,
// and recomputes the pair the prefix cache cannot vouch for.
TEST(BlockPoolTest, MtpBlocksChainOnlyToTheirOwnSequence) {
  BlockPool pool(16, 4);
  pool.set_link_own_blocks_only(true);
  auto a_toks = Seq(12), b_toks = Seq(12);
  b_toks[8] = 7;
  auto a = *pool.Allocate(3), b = *pool.Allocate(3);
  pool.Publish(a, a_toks.data(), 3);
  pool.Publish(b, b_toks.data(), 3);
  EXPECT_EQ(pool.num_cached(), 3);  // a's three only
  auto hit = pool.MatchPrefix(b_toks.data(), 12);
  ASSERT_EQ(hit.size(), 2u);
  EXPECT_EQ(hit[1], a[1]);
  auto own = pool.MatchPrefix(a_toks.data(), 12);
  EXPECT_EQ(own, a);
  pool.Release(hit);
  pool.Release(own);
  pool.Release(a);
  pool.Release(b);
  EXPECT_TRUE(pool.CheckNoLeaks().ok());
}

TEST(BlockPoolTest, EvictsLeastRecentlyReleasedFirst) {
  BlockPool pool(4, 2);
  const auto s1 = Seq(2, 1), s2 = Seq(2, 50);
  auto b1 = *pool.Allocate(1);
  pool.Publish(b1, s1.data(), 1);
  auto b2 = *pool.Allocate(1);
  pool.Publish(b2, s2.data(), 1);
  pool.Release(b1);  // released first -> evicted first
  pool.Release(b2);
  auto fresh = *pool.Allocate(3);  // 2 never-used blocks, then the LRU cached one (s1's)
  EXPECT_TRUE(pool.MatchPrefix(s1.data(), 2).empty());
  auto still = pool.MatchPrefix(s2.data(), 2);
  EXPECT_EQ(still.size(), 1u);
  pool.Release(still);
  pool.Release(fresh);
  EXPECT_TRUE(pool.CheckNoLeaks().ok());
}

TEST(BlockPoolTest, RecycledParentBreaksTheChain) {
  BlockPool pool(3, 2);
  const auto a = Seq(4, 10);
  auto blocks = *pool.Allocate(2);  // blocks 0, 1 hold a's two blocks
  pool.Publish(blocks, a.data(), 2);
  pool.Release(blocks);             // LRU order: 0, then 1
  // Block 0 (a's first) is evicted and reused; a's first block is then published again in another block.
  auto x = *pool.Allocate(2);       // the never-used block 2, then evicted block 0
  pool.Publish({x[0]}, a.data(), 1);
  // a's second block is still cached, but it hangs off the evicted block 0: the chain must stop after one block.
  auto hit = pool.MatchPrefix(a.data(), 4);
  ASSERT_EQ(hit.size(), 1u);
  EXPECT_EQ(hit[0], x[0]);
  pool.Release(hit);
  pool.Release(x);
  EXPECT_TRUE(pool.CheckNoLeaks().ok());
}

// Hybrid caches: a windowed group's block is found from its own tokens and the anchor's cached block of the same
// positions (no chain before it), only while that anchor block is cached as it was (same generation); a stale
// window gives its key up to a fresh one; groups never find each other's blocks; per-group usage counters.
TEST(BlockPoolTest, WindowBlocksAreTiedToTheAnchor) {
  BlockPool pool(16, 4);
  const std::vector<int32_t> toks = Seq(8);
  const std::vector<uint64_t> h = pool.ChainHashes(toks.data(), 8);
  auto anchor = pool.Allocate(2, 0);
  auto window = pool.Allocate(2, 1);
  ASSERT_TRUE(anchor.ok() && window.ok());
  EXPECT_EQ(pool.in_use(0), 2);
  EXPECT_EQ(pool.in_use(1), 2);
  // Not tied while the anchor's blocks are not cached: nothing is published.
  pool.Publish(*window, toks.data(), 2, 1, 0, 0, &*anchor);
  EXPECT_EQ(pool.FindWindowBlock(1, h[1], toks.data() + 4, (*anchor)[1]), -1);
  pool.Publish(*anchor, toks.data(), 2);
  // The window's first block is no longer held (slid out): the second still publishes, tied to its twin.
  pool.Release({(*window)[0]});
  pool.Publish(*window, toks.data(), 2, 1, 0, /*held_from=*/1, &*anchor);
  EXPECT_EQ(pool.FindWindowBlock(1, h[1], toks.data() + 4, (*anchor)[1]), (*window)[1]);
  EXPECT_EQ(pool.FindWindowBlock(1, h[0], toks.data(), (*anchor)[0]), -1) << "released before it was published";
  EXPECT_EQ(pool.FindWindowBlock(2, h[1], toks.data() + 4, (*anchor)[1]), -1) << "another group's";
  EXPECT_EQ(pool.FindWindowBlock(1, h[1], toks.data() + 4, (*anchor)[0]), -1) << "another twin";
  std::vector<int32_t> other = toks;
  other[5] = 7;
  EXPECT_EQ(pool.FindWindowBlock(1, h[1], other.data() + 4, (*anchor)[1]), -1) << "other tokens";
  EXPECT_EQ(pool.MatchPrefix(toks.data(), 8, 1).size(), 0u) << "the window's chain starts at a released block";
  // The anchor leaves the cache and comes back (another generation): the window no longer matches it, and a
  // fresh window of the same positions takes its key.
  pool.Release(*anchor);
  pool.Release({(*window)[1]});
  pool.EvictCached([](int g) { return g == 0; });
  EXPECT_EQ(pool.in_use(0), 0);
  auto anchor2 = pool.Allocate(2, 0);
  pool.Publish(*anchor2, toks.data(), 2);
  EXPECT_EQ(pool.FindWindowBlock(1, h[1], toks.data() + 4, (*anchor2)[1]), -1);
  auto window2 = pool.Allocate(2, 1);
  pool.Publish(*window2, toks.data(), 2, 1, 0, 0, &*anchor2);
  EXPECT_EQ(pool.FindWindowBlock(1, h[1], toks.data() + 4, (*anchor2)[1]), (*window2)[1]);
  pool.Acquire((*window2)[1]);
  EXPECT_EQ(pool.ref_count((*window2)[1]), 2);
  EXPECT_EQ(pool.peak(1), 2);
  pool.Release(*anchor2);
  pool.Release(*window2);
  pool.Release({(*window2)[1]});
  EXPECT_TRUE(pool.CheckNoLeaks().ok());
}

}  // namespace
}  // namespace deepinfer
