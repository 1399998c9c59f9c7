// The KV tiers behind the prefix cache (--kv-offload-ram, --kv-store; kv/kv_tiers.h), end to end through the
// engine on tiny random models: a prefix the pool evicted is served from RAM, or from disk after a restart, with
// outputs bitwise those of a cold run and the loaded blocks counted as cached tokens; stored files that were
// corrupted, truncated or written by another model are misses, never served; a full store evicts and keeps going.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine_harness.h"
#include "kv/prefix_hash.h"
#include "model/make_tiny.h"

namespace deepinfer::testing {
namespace {

namespace fs = std::filesystem;

TinySpec TierSpec(uint64_t seed) {
  TinySpec s = SmallSpec(Arch::kLlama);
  s.seed = seed;
  s.vocab_seed = 7;  // every model here shares one vocabulary: only the weights tell them apart
  return s;
}

const Model& TierModel() {
  static std::unique_ptr<Model> m = MakeTiny(TierSpec(1), "tiers_a");
  return *m;
}
// The same architecture, shapes and vocabulary with other weights (another seed): its K/V must never be reused.
const Model& OtherModel() {
  static std::unique_ptr<Model> m = MakeTiny(TierSpec(2), "tiers_b");
  return *m;
}

std::vector<int32_t> RandomPrompt(std::mt19937* rng, int n, int vocab) {
  std::vector<int32_t> p(n);
  for (auto& t : p) t = 3 + static_cast<int32_t>((*rng)() % (vocab - 3));
  return p;
}

RequestParams Params() {
  RequestParams p;
  p.max_tokens = 12;
  p.ignore_eos = true;
  p.logprobs = 2;
  p.temperature = 0.8f;  // seeded sampling: the log-probs and the draws both depend on every K/V byte
  p.seed = 11;
  return p;
}

// A small pool (the working set of three prompts does not fit) with 8-token blocks.
EngineOptions TierEngine() {
  EngineOptions o;
  o.max_num_seqs = 4;
  o.max_batched_tokens = 64;
  o.block_size = 8;
  o.num_kv_blocks = 26;
  return o;
}

// Runs one request to completion on `e` (RunUntilIdle on this thread).
RequestResult RunOne(Engine& e, const std::vector<int32_t>& prompt) {
  RequestResult out;
  out.samples.resize(1);
  auto id = e.Add(prompt, Params(), [&out](const RequestOutput& ev) {
    SampleResult& s = out.samples[0];
    s.tokens.insert(s.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
    for (const auto& lp : ev.logprobs) {
      s.logprobs.push_back(lp.logprob);
      s.top.push_back(lp.top);
    }
    s.text += ev.text;
    out.cached_tokens = ev.cached_tokens;
    if (ev.finished) {
      ++s.finals;
      s.finish_reason = ev.finish_reason;
    }
  });
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_TRUE(e.RunUntilIdle().ok());
  return out;
}

// The prompt's output with no prefix cache and no tiers: the reference every hit must equal bit for bit.
RequestResult Cold(const Model& m, const std::vector<int32_t>& prompt) {
  EngineOptions o = TierEngine();
  o.prefix_caching = false;
  auto e = Engine::Create(m, o);
  EXPECT_TRUE(e.ok());
  return RunOne(**e, prompt);
}


std::vector<fs::path> StoreFiles(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& f : fs::directory_iterator(dir))
    if (f.path().extension() == ".kvb") out.push_back(f.path());
  std::sort(out.begin(), out.end());
  return out;
}

constexpr int kPromptLen = 101;
constexpr int kFullHit = (kPromptLen - 1) / 8 * 8;  // every full block but the one holding the last prompt token

// Must-show 1 (RAM): a prompt's blocks are evicted from the pool by other traffic, then the same prompt again is
// a hit from the RAM tier: cached tokens counted, outputs bitwise the cold run's.
TEST(KvTiersTest, RamTierServesWhatThePoolEvicted) {
  const Model& m = TierModel();
  std::mt19937 rng(101);
  const auto a = RandomPrompt(&rng, kPromptLen, m.config.vocab_size);
  const auto b = RandomPrompt(&rng, 150, m.config.vocab_size);
  const auto c = RandomPrompt(&rng, 150, m.config.vocab_size);
  const RequestResult ref = Cold(m, a);
  EngineOptions o = TierEngine();
  o.kv_offload_ram_bytes = size_t{64} << 20;
  auto e = MakeEngine(m, o);
  ASSERT_TRUE(e);
  const RequestResult first = RunOne(*e, a);
  EXPECT_EQ(first.cached_tokens, 0);
  RunOne(*e, b);  // other traffic: the pool of 26 blocks cannot keep a's 14 blocks through b's and c's 21
  RunOne(*e, c);
  e->FlushKvTiers();
  const int64_t ram_hits_before = e->Stats().kv_tiers.ram_hits;
  const RequestResult again = RunOne(*e, a);
  const KvTierStats st = e->Stats().kv_tiers;
  ExpectSameResults({ref}, {first}, "first run");
  ExpectSameResults({ref}, {again}, "RAM-tier hit");
  EXPECT_EQ(again.cached_tokens, kFullHit);
  EXPECT_GT(st.ram_hits - ram_hits_before, 0) << "the pool had evicted a's blocks: the hit must come from RAM";
  EXPECT_GT(st.ram_bytes_written, 0);
  EXPECT_GT(st.ram_bytes_read, 0);
  EXPECT_EQ(st.disk_hits, 0);
  EXPECT_TRUE(e->CheckNoLeaks().ok());
}

// A prefix the pool keeps serving is touched in the RAM tier on every pool hit, so the tier evicts what was stored
// after it but not used since: when the pool finally drops the prefix, RAM still holds it. Without the touches it
// would be the tier's oldest entry and the first evicted (the hit below would be 0 tokens).
TEST(KvTiersTest, PoolHitsKeepAPrefixInTheRamTier) {
  const Model& m = TierModel();
  std::mt19937 rng(303);
  const auto a = RandomPrompt(&rng, kPromptLen, m.config.vocab_size);
  const auto d = RandomPrompt(&rng, 41, m.config.vocab_size);
  const auto f = RandomPrompt(&rng, 41, m.config.vocab_size);
  const RequestResult ref = Cold(m, a);
  // The entries each request stores and an entry's size, from an engine whose RAM tier holds everything.
  int64_t entries_a = 0, entries_d = 0, entry_bytes = 0;
  {
    EngineOptions o = TierEngine();
    o.kv_offload_ram_bytes = size_t{64} << 20;
    auto e = MakeEngine(m, o);
    ASSERT_TRUE(e);
    RunOne(*e, a);
    e->FlushKvTiers();
    entries_a = e->Stats().kv_tiers.ram_entries;
    RunOne(*e, d);
    e->FlushKvTiers();
    const KvTierStats st = e->Stats().kv_tiers;
    entries_d = st.ram_entries - entries_a;
    ASSERT_GT(entries_d, 0);
    entry_bytes = st.ram_bytes / st.ram_entries;
  }
  EngineOptions o = TierEngine();
  o.kv_offload_ram_bytes = static_cast<size_t>((entries_a + entries_d) * entry_bytes);  // a and d, no more
  auto e = MakeEngine(m, o);
  ASSERT_TRUE(e);
  RunOne(*e, a);
  RunOne(*e, d);
  e->FlushKvTiers();
  ASSERT_EQ(e->Stats().kv_tiers.ram_entries, entries_a + entries_d);
  const RequestResult pool_hit = RunOne(*e, a);  // served from the pool, which touches a's entries in RAM
  EXPECT_EQ(pool_hit.cached_tokens, kFullHit);
  RunOne(*e, f);  // f's entries evict d's, the least recently used
  e->FlushKvTiers();
  e->EvictCachedKv(false);  // the pool drops everything
  const int64_t ram_hits_before = e->Stats().kv_tiers.ram_hits;
  const RequestResult again = RunOne(*e, a);
  ExpectSameResults({ref}, {again}, "RAM-tier hit after pool hits");
  EXPECT_EQ(again.cached_tokens, kFullHit) << "a's entries were evicted from RAM although the pool kept serving it";
  EXPECT_GE(e->Stats().kv_tiers.ram_hits - ram_hits_before, kFullHit / 8);
  EXPECT_TRUE(e->CheckNoLeaks().ok());
}

// Must-show 1 (disk): a fresh engine on the same --kv-store serves the prefix from disk.
TEST(KvTiersTest, DiskTierServesAfterRestart) {
  const Model& m = TierModel();
  TempDir dir("restart");
  std::mt19937 rng(202);
  const auto a = RandomPrompt(&rng, kPromptLen, m.config.vocab_size);
  const RequestResult ref = Cold(m, a);
  EngineOptions o = TierEngine();
  o.kv_store_dir = dir.path.string();
  o.kv_store_bytes = size_t{64} << 20;
  {
    auto e = MakeEngine(m, o);
    ASSERT_TRUE(e);
    ExpectSameResults({ref}, {RunOne(*e, a)}, "first run");
    e->FlushKvTiers();
    EXPECT_GE(e->Stats().kv_tiers.disk_blocks_written, kFullHit / 8);
  }  // the engine is gone: only the files remain
  o.kv_offload_ram_bytes = size_t{64} << 20;  // and a RAM tier, which the disk hits are promoted to
  auto e = MakeEngine(m, o);
  ASSERT_TRUE(e);
  EXPECT_GE(e->Stats().kv_tiers.disk_entries, kFullHit / 8) << "the restarted store indexes the earlier entries";
  const RequestResult again = RunOne(*e, a);
  ExpectSameResults({ref}, {again}, "disk-tier hit after restart");
  EXPECT_EQ(again.cached_tokens, kFullHit);
  EXPECT_EQ(e->Stats().kv_tiers.disk_hits, kFullHit / 8);
  EXPECT_EQ(e->Stats().kv_tiers.disk_rejected_reads, 0);
  // The disk hits were promoted to RAM (off the engine thread): once the pool evicts them, RAM serves them.
  e->FlushKvTiers();
  e->EvictCachedKv(false);
  const RequestResult third = RunOne(*e, a);
  ExpectSameResults({ref}, {third}, "RAM hit of promoted blocks");
  EXPECT_EQ(third.cached_tokens, kFullHit);
  EXPECT_EQ(e->Stats().kv_tiers.ram_hits, kFullHit / 8);
  EXPECT_EQ(e->Stats().kv_tiers.disk_hits, kFullHit / 8);
}

// The tiers' blocks are KV events too (GET /v1/kv_events, medium "ram" / "disk"): a router counts a prefix the
// pool evicted but a tier holds as a hit on this replica, and a restarted server's store is announced at once.
TEST(KvTiersTest, TiersReportTheirBlocksAsKvEvents) {
  const Model& m = TierModel();
  TempDir dir("events");
  std::mt19937 rng(204);
  const auto a = RandomPrompt(&rng, kPromptLen, m.config.vocab_size);
  const std::vector<uint64_t> chains = PrefixChainHashes(a.data(), kPromptLen, 8);
  const int blocks = kFullHit / 8;
  auto held_in = [&](const KvEventLog& log, uint8_t want) {
    const KvEventLog::Snapshot s = log.TakeSnapshot();
    int n = 0;
    for (int i = 0; i < blocks; ++i) {
      auto it = std::find(s.hashes.begin(), s.hashes.end(), chains[i]);
      n += it != s.hashes.end() && s.media[it - s.hashes.begin()] == want;
    }
    return n;
  };
  const uint8_t ram = MediumBit(KvMedium::kRam), disk = MediumBit(KvMedium::kDisk), pool = MediumBit(KvMedium::kPool);
  EngineOptions o = TierEngine();
  o.kv_store_dir = dir.path.string();
  o.kv_store_bytes = size_t{64} << 20;
  o.kv_offload_ram_bytes = size_t{64} << 20;
  {
    auto e = MakeEngine(m, o);
    ASSERT_TRUE(e);
    RunOne(*e, a);
    e->FlushKvTiers();
    EXPECT_EQ(held_in(e->kv_events(), pool | ram | disk), blocks) << "each block in the pool, RAM and on disk";
    e->EvictCachedKv(false);
    EXPECT_EQ(held_in(e->kv_events(), ram | disk), blocks) << "evicted from the pool, still held by both tiers";
    EXPECT_GE(e->kv_events().num_cached(KvMedium::kRam), static_cast<size_t>(blocks));  // and the output's blocks
    EXPECT_EQ(e->kv_events().num_cached(KvMedium::kPool), 0u);
  }
  o.kv_offload_ram_bytes = 0;
  auto e = MakeEngine(m, o);
  ASSERT_TRUE(e);
  EXPECT_EQ(held_in(e->kv_events(), disk), blocks) << "the restarted store's entries are announced before any request";
  // A file that fails validation on read is reported removed (the load misses from there on).
  std::vector<KvEventLog::Event> evs;
  const uint64_t seen = e->kv_events().last_seq();
  for (const fs::path& f : StoreFiles(dir.path)) fs::resize_file(f, 100);
  const RequestResult again = RunOne(*e, a);
  EXPECT_EQ(again.cached_tokens, 0);
  ASSERT_TRUE(e->kv_events().Since(seen, 1000, &evs));
  EXPECT_TRUE(std::any_of(evs.begin(), evs.end(), [&](const KvEventLog::Event& ev) {
    return !ev.stored && ev.medium == KvMedium::kDisk && ev.hash == chains[0];
  })) << "the damaged first block reported removed from disk";
}

// Must-show 2: whatever was done to the stored files, a restarted engine never serves a block that does not
// validate; its output stays the cold run's.
enum class Damage { kFlipPayload, kFlipOneFile, kTruncate, kOtherModel };

void RunDamaged(Damage damage) {
  const Model& m = TierModel();
  TempDir dir("damage" + std::to_string(static_cast<int>(damage)));
  std::mt19937 rng(303);
  const auto a = RandomPrompt(&rng, kPromptLen, m.config.vocab_size);
  EngineOptions o = TierEngine();
  o.kv_store_dir = dir.path.string();
  o.kv_store_bytes = size_t{64} << 20;
  {
    auto e = MakeEngine(m, o);
    ASSERT_TRUE(e);
    RunOne(*e, a);
  }
  std::vector<fs::path> files = StoreFiles(dir.path);
  ASSERT_GE(static_cast<int>(files.size()), kFullHit / 8);
  if (damage == Damage::kFlipOneFile) {
    // The file of block 4: its header's chain hash (offset 24, after magic, version, header size and digest).
    const uint64_t want = PrefixChainHashes(a.data(), kPromptLen, 8)[4];
    std::vector<fs::path> block4;
    for (const fs::path& f : files) {
      std::ifstream in(f, std::ios::binary);
      uint64_t chain = 0;
      in.seekg(24);
      in.read(reinterpret_cast<char*>(&chain), sizeof chain);
      if (chain == want) block4.push_back(f);
    }
    ASSERT_EQ(block4.size(), 1u);
    files = block4;
  }
  for (const fs::path& f : files) {
    const auto size = fs::file_size(f);
    if (damage == Damage::kTruncate) {
      fs::resize_file(f, size - 5);
    } else if (damage != Damage::kOtherModel) {
      std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
      // One byte in the K/V payload, past the 72-byte header and the block's tokens: the header still validates.
      const std::streamoff at = 72 + 8 * 4 + static_cast<std::streamoff>(rng() % (size - 72 - 32));
      io.seekg(at);
      char byte = 0;
      io.read(&byte, 1);
      byte = static_cast<char>(byte ^ 0x40);
      io.seekp(at);
      io.write(&byte, 1);
    }
  }
  const Model& served = damage == Damage::kOtherModel ? OtherModel() : m;
  const RequestResult ref = Cold(served, a);
  auto e = MakeEngine(served, o);
  ASSERT_TRUE(e);
  const RequestResult got = RunOne(*e, a);
  const KvTierStats st = e->Stats().kv_tiers;
  ExpectSameResults({ref}, {got}, "after damage");
  switch (damage) {
    case Damage::kFlipPayload:  // headers validate at start-up; every read fails its checksum
      EXPECT_EQ(got.cached_tokens, 0);
      EXPECT_EQ(st.disk_hits, 0);
      EXPECT_GE(st.disk_rejected_reads, 1);
      break;
    case Damage::kFlipOneFile:  // the chain is served up to the damaged block, not through it
      EXPECT_EQ(got.cached_tokens, 4 * 8);
      EXPECT_EQ(st.disk_rejected_reads, 1);
      EXPECT_EQ(st.disk_hits, 4);
      break;
    case Damage::kTruncate:  // rejected (and removed) at start-up
      EXPECT_EQ(got.cached_tokens, 0);
      EXPECT_EQ(st.disk_hits, 0);
      EXPECT_GE(st.disk_rejected_at_open, kFullHit / 8);
      break;
    case Damage::kOtherModel:  // another model's entries: never this model's hits, and left alone
      EXPECT_EQ(got.cached_tokens, 0);
      EXPECT_GE(st.disk_foreign_at_open, kFullHit / 8);
      EXPECT_EQ(st.disk_hits, 0);
      break;
  }
}

TEST(KvTiersTest, FlippedPayloadByteIsAMiss) { RunDamaged(Damage::kFlipPayload); }
TEST(KvTiersTest, OneDamagedFileStopsTheHitThere) { RunDamaged(Damage::kFlipOneFile); }
TEST(KvTiersTest, TruncatedFileIsRejectedAtStartup) { RunDamaged(Damage::kTruncate); }
TEST(KvTiersTest, AnotherModelNeverReusesEntries) { RunDamaged(Damage::kOtherModel); }

// Must-show 3: a store too small for the traffic evicts least-recently-used files, stays within its size, and
// keeps serving what it holds.
TEST(KvTiersTest, FullStoreEvictsLruAndKeepsWorking) {
  const Model& m = TierModel();
  TempDir dir("full");
  std::mt19937 rng(404);
  EngineOptions o = TierEngine();
  o.kv_store_dir = dir.path.string();
  o.kv_store_bytes = size_t{64} << 20;
  size_t file_bytes = 0;
  {
    auto e = MakeEngine(m, o);
    ASSERT_TRUE(e);
    RunOne(*e, RandomPrompt(&rng, 17, m.config.vocab_size));
    e->FlushKvTiers();
    const KvTierStats st = e->Stats().kv_tiers;
    ASSERT_GT(st.disk_entries, 0);
    file_bytes = static_cast<size_t>(st.disk_bytes / st.disk_entries);
  }
  fs::remove_all(dir.path);
  o.kv_store_bytes = 6 * file_bytes;  // six blocks
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 3; ++i) prompts.push_back(RandomPrompt(&rng, kPromptLen, m.config.vocab_size));
  const auto d = RandomPrompt(&rng, 33, m.config.vocab_size);  // 4 reusable blocks: fits
  {
    auto e = MakeEngine(m, o);
    ASSERT_TRUE(e);
    for (const auto& p : prompts) {
      RunOne(*e, p);
      e->FlushKvTiers();
      const KvTierStats st = e->Stats().kv_tiers;
      EXPECT_LE(static_cast<size_t>(st.disk_bytes), o.kv_store_bytes);
      EXPECT_LE(st.disk_entries, 6);
    }
    EXPECT_GT(e->Stats().kv_tiers.disk_evictions, 0);
    RunOne(*e, d);
    e->FlushKvTiers();
    EXPECT_LE(static_cast<int>(StoreFiles(dir.path).size()), 6);
  }
  auto e = MakeEngine(m, o);
  ASSERT_TRUE(e);
  const RequestResult got = RunOne(*e, d);
  ExpectSameResults({Cold(m, d)}, {got}, "hit from a full store");
  EXPECT_EQ(got.cached_tokens, 32);
  EXPECT_EQ(e->Stats().kv_tiers.disk_hits, 4);
  // The evicted prompts are misses now, and still right.
  const RequestResult old = RunOne(*e, prompts[0]);
  ExpectSameResults({Cold(m, prompts[0])}, {old}, "an evicted prompt");
}

// The flags refuse what the tiers cannot store exactly, naming why.
TEST(KvTiersTest, RefusesWithoutPrefixCacheAndWithoutSize) {
  const Model& m = TierModel();
  EngineOptions o = TierEngine();
  o.kv_offload_ram_bytes = size_t{1} << 20;
  o.prefix_caching = false;
  auto e = Engine::Create(m, o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("prefix cache"), std::string::npos);
  o = TierEngine();
  o.kv_store_dir = "/nonexistent-dir-for-test";
  auto e2 = Engine::Create(m, o);
  ASSERT_FALSE(e2.ok());
  EXPECT_NE(e2.status().message().find("--kv-store-size"), std::string::npos);
}

// Loads off the engine thread (issue 35: "the request waits in a loading state, the batch does not"). A gate
// on the tiers' loader thread holds a load in flight for as long as a test needs.
class LoadGate {
 public:
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  void Pass() {  // the loader thread, before each load
    if (on_enter) on_enter();
    std::unique_lock<std::mutex> lock(mu_);
    ++entered_;
    cv_.wait(lock, [&] { return open_; });
  }
  std::function<void()> on_enter;  // set before the engine starts
  int entered() {  // loads that reached the gate
    std::lock_guard<std::mutex> lock(mu_);
    return entered_;
  }

