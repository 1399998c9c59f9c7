// The KV tiers with a hybrid KV cache (sliding-window groups next to a full-attention anchor; kv/kv_tiers.h,
// docs/architecture.md "KV tiers and persistence"): every group's published blocks are written through, the
// windowed ones tied to the anchor's block of the same positions, and a prefix the pool lost comes back from RAM
// or (after a restart) disk with its windows, as a direct hit. With the windows gone from the store, the full
// groups' blocks alone give a bounded replay. Every output is bitwise that of a cold engine.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine_harness.h"
#include "kv/kv_groups.h"
#include "kv/kv_tier_format.h"
#include "kv/prefix_hash.h"
#include "model/make_tiny.h"

namespace deepinfer::testing {
namespace {

namespace fs = std::filesystem;

RequestResult RunSeededRequest(Engine& e, const std::vector<int32_t>& prompt) {
  RequestParams p;
  p.max_tokens = 8;
  p.ignore_eos = true;
  p.logprobs = 20;
  p.seed = 7;
  p.temperature = 0.8f;  // seeded sampling: the log-probs and the draws depend on every K/V byte
  RequestResult out;
  out.samples.resize(1);
  auto id = e.Add(prompt, p, [&out](const RequestOutput& ev) {
    SampleResult& s = out.samples[0];
    s.tokens.insert(s.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
    for (const auto& lp : ev.logprobs) {
      s.logprobs.push_back(lp.logprob);
      s.top.push_back(lp.top);
    }
    s.text += ev.text;
    out.cached_tokens = ev.cached_tokens;
    out.replayed_tokens = ev.replayed_tokens;
    if (ev.finished) ++s.finals, s.finish_reason = ev.finish_reason;
  });
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_TRUE(e.RunUntilIdle().ok());
  return out;
}


// Removes every stored file but the full-attention groups': those whose header names a chain hash of `prompt`
// (group 0's) or a full group's key of one (kv_tier_format.h, TierGroupChain).
int KeepOnlyFullGroupFiles(const fs::path& dir, const std::vector<int32_t>& prompt, int bs, const KvLayout& k) {
  std::set<uint64_t> full;
  for (const uint64_t c : PrefixChainHashes(prompt.data(), static_cast<int>(prompt.size()), bs))
    for (int g = 0; g < k.num_groups(); ++g)
      if (k.window(g) == 0) full.insert(TierGroupChain(c, g));
  int removed = 0;
  for (const auto& f : fs::directory_iterator(dir)) {
    if (f.path().extension() != ".kvb") continue;
    DiskBlockHeader h;
    std::ifstream in(f.path(), std::ios::binary);
    in.read(reinterpret_cast<char*>(&h), sizeof h);
    EXPECT_TRUE(in.good()) << f.path();
    in.close();
    if (!full.count(h.chain_hash)) {
      fs::remove(f.path());
      ++removed;
    }
  }
  return removed;
}

enum class Where { kRam, kDisk, kDiskAnchorsOnly };
const char* WhereName(Where w) {
  return w == Where::kRam ? "RAM" : w == Where::kDisk ? "disk after a restart" : "disk, windows removed";
}

// A writes a 200-token prompt through to the tiers; the pool then loses everything (RAM: evicted; disk: the
// engine restarts); B shares `shared` tokens with A. From the tiers B gets the anchor's shared blocks and the
// windows at the hit (cached = the shared whole blocks, nothing replayed); with the window files removed, the
// anchor's blocks alone (a bounded replay: cached 0, replayed = min(blocks, R)). Blocks of bs, chunks of 32,
// replay bound R.
// `base`: the engine's other options (speculation: --speculative mtp hits one block short of the shared blocks,
// Scheduler's prefix_drop_last_block).
void ExpectTierHitsColdExact(const Model& m, int bs, int R, const std::vector<int>& shares, const char* tag,
                             const EngineOptions& base = EngineOptions()) {
  std::mt19937 rng(6060);
  auto random_tokens = [&](int n) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(static_cast<int32_t>(3 + rng() % (m.config.vocab_size - 3)));
    return t;
  };
  const std::vector<int32_t> a = random_tokens(200);
  EngineOptions o = base;
  o.max_num_seqs = 4;
  o.max_batched_tokens = 32;  // chunks straddle the window edge and the replay end
  o.block_size = bs;
  o.num_kv_blocks = 1024;
  o.swa_replay_max = R;
  EngineOptions cold = o;
  cold.prefix_caching = false;
  std::printf("[tiers-hybrid] %s bs=%d R=%d: shared s -> cached + replayed per tier\n", tag, bs, R);
  for (const int shared : shares) {
    std::vector<int32_t> b(a.begin(), a.begin() + shared);
    const std::vector<int32_t> own = random_tokens(30);
    b.insert(b.end(), own.begin(), own.end());
    auto ce = MakeEngine(m, cold);
    ASSERT_TRUE(ce);
    const RequestResult ref = RunSeededRequest(*ce, b);
    const int drop = base.speculative == SpecMethod::kMtp ? 1 : 0;
    const int blocks = std::max(0, std::min(shared, static_cast<int>(b.size()) - 1) / bs - drop) * bs;
    std::string line;
    for (const Where where : {Where::kRam, Where::kDisk, Where::kDiskAnchorsOnly}) {
      TempDir dir("hybrid_" + std::to_string(shared));
      EngineOptions t = o;
      if (where == Where::kRam) {
        t.kv_offload_ram_bytes = size_t{64} << 20;
      } else {
        t.kv_store_dir = dir.path.string();
        t.kv_store_bytes = size_t{64} << 20;
      }
      auto e = MakeEngine(m, t);
      ASSERT_TRUE(e);
      RunSeededRequest(*e, a);
      e->FlushKvTiers();
      const KvTierStats wrote = e->Stats().kv_tiers;
      EXPECT_GT(where == Where::kRam ? wrote.ram_blocks_written : wrote.disk_blocks_written, 200 / bs)
          << tag << ": the windowed groups' blocks are written through besides the anchor's";
      if (where == Where::kRam) {
        e->EvictCachedKv(false);  // as memory pressure would
      } else {
        const KvLayout layout = e->kv_layout();
        e.reset();  // only the files remain
        if (where == Where::kDiskAnchorsOnly) {
          EXPECT_GT(KeepOnlyFullGroupFiles(dir.path, a, bs, layout), 0);
        }
        e = MakeEngine(m, t);
        ASSERT_TRUE(e);
      }
      const RequestResult got = RunSeededRequest(*e, b);
      ASSERT_TRUE(e->CheckNoLeaks().ok());
      const std::string what = std::string(tag) + ": shared " + std::to_string(shared) + ", " + WhereName(where);
      ExpectSameResults({ref}, {got}, what);
      const KvTierStats st = e->Stats().kv_tiers;
      const int64_t hits = where == Where::kRam ? st.ram_hits : st.disk_hits;
      if (where == Where::kDiskAnchorsOnly) {
        EXPECT_EQ(got.cached_tokens, 0) << what;
        EXPECT_EQ(got.replayed_tokens, std::min(blocks, R)) << what;
        int full_groups = 0;
        for (int g = 0; g < e->kv_layout().num_groups(); ++g) full_groups += e->kv_layout().window(g) == 0;
        // With MTP, one block more: the one its admission drops (Scheduler::PlanTierLoad).
        EXPECT_EQ(hits, full_groups * (std::min(blocks, R) / bs + drop)) << what << ": the full groups' blocks up to R";
      } else {
        EXPECT_EQ(got.cached_tokens, blocks) << what;
        EXPECT_EQ(got.replayed_tokens, 0) << what << ": the windows came back from the tier";
        // The anchor's shared blocks and each windowed group's blocks of the window at the hit.
        const KvLayout& k = e->kv_layout();
        int64_t expect = 0;
        for (int g = 0; g < k.num_groups(); ++g)
          expect += k.window(g) > 0 ? blocks / bs - WindowKeepFrom(k.window(g), blocks, bs) : blocks / bs + drop;
        EXPECT_EQ(hits, expect) << what;
      }
      EXPECT_EQ(st.disk_rejected_reads, 0) << what;
      line += std::string("  ") + WhereName(where) + ": " + std::to_string(got.cached_tokens) + " + " +
              std::to_string(got.replayed_tokens) + " (" + std::to_string(hits) + " blocks read)";
    }
    std::printf("[tiers-hybrid] s=%3d:%s\n", shared, line.c_str());
  }
}

// Gemma 3's layout, window 16 on two layers of three: one full-attention group and two windowed groups.
TEST(KvTiersHybridTest, WindowsComeBackFromTheTiers) {
  TinySpec spec = SmallSpec(Arch::kGemma3);
  spec.layers = 3;
  spec.window = 16;
  spec.swa_period = 3;
  spec.ctx = 4096;
  auto m = MakeTiny(spec, "tiers_gemma3");
  ASSERT_TRUE(m);
  ExpectTierHitsColdExact(*m, 8, 32, {15, 17, 100, 200}, "gemma3 W=16");
}

// The tiny DeepSeek-V4 (raw window 16; CSA's compressor inputs over 8 positions and HCA's over 128 in windowed
// groups of their own; compressed rows in full-attention layers). Blocks of 6 put a hit inside a CSA 4-block
// (6), one short of HCA's 128 (126) and the whole prompt (200), as HybridKvTest.DeepseekV4PrefixHitsAreColdExact
// does for the pool.
TEST(KvTiersHybridTest, DeepseekV4WindowsComeBackFromTheTiers) {
  static std::unique_ptr<Model> m = MakeTiny(SmallSpec(Arch::kDeepseekV4), "dsv4_tiers");
  ExpectTierHitsColdExact(*m, 6, 60, {6, 126, 200}, "deepseek_v4");
}

// DeepSeek-V4 under --speculative mtp: the MTP block's K=V rows are a windowed plane of the model's layout
// (KvLayout::mtp_first_layer), written through and loaded back with the other windows. Rejection verification of
// seeded sampling: the draws depend on the module's drafts and their distributions, so on its stored rows.
TEST(KvTiersHybridTest, DeepseekV4MtpPlaneComesBackFromTheTiers) {
  static std::unique_ptr<Model> m = [] {
    TinySpec s = SmallSpec(Arch::kDeepseekV4);
    s.mtp = true;
    return MakeTiny(s, "dsv4_tiers_mtp");
  }();
  EngineOptions mtp;
  mtp.speculative = SpecMethod::kMtp;
  mtp.num_speculative_tokens = 3;
  mtp.spec_verify = SpecVerify::kRejection;
  ExpectTierHitsColdExact(*m, 6, 60, {12, 126, 200}, "deepseek_v4 + mtp", mtp);
  // DeepSeek-V3's MTP module keeps a cache of its own: still refused, with the reason.
  static std::unique_ptr<Model> v3 = [] {
    TinySpec s = SmallSpec(Arch::kDeepseekV3);
    s.mtp = true;
    return MakeTiny(s, "dsv3_tiers_mtp");
  }();
  EngineOptions t = mtp;
  t.kv_offload_ram_bytes = size_t{64} << 20;
  auto e = Engine::Create(*v3, t);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("DeepSeek-V3's MTP"), std::string::npos) << e.status().ToString();
}

// Mistral 7B v0.1's layout, a window on every layer: no full-attention group to tie a stored window to, so the
// tiers are refused with the reason and the way out; with --swa-full (one full-attention group) a prefix the
// pool evicted is a RAM hit, bitwise the cold run.
TEST(KvTiersHybridTest, EveryLayerWindowedNeedsSwaFull) {
  TinySpec spec = SmallSpec(Arch::kMistral);
  spec.window = 16;
  auto m = MakeTiny(spec, "tiers_mistral_window");
  ASSERT_TRUE(m);
  EngineOptions o;
  o.block_size = 8;
  o.num_kv_blocks = 256;
  o.kv_offload_ram_bytes = size_t{16} << 20;
  auto refused = Engine::Create(*m, o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("every layer of this model has a sliding window"), std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("--swa-full"), std::string::npos);
  o.swa_full = true;
  std::mt19937 rng(7070);
  std::vector<int32_t> a;
  for (int i = 0; i < 101; ++i) a.push_back(static_cast<int32_t>(3 + rng() % (m->config.vocab_size - 3)));
  EngineOptions cold = o;
  cold.prefix_caching = false;
  cold.kv_offload_ram_bytes = 0;
  auto ce = MakeEngine(*m, cold);
  ASSERT_TRUE(ce);
  const RequestResult ref = RunSeededRequest(*ce, a);
  auto e = MakeEngine(*m, o);
  ASSERT_TRUE(e);
  RunSeededRequest(*e, a);
  e->FlushKvTiers();
  e->EvictCachedKv(false);
  const RequestResult again = RunSeededRequest(*e, a);
  ExpectSameResults({ref}, {again}, "RAM hit with --swa-full");
  EXPECT_EQ(again.cached_tokens, 96);
  EXPECT_EQ(e->Stats().kv_tiers.ram_hits, 12);
}

// --swa-replay approx (DeepSeek-V4.1's replay) writes full-attention K/V that a cold run would not: an exact
// engine on the same store never loads it (the entries are keyed apart), while an approx engine does.
TEST(KvTiersHybridTest, ApproxReplayEntriesAreNeverServedToAnExactEngine) {
  static std::unique_ptr<Model> m = MakeTiny(SmallSpec(Arch::kDeepseekV4), "dsv4_tiers_approx");
  TempDir dir("hybrid_approx");
  std::mt19937 rng(8080);
  std::vector<int32_t> a;
  for (int i = 0; i < 300; ++i) a.push_back(static_cast<int32_t>(3 + rng() % (m->config.vocab_size - 3)));
  EngineOptions o;
  o.block_size = 6;
  o.num_kv_blocks = 1024;
  o.max_batched_tokens = 32;
  o.kv_store_dir = dir.path.string();
  o.kv_store_bytes = size_t{64} << 20;
  EngineOptions approx = o;
  approx.swa_replay_approx = true;
  {
    auto e = MakeEngine(*m, approx);
    ASSERT_TRUE(e);
    RunSeededRequest(*e, a);
    e->FlushKvTiers();
    EXPECT_GT(e->Stats().kv_tiers.disk_blocks_written, 0);
  }
  EngineOptions cold = o;
  cold.prefix_caching = false;
  cold.kv_store_dir.clear();
  auto ce = MakeEngine(*m, cold);
  ASSERT_TRUE(ce);
  const RequestResult ref = RunSeededRequest(*ce, a);
  {
    auto e = MakeEngine(*m, o);
    ASSERT_TRUE(e);
    const RequestResult got = RunSeededRequest(*e, a);
    EXPECT_EQ(e->Stats().kv_tiers.disk_hits, 0) << "an exact engine loaded an approx engine's entry";
    EXPECT_EQ(got.cached_tokens, 0);
    ExpectSameResults({ref}, {got}, "exact engine on an approx engine's store");
  }
  auto e = MakeEngine(*m, approx);
  ASSERT_TRUE(e);
  const RequestResult got = RunSeededRequest(*e, a);
  EXPECT_GT(e->Stats().kv_tiers.disk_hits, 0) << "an approx engine reuses its own kind's entries";
  EXPECT_GT(got.cached_tokens, 0);
}

}  // namespace
}  // namespace deepinfer::testing
