// serve --dp's group picking (issue 35: one policy implementation, two transports) without MPI: each group's
// prefix cache (a BlockPool with its KvEventLog) ships its changes through KvEventFeed, as the group leaders do
// inside DistControl's Sync, into the router's KvEventsPolicy with one replica per group, which rank 0 asks
// per request; and DistControl itself over two in-process ranks. Seeded inputs (std::mt19937).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "dist/communicator.h"
#include "engine/dist_control.h"
#include "engine/kv_event_feed.h"
#include "engine/kv_event_union.h"
#include "kv/block_pool.h"
#include "kv/kv_event_log.h"
#include "kv/prefix_hash.h"
#include "routing/kv_block_index.h"
#include "routing/routing_policy.h"

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
  std::uniform_int_distribution<int> op(0, 2), h(1, 48), burst(0, 24), medium(0, kNumKvMedia - 1);
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
      // Blocks enter and leave the pool and the tiers behind it independently.
      const uint64_t x = static_cast<uint64_t>(h(rng));
      const KvMedium m = static_cast<KvMedium>(medium(rng));
      if (op(rng) == 0) log.Removed(x, m);
      else log.Stored(x, 0, m);
    }
    ship();
  }
  resyncs_seen = out.snapshots();
  std::printf("feed: %llu hashes in 300 Syncs, %zu snapshots\n", static_cast<unsigned long long>(out.hashes_sent()), resyncs_seen);
  EXPECT_GT(resyncs_seen, 3u) << "the bursts outran the 16-entry log: some Syncs must have resynced";
  // Quiet now: a few more Syncs drain the backlog (or finish a snapshot), and the index holds exactly the live set.
  for (int i = 0; i < 40; ++i) ship();
  const KvEventLog::Snapshot live = log.TakeSnapshot();
  size_t tier_only = 0;
  for (uint8_t m : live.media) tier_only += !(m & MediumBit(KvMedium::kPool));
  EXPECT_EQ(index.size(), log.num_cached(KvMedium::kPool));
  EXPECT_EQ(index.tier_size(), tier_only);
  EXPECT_GT(tier_only, 0u) << "some blocks must be held in a tier only";
  for (uint64_t x : live.hashes) EXPECT_EQ(index.LeadingBlocks({x}, router::KvBlockIndex::Clock::now()), 1) << x;
  for (uint64_t x = 1; x <= 48; ++x) {
    if (std::find(live.hashes.begin(), live.hashes.end(), x) == live.hashes.end()) {
      EXPECT_EQ(index.LeadingBlocks({x}, router::KvBlockIndex::Clock::now()), 0) << x;
    }
  }
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
  // A block evicted from the pool but held in RAM is still a hit; gone from both, it is not.
  log2.Stored(9, 0, KvMedium::kRam), log2.Stored(9, 0), log2.Removed(9);
  ship2();
  EXPECT_EQ(index2.size(), 1u);
  EXPECT_EQ(index2.tier_size(), 1u);
  EXPECT_EQ(index2.LeadingBlocks({9}, router::KvBlockIndex::Clock::now()), 1);
  log2.Removed(9, KvMedium::kRam);
  ship2();
  EXPECT_EQ(index2.LeadingBlocks({9}, router::KvBlockIndex::Clock::now()), 0);
}