 private:
  int entered_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
};

// Outputs of requests running on the engine's own thread (Start), read from the test thread.
struct Collected {
  std::mutex mu;
  std::vector<RequestResult> results;
  OutputCallback Callback(int i) {
    return [this, i](const RequestOutput& ev) {
      std::lock_guard<std::mutex> lock(mu);
      SampleResult& s = results[i].samples[0];
      s.tokens.insert(s.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
      for (const auto& lp : ev.logprobs) {
        s.logprobs.push_back(lp.logprob);
        s.top.push_back(lp.top);
      }
      s.text += ev.text;
      results[i].cached_tokens = ev.cached_tokens;
      if (ev.finished) {
        ++s.finals;
        s.finish_reason = ev.finish_reason;
      }
    };
  }
  explicit Collected(int n) : results(n) {
    for (auto& r : results) r.samples.resize(1);
  }
  size_t tokens(int i) {
    std::lock_guard<std::mutex> lock(mu);
    return results[i].samples[0].tokens.size();
  }
  bool finished(int i) {
    std::lock_guard<std::mutex> lock(mu);
    return results[i].samples[0].finals > 0;
  }
};

// Polls `done` for up to 60 s (the engine runs on its own thread); false on timeout.
bool WaitFor(const std::function<bool()>& done) {
  for (int i = 0; i < 60000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// An engine with a RAM tier and a gated loader whose pool no longer holds `a` (other traffic evicted it) while
// the RAM tier does.
std::unique_ptr<Engine> GatedEngineWithAInRam(const Model& m, LoadGate* gate, const std::vector<int32_t>& a) {
  EngineOptions o = TierEngine();
  o.num_kv_blocks = 96;  // room for a long decode beside a's prefix
  // At least 0.5 ms per step (busy-work on the engine thread): the long decode below takes 200 ms or more, so it
  // is still early in it when a's load begins, whatever the machine's speed.
  o.host_overhead_us = 500;
  o.kv_offload_ram_bytes = size_t{64} << 20;
  o.kv_tier_before_load = [gate] { gate->Pass(); };
  auto e = MakeEngine(m, o);
  if (!e) return nullptr;
  RunOne(*e, a);
  e->FlushKvTiers();
  e->EvictCachedKv(false);  // the pool drops a; RAM keeps it
  return e;
}

constexpr int kLongTokens = 400;
RequestParams LongParams() {
  RequestParams p = Params();
  p.max_tokens = kLongTokens;
  return p;
}

// While a prefix load is held in flight, a running request decodes to its end (steps go on without the loading
// one); once the load is let through, the loading request is admitted with the whole prefix as cached tokens, and
// both outputs are bitwise their cold runs'.
TEST(KvTiersTest, StepsGoOnWhileAPrefixLoads) {
  const Model& m = TierModel();
  std::mt19937 rng(404);
  const auto a = RandomPrompt(&rng, kPromptLen, m.config.vocab_size);
  const auto d = RandomPrompt(&rng, 33, m.config.vocab_size);
  const RequestResult ref_a = Cold(m, a);
  RequestResult ref_d;
  {
    EngineOptions o = TierEngine();
    o.prefix_caching = false;
    o.num_kv_blocks = 96;
    auto cold = MakeEngine(m, o);
    ASSERT_TRUE(cold);
    ref_d.samples.resize(1);
    Collected c(1);
    ASSERT_TRUE(cold->Add(d, LongParams(), c.Callback(0)).ok());
    ASSERT_TRUE(cold->RunUntilIdle().ok());
    ref_d = c.results[0];
  }
  LoadGate gate;
  Collected c(2);
  std::atomic<size_t> d_at_load{0};
  gate.on_enter = [&] { d_at_load = c.tokens(0); };  // on the loader thread, as a's load begins
  auto e = GatedEngineWithAInRam(m, &gate, a);
  ASSERT_TRUE(e);
  const int64_t ram_hits_before = e->Stats().kv_tiers.ram_hits;
  e->Start();
  ASSERT_TRUE(e->Add(d, LongParams(), c.Callback(0)).ok());
  ASSERT_TRUE(WaitFor([&] { return c.tokens(0) >= 1; })) << "d never started";
  gate.Close();
  ASSERT_TRUE(e->Add(a, Params(), c.Callback(1)).ok());
  ASSERT_TRUE(WaitFor([&] { return gate.entered() == 1; })) << "a never waited on a load";
  EXPECT_LT(d_at_load.load(), static_cast<size_t>(kLongTokens - 50)) << "d was nearly done before a's load began";
  // d decodes to its end while a's load is held: the step loop does not wait for it.
  EXPECT_TRUE(WaitFor([&] { return c.finished(0); })) << "d stopped decoding while a's prefix loaded";
  EXPECT_EQ(c.tokens(0), static_cast<size_t>(kLongTokens));
  EXPECT_EQ(c.tokens(1), 0u) << "a ran before its load was done";
  EXPECT_EQ(e->Stats().loading, 1);
  EXPECT_EQ(e->Stats().kv_tiers.loads_in_flight, 1);
  EXPECT_EQ(e->Stats().kv_tiers.loading_requests, 1);
  gate.Open();
  ASSERT_TRUE(WaitFor([&] { return c.finished(0) && c.finished(1); }));
  ASSERT_TRUE(e->Shutdown().ok());
  ExpectSameResults({ref_d}, {c.results[0]}, "d, decoding while a loaded");
  ExpectSameResults({ref_a}, {c.results[1]}, "a, admitted after its load");
  EXPECT_EQ(c.results[1].cached_tokens, kFullHit);
  EXPECT_EQ(e->Stats().kv_tiers.ram_hits - ram_hits_before, kFullHit / 8);
  EXPECT_EQ(e->Stats().kv_tiers.loads_in_flight, 0);
}

// Two requests with one prefix arriving while it loads wait on the one load (the blocks are read once), and an
// aborted request's load still completes into the pool's cache: nothing leaks, and the next request hits it.
TEST(KvTiersTest, OneLoadPerPrefixAndAbortsWhileLoadingLoseNothing) {
  const Model& m = TierModel();
  std::mt19937 rng(505);
  const auto a = RandomPrompt(&rng, kPromptLen, m.config.vocab_size);
  const RequestResult ref_a = Cold(m, a);
  LoadGate gate;
  auto e = GatedEngineWithAInRam(m, &gate, a);
  ASSERT_TRUE(e);
  const int64_t ram_hits_before = e->Stats().kv_tiers.ram_hits;
  Collected c(3);
  e->Start();
  gate.Close();
  auto first = e->Add(a, Params(), c.Callback(0));
  auto second = e->Add(a, Params(), c.Callback(1));
  ASSERT_TRUE(first.ok() && second.ok());
  ASSERT_TRUE(WaitFor([&] { return e->Stats().loading == 2 && gate.entered() == 1; }))
      << "both requests wait on a load";
  EXPECT_EQ(e->Stats().kv_tiers.loads_in_flight, 1) << "one load for one prefix";
  e->Abort(*first);
  ASSERT_TRUE(WaitFor([&] { return c.finished(0) && e->Stats().loading == 1; }));
  gate.Open();
  ASSERT_TRUE(WaitFor([&] { return c.finished(1); }));
  EXPECT_EQ(c.results[0].samples[0].finish_reason, "abort");
  ExpectSameResults({ref_a}, {c.results[1]}, "a, the load's remaining waiter");
  EXPECT_EQ(c.results[1].cached_tokens, kFullHit);
  EXPECT_EQ(e->Stats().kv_tiers.ram_hits - ram_hits_before, kFullHit / 8) << "the prefix's blocks were read twice";
  ASSERT_TRUE(e->Shutdown().ok());
  // Every waiter aborted (a fresh engine, whose pool again lacks a): the load completes unowned, its blocks go to
  // the pool's cache, none leaks.
  LoadGate gate2;
  auto e2 = GatedEngineWithAInRam(m, &gate2, a);
  ASSERT_TRUE(e2);
  e2->Start();
  gate2.Close();
  auto third = e2->Add(a, Params(), c.Callback(2));
  ASSERT_TRUE(third.ok());
  ASSERT_TRUE(WaitFor([&] { return e2->Stats().loading == 1 && gate2.entered() == 1; }));
  e2->Abort(*third);
  ASSERT_TRUE(WaitFor([&] { return c.finished(2); }));
  gate2.Open();
  ASSERT_TRUE(e2->Shutdown().ok()) << "blocks of an unowned load leaked";
  EXPECT_EQ(e2->Stats().kv_tiers.loads_in_flight, 0);
}

}  // namespace
}  // namespace deepinfer::testing
