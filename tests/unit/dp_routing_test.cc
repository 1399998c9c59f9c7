// serve --dp's group picking (issue 35: one policy implementation, two transports) without MPI: each group's
// prefix cache (a BlockPool with its KvEventLog) ships its changes through KvEventFeed, as the group leaders do
// inside DistControl's Sync, into the router's KvEventsPolicy with one replica per group, which rank 0 asks
// per request. Seeded inputs (std::mt19937).
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "engine/kv_event_feed.h"
#include "kv/block_pool.h"
#include "kv/kv_event_log.h"
#include "kv/prefix_hash.h"
#include "router/kv_block_index.h"
#include "router/routing_policy.h"

namespace deepinfer {
namespace {

constexpr int kBlock = 4;

// One data-parallel group as rank 0 sees it: its pool and log (the leader's side) and the feed's two ends.
struct Group {
  explicit Group(int blocks, size_t max_hashes = KvEventFeed::kDefaultMaxHashes, size_t log_capacity = 1 << 16)
      : pool(blocks, kBlock), log(log_capacity), out(&log, max_hashes), in(nullptr) {
    pool.set_event_log(&log);
  }
  // One Sync's worth: the leader writes, rank 0 reads into the group's index. Returns the bytes on the wire.
  size_t Ship(router::KvBlockIndex* index) {
    wire::Writer w;
    out.Write(w);
    wire::Reader r(w.bytes().data(), w.bytes().size());
    EXPECT_TRUE(in.Read(r, index, kBlock));
    EXPECT_TRUE(r.done());
    return w.bytes().size();
  }
  // A request's prefill: the prompt's full blocks enter the prefix cache and stay there once released.
  void Cache(const std::vector<int32_t>& prompt) {
    const int full = static_cast<int>(prompt.size()) / kBlock;
    auto b = pool.Allocate(full, 0);
    ASSERT_TRUE(b.ok());
    pool.Publish(*b, prompt.data(), full, 0);
    pool.Release(*b);
  }
  BlockPool pool;
  KvEventLog log;
  KvEventFeed out, in;
};

std::vector<int32_t> RandomTokens(std::mt19937& rng, int n) {
  std::uniform_int_distribution<int32_t> tok(0, 511);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = tok(rng);
  return t;
}

std::unique_ptr<router::RoutingPolicy> DpPolicy(int groups) {
  router::CacheAwareOptions opt;
  opt.predict_ttl_s = 0;  // no predictions: only what the groups' events say counts here
  auto p = router::MakePolicy("cache_aware", groups, opt, /*kv_events=*/true);
  EXPECT_TRUE(p.ok());
  for (int g = 0; g < groups; ++g) (*p)->kv_index(g)->Reset(kBlock, {});
  return std::move(*p);
}

TEST(DpRouting, PicksTheGroupWhoseEventsHoldThePrefix) {
  std::mt19937 rng(35);
  std::vector<std::unique_ptr<Group>> groups;
  for (int g = 0; g < 2; ++g) groups.push_back(std::make_unique<Group>(64));
  auto policy = DpPolicy(2);
  for (int g = 0; g < 2; ++g) groups[g]->Ship(policy->kv_index(g));  // the first Sync: the (empty) snapshots
  // Six tenants' system prefixes of 5 blocks; tenant t's was prefilled on group t % 2.
  std::vector<std::vector<int32_t>> prefix;
  for (int t = 0; t < 6; ++t) {
    prefix.push_back(RandomTokens(rng, 5 * kBlock));
    groups[t % 2]->Cache(prefix[t]);
  }
  for (int g = 0; g < 2; ++g) groups[g]->Ship(policy->kv_index(g));
  std::uniform_int_distribution<int> tenant(0, 5), suffix(1, 3 * kBlock);
  const std::vector<router::ReplicaView> idle(2, router::ReplicaView{true, 0});
  for (int i = 0; i < 40; ++i) {
    const int t = tenant(rng);
    std::vector<int32_t> ids = prefix[t];
    const std::vector<int32_t> s = RandomTokens(rng, suffix(rng));
    ids.insert(ids.end(), s.begin(), s.end());
    const router::Decision d = policy->PickTokens({}, ids, idle);
    ASSERT_EQ(d.replica, t % 2) << "request " << i << ", tenant " << t;
    EXPECT_EQ(d.outcome, router::Outcome::kCacheHit);
    EXPECT_EQ(d.matched_blocks, 5);
    EXPECT_EQ(d.prompt_blocks, static_cast<int>(ids.size()) / kBlock);
  }
  // Group 0's pool turns over (every cached block evicted): its removals reach rank 0, so its tenants are misses
  // now and group 1's stay hits.
  auto all = groups[0]->pool.Allocate(64, 0);
  ASSERT_TRUE(all.ok());
  groups[0]->Ship(policy->kv_index(0));
  EXPECT_EQ(policy->kv_index(0)->size(), 0u);
  router::Decision d = policy->PickTokens({}, prefix[0], idle);
  EXPECT_EQ(d.outcome, router::Outcome::kCacheMiss);
  EXPECT_EQ(d.matched_blocks, 0);
  d = policy->PickTokens({}, prefix[1], idle);
  EXPECT_EQ(d.replica, 1);
  EXPECT_EQ(d.outcome, router::Outcome::kCacheHit);
  groups[0]->pool.Release(*all);
  // Load still wins over the cache past SGLang's balance thresholds (group 1: 40 samples in flight, group 0 none).
  std::vector<router::ReplicaView> busy = idle;
  busy[1].in_flight = 40;
  d = policy->PickTokens({}, prefix[1], busy);
  EXPECT_EQ(d.replica, 0);
  EXPECT_EQ(d.outcome, router::Outcome::kImbalance);
}

TEST(DpRouting, FeedIsBoundedPerSyncAndResyncsAfterTheLogDroppedEvents) {
  // A log of 16 entries and at most 5 hashes per Sync; random stores and removals of 48 hashes (12 a Sync on
  // average, about half of them changes the log keeps), Syncs between.
  std::mt19937 rng(3535);
  KvEventLog log(16);
  KvEventFeed out(&log, 5), in(nullptr);
  router::KvBlockIndex index(0);
  size_t resyncs_seen = 0;
  std::uniform_int_distribution<int> op(0, 2), h(1, 48), burst(0, 24);
  auto ship = [&] {
    wire::Writer w;
    out.Write(w);
    // flags, two vector lengths, at most 5 hashes with their kind bytes: bounded whatever the backlog.
    EXPECT_LE(w.bytes().size(), 1 + 8 + 8 + 5 * 9u);
    wire::Reader r(w.bytes().data(), w.bytes().size());
    ASSERT_TRUE(in.Read(r, &index, kBlock));
  };
  for (int round = 0; round < 300; ++round) {
    for (int n = burst(rng); n > 0; --n) {
      const uint64_t x = static_cast<uint64_t>(h(rng));
      if (op(rng) == 0) log.Removed(x);
      else log.Stored(x, 0);
    }
    ship();
  }
  resyncs_seen = out.snapshots();
  std::printf("feed: %llu hashes in 300 Syncs, %zu snapshots\n", static_cast<unsigned long long>(out.hashes_sent()), resyncs_seen);
  EXPECT_GT(resyncs_seen, 3u) << "the bursts outran the 16-entry log: some Syncs must have resynced";
  // Quiet now: a few more Syncs drain the backlog (or finish a snapshot), and the index holds exactly the live set.
  for (int i = 0; i < 40; ++i) ship();
  const KvEventLog::Snapshot live = log.TakeSnapshot();
  EXPECT_EQ(index.size(), live.hashes.size());
  for (uint64_t x : live.hashes) EXPECT_EQ(index.LeadingBlocks({x}, router::KvBlockIndex::Clock::now()), 1) << x;
  // A hash stored, removed and stored again inside one delta ends up held (the order of the log is kept).
  KvEventLog log2;
  KvEventFeed out2(&log2), in2(nullptr);
  router::KvBlockIndex index2(0);
  auto ship2 = [&] {
    wire::Writer w;
    out2.Write(w);
    wire::Reader r(w.bytes().data(), w.bytes().size());
    ASSERT_TRUE(in2.Read(r, &index2, kBlock));
  };
  ship2();
  log2.Stored(7, 0), log2.Removed(7), log2.Stored(7, 0), log2.Stored(8, 7), log2.Removed(8);
  ship2();
  EXPECT_EQ(index2.size(), 1u);
  EXPECT_EQ(index2.LeadingBlocks({7}, router::KvBlockIndex::Clock::now()), 1);
}

TEST(DpRouting, MalformedFeedIsRefused) {
  KvEventFeed in(nullptr);
  router::KvBlockIndex index(0);
  wire::Writer w;
  w.Put<uint8_t>(0);
  w.PutVector(std::vector<uint64_t>{1, 2});
  w.PutVector(std::vector<uint8_t>{1});  // one kind byte for two hashes
  wire::Reader r(w.bytes().data(), w.bytes().size());
  EXPECT_FALSE(in.Read(r, &index, kBlock));
  wire::Writer w2;
  w2.Put<uint8_t>(0x80);  // an unknown flag
  w2.PutVector(std::vector<uint64_t>{});
  w2.PutVector(std::vector<uint8_t>{});
  wire::Reader r2(w2.bytes().data(), w2.bytes().size());
  EXPECT_FALSE(in.Read(r2, &index, kBlock));
}

}  // namespace
}  // namespace deepinfer