TEST(DpRouting, TheJobsEventsAreTheUnionOfEveryGroups) {
  // Two groups' logs (small, so that resyncs happen) with random stores and removals over shared hashes in every
  // medium, shipped through their feeds into one union: once drained, the union's live set is exactly the union
  // of the two live sets, medium by medium, and its log replays to that set.
  std::mt19937 rng(3536);
  KvEventLog logs[2] = {KvEventLog(16), KvEventLog(16)};
  KvEventFeed outs[2] = {KvEventFeed(&logs[0], 6), KvEventFeed(&logs[1], 6)};
  KvEventFeed ins[2] = {KvEventFeed(nullptr), KvEventFeed(nullptr)};
  KvEventUnion all(2);
  std::uniform_int_distribution<int> op(0, 2), h(1, 40), burst(0, 30), medium(0, kNumKvMedia - 1);
  auto ship = [&](int g) {
    wire::Writer w;
    outs[g].Write(w);
    wire::Reader r(w.bytes().data(), w.bytes().size());
    ASSERT_TRUE(ins[g].Read(r, nullptr, kBlock, &all, g));
  };
  std::vector<KvEventLog::Event> replayed;
  auto check = [&](const char* when) {
    std::map<uint64_t, uint8_t> want, got;
    for (const KvEventLog& log : logs) {
      const KvEventLog::Snapshot s = log.TakeSnapshot();
      for (size_t i = 0; i < s.hashes.size(); ++i) want[s.hashes[i]] |= s.media[i];
    }
    const KvEventLog::Snapshot u = all.log().TakeSnapshot();
    for (size_t i = 0; i < u.hashes.size(); ++i) got[u.hashes[i]] = u.media[i];
    EXPECT_EQ(got, want) << when;
  };
  for (int round = 0; round < 200; ++round) {
    for (int g = 0; g < 2; ++g)
      for (int n = burst(rng); n > 0; --n) {
        const uint64_t x = static_cast<uint64_t>(h(rng));
        const KvMedium m = static_cast<KvMedium>(medium(rng));
        if (op(rng) == 0) logs[g].Removed(x, m);
        else logs[g].Stored(x, 0, m);
      }
    ship(0), ship(1);
  }
  EXPECT_GT(outs[0].snapshots() + outs[1].snapshots(), 4u) << "resyncs must have happened";
  for (int i = 0; i < 40; ++i) ship(0), ship(1);
  check("after random traffic");
  // A hash both groups hold stays in the union until the second lets it go.
  logs[0].Stored(100, 0), logs[1].Stored(100, 0);
  ship(0), ship(1);
  auto union_holds = [&](uint64_t x) {
    const KvEventLog::Snapshot s = all.log().TakeSnapshot();
    return std::find(s.hashes.begin(), s.hashes.end(), x) != s.hashes.end();
  };
  EXPECT_TRUE(union_holds(100));
  logs[0].Removed(100);
  ship(0), ship(1);
  EXPECT_TRUE(union_holds(100)) << "group 1 still holds it";
  logs[1].Removed(100);
  ship(0), ship(1);
  EXPECT_FALSE(union_holds(100));
  check("after a shared hash left both groups");
  // The union's own log replayed from the start (it never dropped: 64K entries) holds the same set.
  std::map<uint64_t, uint8_t> replay;
  ASSERT_TRUE(all.log().Since(0, 1 << 20, &replayed));
  for (const auto& e : replayed) {
    if (e.stored) replay[e.hash] |= MediumBit(e.medium);
    else if ((replay[e.hash] &= static_cast<uint8_t>(~MediumBit(e.medium))) == 0) replay.erase(e.hash);
  }
  std::map<uint64_t, uint8_t> now;
  const KvEventLog::Snapshot u = all.log().TakeSnapshot();
  for (size_t i = 0; i < u.hashes.size(); ++i) now[u.hashes[i]] = u.media[i];
  EXPECT_EQ(replay, now);
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
  wire::Writer w3;
  w3.Put<uint8_t>(0);
  w3.PutVector(std::vector<uint64_t>{1});
  w3.PutVector(std::vector<uint8_t>{static_cast<uint8_t>(kNumKvMedia << 1 | 1)});  // a medium that does not exist
  wire::Reader r3(w3.bytes().data(), w3.bytes().size());
  EXPECT_FALSE(in.Read(r3, &index, kBlock));
}

