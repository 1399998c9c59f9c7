// KV events (issue 35, router from KV events) without a network: the engine side's change log (KvEventLog and
// the BlockPool hooks that feed it), the router side's per-replica index (KvBlockIndex), the SSE event parsing
// of KvEventSubscriber, and the decisions of the events-fed cache_aware policy (KvEventsPolicy).
#include <gtest/gtest.h>

#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "kv/block_pool.h"
#include "kv/kv_event_log.h"
#include "kv/prefix_hash.h"
#include "routing/kv_block_index.h"
#include "router/kv_event_subscriber.h"
#include "routing/kv_events_policy.h"

namespace deepinfer {
namespace {

std::vector<int32_t> Tokens(int n, int32_t first) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

TEST(KvEventLog, LogsChangesInOrderAndResyncsAReaderThatFellBehind) {
  KvEventLog log(4);
  log.Stored(1, 0);
  log.Stored(2, 1);
  log.Stored(2, 1);  // already held: not logged twice
  log.Removed(7);    // never held: not logged
  std::vector<KvEventLog::Event> evs;
  ASSERT_TRUE(log.Since(0, 100, &evs));
  ASSERT_EQ(evs.size(), 2u);
  EXPECT_TRUE(evs[0].stored);
  EXPECT_EQ(evs[1].hash, 2u);
  EXPECT_EQ(evs[1].parent, 1u);
  EXPECT_EQ(evs[1].seq, 2u);
  log.Removed(1);
  log.Stored(3, 2);
  log.Stored(4, 3);
  // Five events in a log of four: a reader at 0 lost the first and must start over from a snapshot.
  evs.clear();
  EXPECT_FALSE(log.Since(0, 100, &evs));
  ASSERT_TRUE(log.Since(2, 100, &evs));
  ASSERT_EQ(evs.size(), 3u);
  EXPECT_FALSE(evs[0].stored);
  EXPECT_EQ(evs[0].hash, 1u);
  const KvEventLog::Snapshot s = log.TakeSnapshot();
  EXPECT_EQ(s.seq, 5u);
  EXPECT_EQ(std::set<uint64_t>(s.hashes.begin(), s.hashes.end()), (std::set<uint64_t>{2, 3, 4}));
  evs.clear();
  ASSERT_TRUE(log.Since(s.seq, 100, &evs));
  EXPECT_TRUE(evs.empty());
}

TEST(KvEventLog, EachMediumHoldsABlockOnItsOwn) {
  KvEventLog log;
  log.Stored(1, 0);                  // the pool
  log.Stored(1, 0, KvMedium::kRam);  // and RAM: a second event
  log.Stored(1, 0, KvMedium::kRam);  // already in RAM: not logged
  log.Stored(2, 1, KvMedium::kDisk);
  log.Removed(1);                    // evicted from the pool, still in RAM
  log.Removed(2, KvMedium::kRam);    // never in RAM: not logged
  std::vector<KvEventLog::Event> evs;
  ASSERT_TRUE(log.Since(0, 100, &evs));
  ASSERT_EQ(evs.size(), 4u);
  EXPECT_EQ(evs[1].medium, KvMedium::kRam);
  EXPECT_EQ(evs[2].medium, KvMedium::kDisk);
  EXPECT_EQ(evs[2].parent, 1u);
  EXPECT_FALSE(evs[3].stored);
  EXPECT_EQ(evs[3].medium, KvMedium::kPool);
  EXPECT_EQ(log.num_cached(), 0u);
  EXPECT_EQ(log.num_cached(KvMedium::kRam), 1u);
  EXPECT_EQ(log.num_cached(KvMedium::kDisk), 1u);
  const KvEventLog::Snapshot s = log.TakeSnapshot();
  ASSERT_EQ(s.hashes.size(), 2u);
  for (size_t i = 0; i < s.hashes.size(); ++i)
    EXPECT_EQ(s.media[i], s.hashes[i] == 1 ? MediumBit(KvMedium::kRam) : MediumBit(KvMedium::kDisk)) << s.hashes[i];
  log.Removed(1, KvMedium::kRam);
  EXPECT_EQ(log.TakeSnapshot().hashes, std::vector<uint64_t>{2});
  EXPECT_STREQ(KvMediumName(KvMedium::kDisk), "disk");
}

TEST(KvEventLog, BlockPoolReportsChainHashesStoredThenEvicted) {
  BlockPool pool(4, 4);
  KvEventLog log;
  pool.set_event_log(&log);
  const std::vector<int32_t> toks = Tokens(8, 100);  // two full blocks
  auto blocks = pool.Allocate(2, 0);
  ASSERT_TRUE(blocks.ok());
  pool.Publish(*blocks, toks.data(), 2, 0);
  const std::vector<uint64_t> want = PrefixChainHashes(toks.data(), 8, 4);
  std::vector<KvEventLog::Event> evs;
  ASSERT_TRUE(log.Since(0, 100, &evs));
  ASSERT_EQ(evs.size(), 2u);
  EXPECT_EQ(evs[0].hash, want[0]);
  EXPECT_EQ(evs[0].parent, 0u);
  EXPECT_EQ(evs[1].hash, want[1]);
  EXPECT_EQ(evs[1].parent, want[0]);
  pool.Release(*blocks);
  // Other groups' blocks (sliding windows) are not reported: their keys are not the plain chain hash.
  auto w = pool.Allocate(1, 1);
  ASSERT_TRUE(w.ok());
  pool.Publish(*w, toks.data(), 1, 1);
  pool.Release(*w);
  EXPECT_EQ(log.last_seq(), 2u);
  // Four new blocks from a pool of four: every cached block is evicted, group 0's two are reported removed.
  auto all = pool.Allocate(4, 0);
  ASSERT_TRUE(all.ok());
  evs.clear();
  ASSERT_TRUE(log.Since(2, 100, &evs));
  ASSERT_EQ(evs.size(), 2u);
  EXPECT_FALSE(evs[0].stored);
  EXPECT_FALSE(evs[1].stored);
  EXPECT_EQ(std::set<uint64_t>({evs[0].hash, evs[1].hash}), std::set<uint64_t>(want.begin(), want.end()));
  EXPECT_EQ(log.num_cached(), 0u);
  pool.Release(*all);
}

}  // namespace

namespace router {
namespace {

using Clock = KvBlockIndex::Clock;

TEST(KvBlockIndex, SnapshotDeltasAndLeadingBlocks) {
  KvBlockIndex idx;
  const auto now = Clock::now();
  EXPECT_FALSE(idx.synced());
  EXPECT_EQ(idx.LeadingBlocks({1, 2, 3}, now), 0);
  idx.Reset(16, {1, 2, 9});
  EXPECT_TRUE(idx.synced());
  EXPECT_EQ(idx.block_size(), 16);
  EXPECT_EQ(idx.LeadingBlocks({1, 2, 3}, now), 2);
  EXPECT_EQ(idx.LeadingBlocks({9, 1}, now), 2);
  EXPECT_EQ(idx.LeadingBlocks({3, 1, 2}, now), 0);  // leading blocks only: a hole at the start matches nothing
  idx.Apply({3}, {2});
  EXPECT_EQ(idx.LeadingBlocks({1, 2, 3}, now), 1);
  EXPECT_EQ(idx.events(), 2u);
  idx.Reset(16, {4});  // a resync replaces the set
  EXPECT_EQ(idx.LeadingBlocks({1}, now), 0);
  EXPECT_EQ(idx.resyncs(), 1u);
  idx.Clear();
  EXPECT_FALSE(idx.synced());
  EXPECT_EQ(idx.LeadingBlocks({4}, now), 0);
}

TEST(KvBlockIndex, BlocksInATierAreHitsButNotPoolUse) {
  constexpr uint8_t kPool = 1, kRam = 2, kDisk = 4;  // kv/kv_event_log.h MediumBit
  KvBlockIndex idx;
  const auto now = Clock::now();
  idx.Reset(16, {1, 2, 3}, {kPool, kPool | kRam, kDisk});
  EXPECT_EQ(idx.size(), 2u);
  EXPECT_EQ(idx.tier_size(), 1u);
  EXPECT_EQ(idx.LeadingBlocks({1, 2, 3}, now), 3);
  idx.Apply({}, {2}, kPool);  // the pool evicted 2: RAM still holds it
  EXPECT_EQ(idx.size(), 1u);
  EXPECT_EQ(idx.tier_size(), 2u);
  EXPECT_EQ(idx.footprint(), 1u);
  EXPECT_EQ(idx.LeadingBlocks({1, 2, 3}, now), 3);
  idx.Apply({}, {2}, kRam);  // and RAM
  EXPECT_EQ(idx.LeadingBlocks({1, 2, 3}, now), 1);
  idx.Apply({}, {3}, kRam);  // not in RAM: 3 stays on disk
  EXPECT_EQ(idx.LeadingBlocks({3}, now), 1);
  idx.Apply({3}, {}, kPool);  // loaded back into the pool
  EXPECT_EQ(idx.size(), 2u);
  EXPECT_EQ(idx.tier_size(), 0u);
}

TEST(KvBlockIndex, PredictionsCountUntilConfirmedEvictedOrExpired) {
  KvBlockIndex idx(1.0);
  const auto now = Clock::now();
  idx.Predict({1, 2}, now);  // before a snapshot: nothing to predict against
  idx.Reset(16, {1});
  EXPECT_EQ(idx.LeadingBlocks({1, 2, 3}, now), 1);
  idx.Predict({1, 2, 3}, now);
  EXPECT_EQ(idx.LeadingBlocks({1, 2, 3}, now), 3);
  EXPECT_EQ(idx.LeadingBlocks({1, 2, 3}, now + std::chrono::seconds(2)), 1);  // expired
  idx.Apply({2}, {3});  // 2 confirmed, 3 evicted
  EXPECT_EQ(idx.LeadingBlocks({1, 2, 3}, now + std::chrono::seconds(2)), 2);
  EXPECT_EQ(idx.LeadingBlocks({1, 2, 3}, now), 2);
  idx.SetMismatch(true);
  EXPECT_EQ(idx.LeadingBlocks({1, 2}, now), 0);
}

TEST(KvEventSubscriber, AppliesSnapshotDeltaAndLoadEvents) {
  KvBlockIndex idx;
  KvEventSubscriberOptions so;
  so.prompt_digest = 0xabc;
  Url url;
  url.text = "http://test";
  KvEventSubscriber sub(url, &idx, so);  // not started: events are fed by hand
  EXPECT_FALSE(sub.OnEvent(R"({"type":"delta","seq":1,"stored":[{"hash":"0000000000000001","parent":"0"}],"removed":[]})"));
  ASSERT_TRUE(sub.OnEvent(R"({"type":"snapshot","seq":4,"block_size":16,"hash_scheme":"fnv1a64-chain-v1","prompt_digest":"0000000000000abc","hashes":["00000000000000ff","0000000000000010"]})"));
  const auto now = Clock::now();
  EXPECT_EQ(idx.LeadingBlocks({0xff, 0x10}, now), 2);
  ASSERT_TRUE(sub.OnEvent(R"({"type":"delta","seq":6,"stored":[{"hash":"ffffffffffffffff","parent":"0000000000000010"}],"removed":["00000000000000ff"]})"));
  EXPECT_EQ(idx.LeadingBlocks({0x10, 0xffffffffffffffffull}, now), 2);
  EXPECT_EQ(idx.LeadingBlocks({0xff}, now), 0);
  ASSERT_TRUE(sub.OnEvent(R"({"type":"load","waiting":3,"running":2,"kv_used_blocks":10,"kv_total_blocks":40})"));
  EXPECT_EQ(idx.load().waiting, 3);
  EXPECT_EQ(idx.load().kv_total_blocks, 40);
  EXPECT_FALSE(idx.mismatch());
  // Another tokenizer: the replica's hashes cannot be compared with the router's.
  ASSERT_TRUE(sub.OnEvent(R"({"type":"snapshot","seq":9,"block_size":16,"hash_scheme":"fnv1a64-chain-v1","prompt_digest":"0000000000000abd","hashes":["0000000000000010"]})"));
  EXPECT_TRUE(idx.mismatch());
  EXPECT_EQ(idx.LeadingBlocks({0x10}, now), 0);
  EXPECT_FALSE(sub.OnEvent(R"({"type":"snapshot","seq":9,"block_size":16,"hash_scheme":"sha256","prompt_digest":"0000000000000abc","hashes":[]})"));
  // A snapshot in parts is applied once whole; a delta among its parts, or a part with no snapshot, starts over.
  ASSERT_TRUE(sub.OnEvent(R"({"type":"snapshot","seq":9,"block_size":16,"hash_scheme":"fnv1a64-chain-v1","prompt_digest":"0000000000000abc","hashes":["0000000000000021"],"tiers":{},"more":true})"));
  EXPECT_EQ(idx.LeadingBlocks({0x10}, now), 0) << "still the mismatched set: nothing applied before the last part";
  ASSERT_TRUE(sub.OnEvent(R"({"type":"load","waiting":1,"running":0,"kv_used_blocks":1,"kv_total_blocks":40})"));
  ASSERT_TRUE(sub.OnEvent(R"({"type":"snapshot_part","seq":9,"hashes":[],"tiers":{"ram":["0000000000000022"]},"more":true})"));
  ASSERT_TRUE(sub.OnEvent(R"({"type":"snapshot_part","seq":9,"hashes":["0000000000000023"],"tiers":{},"more":false})"));
  EXPECT_EQ(idx.LeadingBlocks({0x21, 0x22, 0x23}, now), 3);
  EXPECT_EQ(idx.size(), 2u);
  EXPECT_FALSE(sub.OnEvent(R"({"type":"snapshot_part","seq":9,"hashes":["0000000000000024"],"more":false})"));
  ASSERT_TRUE(sub.OnEvent(R"({"type":"snapshot","seq":9,"block_size":16,"hash_scheme":"fnv1a64-chain-v1","prompt_digest":"0000000000000abc","hashes":[],"more":true})"));
  EXPECT_FALSE(sub.OnEvent(R"({"type":"delta","seq":10,"medium":"pool","stored":[],"removed":["0000000000000021"]})"));
  // The tiers: a snapshot's "tiers" and a delta's "medium".
  ASSERT_TRUE(sub.OnEvent(R"({"type":"snapshot","seq":10,"block_size":16,"hash_scheme":"fnv1a64-chain-v1","prompt_digest":"0000000000000abc","hashes":["0000000000000001"],"tiers":{"ram":["0000000000000002"],"disk":["0000000000000002","0000000000000003"],"hbm9":["0000000000000004"]}})"));
  EXPECT_EQ(idx.LeadingBlocks({1, 2, 3}, now), 3);
  EXPECT_EQ(idx.LeadingBlocks({4}, now), 0);  // a medium this router does not know is no hit
  EXPECT_EQ(idx.size(), 1u);
  EXPECT_EQ(idx.tier_size(), 2u);
  ASSERT_TRUE(sub.OnEvent(R"({"type":"delta","seq":11,"medium":"disk","stored":[],"removed":["0000000000000002","0000000000000003"]})"));
  EXPECT_EQ(idx.LeadingBlocks({1, 2, 3}, now), 2);  // 2 still in RAM
  ASSERT_TRUE(sub.OnEvent(R"({"type":"delta","seq":12,"medium":"ram","stored":[{"hash":"0000000000000003","parent":"2"}],"removed":["0000000000000002"]})"));
  EXPECT_EQ(idx.LeadingBlocks({1, 2}, now), 1);
  EXPECT_EQ(idx.LeadingBlocks({3}, now), 1);
  EXPECT_EQ(idx.size(), 1u);
}

// A prompt of `blocks` full blocks of 4 tokens whose first `shared` blocks are tenant `tenant`'s prefix.
std::vector<int32_t> Prompt(int tenant, int shared, int blocks, int salt) {
  std::vector<int32_t> t;
  for (int i = 0; i < blocks * 4; ++i) t.push_back(i < shared * 4 ? tenant * 1000 + i : 50000 + salt * 100 + i);
  return t;
}

TEST(KvEventsPolicy, ScoresLeadingBlocksAgainstLoad) {
  CacheAwareOptions opt;  // cache_threshold 0.5, balance 32 / 1.0001
  KvEventsPolicy p(3, opt);
  std::vector<ReplicaView> v(3, ReplicaView{true, 0});
  // No snapshot yet: the text tree decides.
  EXPECT_EQ(p.PickTokens("hello", Prompt(1, 6, 8, 0), v).prompt_blocks, 0);
  for (int i = 0; i < 3; ++i) p.kv_index(i)->Reset(4, {});
  const std::vector<int32_t> a1 = Prompt(1, 6, 8, 1);
  const std::vector<uint64_t> a_hashes = PrefixChainHashes(a1.data(), static_cast<int>(a1.size()), 4);
  // Replica 2 holds tenant 1's six prefix blocks (by its events); replica 1 only the first two.
  p.kv_index(2)->Apply({a_hashes.begin(), a_hashes.begin() + 6}, {});
  p.kv_index(1)->Apply({a_hashes.begin(), a_hashes.begin() + 2}, {});
  Decision d = p.PickTokens("a1", a1, v);
  EXPECT_EQ(d.replica, 2);
  EXPECT_EQ(d.outcome, Outcome::kCacheHit);
  EXPECT_EQ(d.matched_blocks, 6);
  EXPECT_EQ(d.prompt_blocks, 8);
  // Busier within the thresholds (reported load 20, router's in-flight 0): still the cache.
  p.kv_index(2)->SetLoad({true, 15, 5, 0, 100});
  EXPECT_EQ(p.PickTokens("a2", Prompt(1, 6, 8, 2), v).replica, 2);
  // Reported waiting + running 40 vs 0: imbalanced, the least loaded replica whatever the match.
  p.kv_index(2)->SetLoad({true, 35, 5, 0, 100});
  d = p.PickTokens("a3", Prompt(1, 6, 8, 3), v);
  EXPECT_NE(d.replica, 2);
  EXPECT_EQ(d.outcome, Outcome::kImbalance);
  // The router's own in-flight count counts too, when above the (lagging) report.
  p.kv_index(2)->SetLoad({true, 0, 0, 0, 100});
  v[2].in_flight = 40;
  EXPECT_EQ(p.PickTokens("a4", Prompt(1, 6, 8, 4), v).outcome, Outcome::kImbalance);
  v[2].in_flight = 0;
  // A match at or under half the prompt's blocks is a miss: the least loaded replica (ties: least KV used).
  p.kv_index(0)->SetLoad({true, 0, 0, 50, 100});
  p.kv_index(1)->SetLoad({true, 0, 0, 10, 100});
  p.kv_index(2)->SetLoad({true, 0, 1, 0, 100});
  d = p.PickTokens("b", Prompt(1, 4, 8, 5), v);  // replica 2 holds 4 of its 8 blocks: 0.5, not over it
  EXPECT_EQ(d.outcome, Outcome::kCacheMiss);
  EXPECT_EQ(d.replica, 1);
  // A new prefix goes where it was sent last time: the prediction covers the events' lag.
  const std::vector<int32_t> c1 = Prompt(7, 8, 8, 6);
  const int first = p.PickTokens("c1", c1, v).replica;
  d = p.PickTokens("c2", Prompt(7, 8, 8, 6), v);
  EXPECT_EQ(d.replica, first);
  EXPECT_EQ(d.outcome, Outcome::kCacheHit);
  // A replica taken out forgets what it held.
  p.OnReplicaDown(2);
  EXPECT_FALSE(p.kv_index(2)->synced());
  p.kv_index(2)->Reset(4, {});  // it came back (restarted): its snapshot holds nothing
  EXPECT_EQ(p.kv_index(2)->LeadingBlocks(a_hashes, Clock::now()), 0);
  v[2].available = false;
  EXPECT_NE(p.PickTokens("a6", a1, v).replica, 2);
}

}  // namespace
}  // namespace router
}  // namespace deepinfer