// DistControl itself over two in-process "ranks" (--dp 2, one thread each): its Exchange and Sync over a control
// communicator whose collectives meet in memory, so the routing glue (feeds read per group leader, the policy
// asked per request, the requests reaching the chosen group, the decisions in Reports()) runs without MPI.
class MemoryBus {
 public:
  // Every rank hands in its part; each gets all parts once both arrived.
  std::vector<std::vector<uint8_t>> Meet(int rank, std::vector<uint8_t> part) {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t round = round_;
    parts_[rank] = std::move(part);
    if (++arrived_ == 2) {
      result_ = parts_;
      arrived_ = 0;
      ++round_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return round_ != round; });
    }
    return result_;  // not overwritten before this rank arrives at the next round
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t round_ = 0;
  std::vector<std::vector<uint8_t>> parts_ = std::vector<std::vector<uint8_t>>(2), result_;
};

class BusCommunicator final : public dist::Communicator {
 public:
  BusCommunicator(MemoryBus& bus, int rank) : bus_(bus), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return 2; }
  const std::string& name() const override { return name_; }
  Status AllReduceSum(float*, size_t) override { return Internal("unused"); }
  Status AllReduceMax(int64_t*, size_t) override { return Internal("unused"); }
  Status AllGather(const void*, size_t, void*) override { return Internal("unused"); }
  Status AllGatherV(const void* send, size_t bytes, std::vector<uint8_t>* recv, std::vector<size_t>* sizes) override {
    const auto* p = static_cast<const uint8_t*>(send);
    const auto parts = bus_.Meet(rank_, std::vector<uint8_t>(p, p + bytes));
    recv->clear();
    sizes->clear();
    for (const auto& part : parts) recv->insert(recv->end(), part.begin(), part.end()), sizes->push_back(part.size());
    return Status::Ok();
  }
  Status ReduceScatterSum(const float*, float*, size_t) override { return Internal("unused"); }
  Status AllToAllV(const void*, const size_t*, void*, const size_t*) override { return Internal("unused"); }
  Status AllToAll(const void*, size_t, void*) override { return Internal("unused"); }
  Status Broadcast(void* data, size_t bytes, int root, double) override {
    const auto* p = static_cast<const uint8_t*>(data);
    const auto parts = bus_.Meet(rank_, rank_ == root ? std::vector<uint8_t>(p, p + bytes) : std::vector<uint8_t>{});
    if (parts[root].size() != bytes) return Internal("broadcast: sizes differ");
    if (rank_ != root && bytes) std::memcpy(data, parts[root].data(), bytes);
    return Status::Ok();
  }
  Status Barrier() override { return Internal("unused"); }
  StatusOr<std::unique_ptr<Communicator>> Split(int, int, const std::string&) override { return Internal("unused"); }

 private:
  MemoryBus& bus_;
  const int rank_;
  const std::string name_ = "control";
};

// The engine as DistControl sees it: what was routed here, and this group's prefix cache's change log.
class FakeHost final : public DistControl::Host {
 public:
  void IngestRequests(std::vector<std::unique_ptr<Request>> requests, const std::vector<uint64_t>&) override {
    for (auto& r : requests) ids.push_back(r->id);
  }
  void AbortAll() override {}
  bool HasSequences() const override { return false; }
  int64_t AssignedRequests() const override { return 0; }
  EngineStats LocalStats() const override { return {}; }
  const KvEventLog* KvEvents() const override { return &log; }
  std::vector<uint64_t> ids;
  KvEventLog log;
};

TEST(DpRouting, DistControlRoutesEachPromptToTheGroupWhoseEventsHoldIt) {
  std::mt19937 rng(3500);
  MemoryBus bus;
  struct Rank {
    dist::DistContext ctx;
    FakeHost host;
    RequestInbox inbox;
    std::unique_ptr<DistControl> control;
  };
  std::vector<std::unique_ptr<Rank>> ranks;
  for (int r = 0; r < 2; ++r) {
    auto rk = std::make_unique<Rank>();
    auto pc = dist::ResolveParallel(2, r, /*dp=*/2, 0, 0, 0);
    ASSERT_TRUE(pc.ok());
    rk->ctx.pc = *pc;
    rk->ctx.control = std::make_unique<BusCommunicator>(bus, r);
    rk->ctx.moe = dist::MakeLocalCommunicator("moe");
    rk->ctx.tp = dist::MakeLocalCommunicator("tp");
    rk->ctx.cp = dist::MakeLocalCommunicator("cp");
    rk->control = std::make_unique<DistControl>(rk->ctx, rk->host, rk->inbox, kBlock);
    ranks.push_back(std::move(rk));
  }
  // One engine iteration on both ranks at once.
  auto iterate = [&] {
    std::vector<std::thread> th;
    for (auto& rk : ranks) th.emplace_back([&rk] { rk->control->Exchange(), rk->control->Sync(false); });
    for (std::thread& t : th) t.join();
  };
  // Eight tenants of 3 blocks; tenant t's prefix is cached in group t % 2 (its leader's log says so).
  std::vector<std::vector<int32_t>> prefix;
  for (int t = 0; t < 8; ++t) {
    prefix.push_back(RandomTokens(rng, 3 * kBlock));
    const std::vector<uint64_t> h = PrefixChainHashes(prefix[t].data(), 3 * kBlock, kBlock);
    for (size_t b = 0; b < h.size(); ++b) ranks[t % 2]->host.log.Stored(h[b], b ? h[b - 1] : 0);
  }
  iterate();  // the events reach rank 0 in this Sync
  std::vector<int> want(64);
  std::uniform_int_distribution<int> tenant(0, 7), suffix(0, 2 * kBlock);
  for (int i = 0; i < 64; ++i) {
    want[i] = tenant(rng);
    auto req = std::make_unique<Request>();
    req->id = 1000 + i;
    req->params.n = 1;
    req->prompt = prefix[want[i]];
    const std::vector<int32_t> s = RandomTokens(rng, suffix(rng));
    req->prompt.insert(req->prompt.end(), s.begin(), s.end());
    ASSERT_TRUE(ranks[0]->inbox.Push(std::move(req)).ok());
    if (i % 8 == 7) iterate();  // eight requests per iteration
  }
  // A prompt shorter than a block goes by load: to the group holding fewer unfinished samples (none finish here).
  int per_group[2] = {0, 0};
  for (int t : want) ++per_group[t % 2];
  auto tiny = std::make_unique<Request>();
  tiny->id = 5000;
  tiny->params.n = 1;
  tiny->prompt = RandomTokens(rng, kBlock - 1);
  ASSERT_TRUE(ranks[0]->inbox.Push(std::move(tiny)).ok());
  iterate();
  std::set<uint64_t> got[2] = {{ranks[0]->host.ids.begin(), ranks[0]->host.ids.end()},
                               {ranks[1]->host.ids.begin(), ranks[1]->host.ids.end()}};
  for (int i = 0; i < 64; ++i) EXPECT_TRUE(got[want[i] % 2].count(1000 + i)) << "request " << i << ", tenant " << want[i];
  EXPECT_EQ(got[0].size() + got[1].size(), 65u);
  if (per_group[0] != per_group[1]) {
    EXPECT_TRUE(got[per_group[0] < per_group[1] ? 0 : 1].count(5000)) << per_group[0] << " vs " << per_group[1];
  }
  const std::vector<RankReport> reports = ranks[0]->control->Reports();
  int64_t hits = 0, least = 0;
  for (const RankReport& r : reports) hits += r.routed.cache_hit, least += r.routed.least_load;
  EXPECT_EQ(hits, 64);
  EXPECT_EQ(least, 1);
  EXPECT_GE(reports[1].routed.matched_blocks, 3 * reports[1].routed.cache_hit);
}

}  // namespace
}  // namespace deepinfer
