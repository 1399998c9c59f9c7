// The hybrid KV cache (docs/architecture.md, "Hybrid KV cache"): sliding-window layers keep their K/V in KV
// groups of their own, whose blocks are released once they leave the window, so a long sequence's windowed
// memory stays bounded by its window while the outputs stay bitwise those of a cache that keeps everything
// (--swa-full).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "engine_harness.h"
#include "kv/kv_groups.h"
#include "model/make_tiny.h"

namespace deepinfer::testing {
namespace {

// Gemma 3 layout, window `w` on two layers of three (one full-attention group, two windowed groups of one
// plane each).
const Model& TinyGemma3Window(int w) {
  static std::map<int, std::unique_ptr<Model>> models;
  std::unique_ptr<Model>& m = models[w];
  if (!m) {
    TinySpec s = SmallSpec(Arch::kGemma3);
    s.layers = 3;
    s.window = w;
    s.swa_period = 3;
    s.ctx = 4096;
    m = MakeTiny(s, "gemma3_w" + std::to_string(w));
  }
  return *m;
}

// Appends one engine event to a one-sample result.
void Append(const RequestOutput& ev, RequestResult* out) {
  SampleResult& s = out->samples[0];
  s.tokens.insert(s.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
  for (const auto& lp : ev.logprobs) {
    s.logprobs.push_back(lp.logprob);
    s.top.push_back(lp.top);
  }
  s.text += ev.text;
  out->cached_tokens = ev.cached_tokens;
  out->replayed_tokens = ev.replayed_tokens;
  if (ev.finished) ++s.finals, s.finish_reason = ev.finish_reason;
}

EngineOptions Options(bool overlap) {
  EngineOptions o;
  o.max_num_seqs = 16;
  o.max_batched_tokens = 64;
  o.block_size = 16;
  o.num_kv_blocks = 1024;
  o.overlap = overlap;
  return o;
}

TEST(HybridKvTest, LayoutGroupsLayersByWindow) {
  const Model& m = TinyGemma3Window(32);
  std::vector<int> windows(m.config.n_layers);
  for (int l = 0; l < m.config.n_layers; ++l) windows[l] = m.config.LayerWindow(l);
  const KvLayout k = GroupKvLayout(m.config.kv_layout(), windows, 16);
  ASSERT_EQ(k.num_groups(), 3);
  EXPECT_EQ(k.num_planes(), 1);
  EXPECT_EQ(k.window(0), 0);  // the full-attention group comes first: the anchor
  EXPECT_EQ(k.window(1), 32);
  EXPECT_EQ(k.window(2), 32);
  EXPECT_TRUE(k.has_anchor());
  // Gemma-3-4b's shape: 34 layers, every sixth full (5 full, 29 windowed): 5 planes, 1 + 6 groups, 1 padding plane.
  std::vector<int> g4(34);
  for (int l = 0; l < 34; ++l) g4[l] = (l + 1) % 6 == 0 ? 0 : 1024;
  const KvLayout k4 = GroupKvLayout(KvLayout::Plain(34, 256, 256), g4, 16);
  EXPECT_EQ(k4.num_planes(), 5);
  EXPECT_EQ(k4.num_groups(), 7);
  EXPECT_EQ(PaddingPlanes(k4), 1);
  // No windows: today's cache, one group, a plane per layer.
  const KvLayout k0 = GroupKvLayout(KvLayout::Plain(4, 64, 64), {0, 0, 0, 0}, 16);
  EXPECT_EQ(k0.num_groups(), 1);
  EXPECT_EQ(k0.num_planes(), 4);
}

// A mixed workload (chunked prompts, n > 1, stops, aborts, prefix hits) gives bitwise the same tokens,
// logprobs and text with the hybrid cache as with --swa-full, overlap on and off, and with n-gram speculation.
TEST(HybridKvTest, HybridCacheEqualsSwaFull) {
  const Model& m = TinyGemma3Window(12);
  auto reqs = MixedWorkload(120, m.config.vocab_size, m.tokenizer->bos_id(), 32, {"a", "e ", "\n"});
  for (const bool overlap : {true, false}) {
    EngineOptions hybrid = Options(overlap), full = Options(overlap);
    hybrid.block_size = full.block_size = 8;  // the window edge falls inside blocks
    full.swa_full = true;
    EngineStats sh, sf;
    auto a = RunRequests(m, full, reqs, &sf);
    auto b = RunRequests(m, hybrid, reqs, &sh);
    ExpectSameResults(a, b, std::string("hybrid vs --swa-full, overlap ") + (overlap ? "on" : "off"));
    EXPECT_GT(sh.cached_prompt_tokens, 0) << "prefix caching must still hit with the hybrid cache";
  }
  EngineOptions spec = Options(true);
  spec.block_size = 8;
  spec.speculative.method = SpecMethod::kNgram;
  spec.speculative.num_tokens = 3;
  EngineOptions plain = Options(true);
  plain.block_size = 8;
  plain.swa_full = true;
  for (auto& r : reqs) r.params.sampling.temperature = 0.f;  // exact verification: greedy compares token by token
  ExpectSameResults(RunRequests(m, plain, reqs), RunRequests(m, spec, reqs), "hybrid + n-gram vs --swa-full");
}

// Issue 32, must-show 3: a 100-token prompt generating 2000 tokens keeps at most a window's worth of blocks in
// each windowed group (W = 32, blocks of 16, chunks of 64), while the full-attention group holds every position.
TEST(HybridKvTest, SwaMemoryStaysBounded) {
  const int W = 32, bs = 16, C = 64, T = 2000;
  const Model& m = TinyGemma3Window(W);
  std::mt19937 rng(3232);
  TestRequest r;
  for (int i = 0; i < 100; ++i) r.prompt.push_back(static_cast<int32_t>(3 + rng() % (m.config.vocab_size - 3)));
  r.params.max_tokens = T;
  r.params.ignore_eos = true;
  r.params.logprobs = 1;
  EngineOptions full = Options(true);
  full.swa_full = true;
  const auto ref = RunRequests(m, full, {r});
  ASSERT_EQ(ref[0].samples[0].tokens.size(), static_cast<size_t>(T));
  struct Mode {
    const char* name;
    bool overlap;
    bool ngram;
  };
  for (const Mode mode : {Mode{"overlap off", false, false}, Mode{"overlap on", true, false},
                          Mode{"n-gram speculation", true, true}}) {
    EngineOptions o = Options(mode.overlap);
    if (mode.ngram) {
      o.speculative.method = SpecMethod::kNgram;
      o.speculative.num_tokens = 3;
    }
    auto eng = Engine::Create(m, o);
    ASSERT_TRUE(eng.ok()) << eng.status().ToString();
    Engine& e = **eng;
    ASSERT_EQ(e.kv_layout().num_groups(), 3);
    RequestResult got;
    got.samples.resize(1);
    int min_live = INT32_MAX, max_live = 0;
    auto id = e.Add(r.prompt, r.params, [&](const RequestOutput& ev) {
      Append(ev, &got);
      if (got.samples[0].tokens.size() > 200 && !ev.finished)  // decoding, far past the prompt
        for (int g = 1; g < 3; ++g) {
          min_live = std::min(min_live, e.kv_group_in_use(g));
          max_live = std::max(max_live, e.kv_group_in_use(g));
        }
    });
    ASSERT_TRUE(id.ok());
    ASSERT_TRUE(e.RunUntilIdle().ok());
    ASSERT_TRUE(e.CheckNoLeaks().ok());
    ExpectSameResults(ref, {got}, std::string("bounded SWA memory, ") + mode.name);
    // Live blocks of a window-W group run from the block holding F - W + 1 (F: the lowest query position in
    // flight or next) to the allocation end, at most D positions past F: ceil((W + D + bs - 2) / bs) blocks.
    // Prefill: D = C (one chunk), 2C with the overlap scheduler (the chunk in flight and the next). Decode: D = 1,
    // 2 with overlap, 2(1 + k) with k drafts; a decode callback comes before the step's own release, so the
    // depth-0 count is W/bs + 1 exactly when the position is not the last of its block.
    // The bound, ceil((W + chunk) / block) = 6, holds at depth 0; with the overlap scheduler two chunks
    // are in flight (the step running reads the first, the next one writes the second): ceil((W + 2C + bs - 2) / bs).
    const int peak_bound = mode.overlap ? (W + 2 * C + bs - 2 + bs - 1) / bs : (W + C + bs - 1) / bs;  // 11, 6
    const int decode_bound = W / bs + (mode.ngram ? 3 : mode.overlap ? 2 : 1);
    for (int g = 1; g < 3; ++g) {
      std::printf("[hybrid] %s: windowed group %d peak %d blocks (bound %d); full group peak %d blocks\n", mode.name, g,
                  e.kv_group_peak(g), peak_bound, e.kv_group_peak(0));
      EXPECT_LE(e.kv_group_peak(g), peak_bound) << mode.name << ": group " << g;
    }
    EXPECT_LE(max_live, decode_bound) << mode.name;
    EXPECT_GE(min_live, W / bs) << mode.name << ": a window of W positions spans at least W / bs blocks";
    if (!mode.overlap) {
      EXPECT_EQ(max_live, W / bs + 1) << mode.name;
    }
    EXPECT_GE(e.kv_group_peak(0), (100 + T - 1) / bs) << "the full-attention group keeps every position";
  }
}

// Runs `reqs` one after another on `e` (each to completion), returning their results.
RequestResult RunOne(Engine& e, const TestRequest& r) {
  RequestResult out;
  out.samples.resize(1);
  auto id = e.Add(r.prompt, r.params, [&](const RequestOutput& ev) { Append(ev, &out); });
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_TRUE(e.RunUntilIdle().ok());
  return out;
}

// `n` token ids from `rng`, above the special ids.
std::vector<int32_t> RandomTokens(const Model& m, std::mt19937& rng, int n) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(static_cast<int32_t>(3 + rng() % (m.config.vocab_size - 3)));
  return t;
}

// The second request of a prefix-hit check: the first `shared` tokens of `a`, then `own`; 8 tokens sampled with a
// fixed seed, the top-20 log-probs of each compared.
TestRequest SharingRequest(const TestRequest& a, int shared, const std::vector<int32_t>& own) {
  TestRequest b;
  b.prompt.assign(a.prompt.begin(), a.prompt.begin() + shared);
  b.prompt.insert(b.prompt.end(), own.begin(), own.end());
  b.params.max_tokens = 8;
  b.params.ignore_eos = true;
  b.params.logprobs = 20;
  b.params.has_seed = true;
  b.params.sampling.seed = 7;
  b.params.sampling.temperature = 0.8f;
  return b;
}

// Issue 32, must-show 4: a request B sharing s tokens with an earlier A (W = 16, blocks of 8, chunks of 32,
// R = 64) gives bitwise the cold engine's log-probs (top 20 and the sampled token's) whether A's windowed blocks
// are still cached (a direct hit), evicted (the full layers' K/V reused, the windows rebuilt by recomputing at
// most R tokens for the windowed layers only), or everything is evicted (cold). The counts follow from the
// hit rule: cached + replayed = the shared whole blocks, replayed <= R.
// The check of PrefixHitsAreColdExact for one model: B shares each of `shares` tokens with A; blocks of bs,
// chunks of 32, replay bound R (a multiple of bs).
void ExpectPrefixHitsColdExact(const Model& m, int bs, int R, const std::vector<int>& shares, const char* tag) {
  std::mt19937 rng(4444);
  auto random_tokens = [&](int n) { return RandomTokens(m, rng, n); };
  TestRequest a;
  a.prompt = random_tokens(200);
  a.params.max_tokens = 8;
  a.params.ignore_eos = true;
  enum Mode { kKept, kEvictWindows, kEvictAll };
  const char* kModeNames[] = {"kept", "evict-windows", "evict-all"};
  std::printf("[replay] %s bs=%d R=%d: shared s -> cached + replayed per mode\n", tag, bs, R);
  for (const int shared : shares) {
    const TestRequest b = SharingRequest(a, shared, random_tokens(30));
    for (const bool overlap : {true, false}) {
      EngineOptions o = Options(overlap);
      o.block_size = bs;
      o.max_batched_tokens = 32;  // chunks straddle the window edge and the replay end
      o.swa_replay_max = R;
      EngineOptions cold = o;
      cold.prefix_caching = false;
      const auto ref = RunRequests(m, cold, {b});
      std::string line;
      for (const Mode mode : {kKept, kEvictWindows, kEvictAll}) {
        auto eng = Engine::Create(m, o);
        ASSERT_TRUE(eng.ok());
        Engine& e = **eng;
        RunOne(e, a);
        if (mode != kKept) e.EvictCachedKv(mode == kEvictWindows);
        const RequestResult got = RunOne(e, b);
        ASSERT_TRUE(e.CheckNoLeaks().ok());
        const std::string what = std::string(tag) + ": shared " + std::to_string(shared) + ", " + kModeNames[mode] +
                                 ", overlap " + (overlap ? "on" : "off");
        ExpectSameResults(ref, {got}, what);
        // The full-attention group matches every whole shared block (B's own tokens follow).
        const int blocks = std::min(shared, static_cast<int>(b.prompt.size()) - 1) / bs * bs;
        const int expect_cached = mode == kKept ? blocks : 0;
        const int expect_replayed = mode == kEvictWindows ? std::min(blocks, R) : 0;
        EXPECT_EQ(got.cached_tokens, expect_cached) << what;
        EXPECT_EQ(got.replayed_tokens, expect_replayed) << what;
        EXPECT_LE(got.replayed_tokens, R) << what;
        line += std::string("  ") + kModeNames[mode] + ": " + std::to_string(got.cached_tokens) + " + " +
                std::to_string(got.replayed_tokens);
      }
      if (overlap) std::printf("[replay] s=%3d:%s\n", shared, line.c_str());
    }
  }
}

TEST(HybridKvTest, PrefixHitsAreColdExact) {
  const int W = 16;
  ExpectPrefixHitsColdExact(TinyGemma3Window(W), 8, 64, {1, W - 1, W, W + 1, 10 * W, 200}, "gemma3 W=16");
}

// Sparse window checkpoints (--swa-checkpoint-every N): windowed blocks that slide out stay cached only where the
// window ending at a multiple of N needs them, so after a 207-position request the windowed groups cache ~W/N of
// what they cache with every window kept, and a later request sharing s tokens is served from the checkpoint at or
// before its hit, replaying at most N tokens: bitwise the cold engine's log-probs, overlap on and off.
TEST(HybridKvTest, SparseWindowCheckpointsCacheFewerWindowsAndStayColdExact) {
  const int W = 16, bs = 8, R = 64, every = 32;
  const Model& m = TinyGemma3Window(W);
  std::mt19937 rng(5151);
  auto random_tokens = [&](int n) { return RandomTokens(m, rng, n); };
  TestRequest a;
  a.prompt = random_tokens(200);
  a.params.max_tokens = 8;
  a.params.ignore_eos = true;
  auto options = [&](bool overlap, int checkpoint_every) {
    EngineOptions o = Options(overlap);
    o.block_size = bs;
    o.max_batched_tokens = 32;
    o.swa_replay_max = R;
    o.swa_checkpoint_every = checkpoint_every;
    return o;
  };
  // Cached blocks once A is done: the full group's 25 (207 positions written) plus each windowed group's.
  const int full_blocks = (200 + 8 - 1) / bs;
  int windowed_cached[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    auto eng = Engine::Create(m, options(true, k ? every : 0));
    ASSERT_TRUE(eng.ok()) << eng.status().ToString();
    RunOne(**eng, a);
    windowed_cached[k] = (*eng)->kv_cached_blocks() - full_blocks;
  }
  // Per windowed group: the window of each checkpoint c = 32, 64, ..., 192 (ceil(W / bs) blocks) and A's last window.
  const int per_group_bound = (200 + 8) / every * ((W + bs - 1) / bs) + (W + bs - 1) / bs + 1;
  std::printf("[checkpoints] windowed blocks cached after A: %d with every window, %d with one every %d tokens (bound %d)\n",
              windowed_cached[0], windowed_cached[1], every, 2 * per_group_bound);
  EXPECT_EQ(windowed_cached[0], 2 * full_blocks) << "without checkpoints every windowed block stays cached";
  EXPECT_LE(windowed_cached[1], 2 * per_group_bound);
  EXPECT_LT(windowed_cached[1] * 3, windowed_cached[0] * 2);
  for (const int shared : {W - 1, 31, 32, 33, 100, 120, 150, 200}) {
    const TestRequest b = SharingRequest(a, shared, random_tokens(30));
    for (const bool overlap : {true, false}) {
      EngineOptions cold = options(overlap, every);
      cold.prefix_caching = false;
      const auto ref = RunRequests(m, cold, {b});
      auto eng = Engine::Create(m, options(overlap, every));
      ASSERT_TRUE(eng.ok());
      RunOne(**eng, a);
      const RequestResult got = RunOne(**eng, b);
      ASSERT_TRUE((*eng)->CheckNoLeaks().ok());
      const std::string what = "checkpoints every " + std::to_string(every) + ": shared " + std::to_string(shared) +
                               ", overlap " + (overlap ? "on" : "off");
      ExpectSameResults(ref, {got}, what);
      const int blocks = shared / bs * bs;
      EXPECT_EQ(got.cached_tokens + got.replayed_tokens, blocks) << what;
      EXPECT_LT(got.replayed_tokens, every) << what;
      if (got.replayed_tokens > 0) {
        EXPECT_EQ(got.cached_tokens % every, 0) << what << ": replay starts at a checkpoint";
      }
      if (overlap) std::printf("[checkpoints] s=%3d: cached %d + replayed %d\n", shared, got.cached_tokens, got.replayed_tokens);
    }
  }
  // A checkpoint past the replay bound could never be reached: refused, as is a checkpoint under approximate replay.
  auto far = Engine::Create(m, options(true, 2 * R));
  ASSERT_FALSE(far.ok());
  EXPECT_NE(far.status().message().find("--swa-replay-max"), std::string::npos) << far.status().ToString();
}

// Issue 33, must-show 2: the same on the tiny DeepSeek-V4 (raw window 16, CSA's compressor inputs over 8
// positions, HCA's over 128, compressed rows in full-attention layers). Blocks of 6 put hits inside a CSA 4-block
// (6, 18: a block's first half cached, its row computed by B) and on both sides of HCA's 128 (126, 132); with the
// windows evicted, B replays up to R = 60 positions for every windowed layer while reading A's compressed rows.
TEST(HybridKvTest, DeepseekV4PrefixHitsAreColdExact) {
  static std::unique_ptr<Model> m = MakeTiny(SmallSpec(Arch::kDeepseekV4), "dsv4_replay");
  ExpectPrefixHitsColdExact(*m, 6, 60, {6, 18, 126, 132, 200}, "deepseek_v4");
}

// Issue 33, must-show 3: --swa-replay approx (DeepSeek-V4.1's encoder-side replay). No window is cached: a hit at
// H (the full groups' whole blocks) replays from S = min(H - W, the open HCA block, the CSA block before the open
// one), block-aligned, and the windowed layers read nothing below S. Checked: the counters (cached = S, replayed =
// H - S, bounded by W + 128 + bs), determinism across runs and batch layouts, bitwise the cold run when S = 0
// (nothing is cut), and a nonzero drift from the exact (cold) run when S > 0, whose size is printed: top-1
// agreement and the largest |log-prob| difference of the greedy tokens over the next 64.
TEST(HybridKvTest, DeepseekV4ApproxReplayIsDeterministicAndBounded) {
  static std::unique_ptr<Model> m = MakeTiny(SmallSpec(Arch::kDeepseekV4), "dsv4_approx");
  const int bs = 6, W = m->config.sliding_window;
  std::mt19937 rng(3333);
  auto random_tokens = [&](int n) { return RandomTokens(*m, rng, n); };
  TestRequest a;
  a.prompt = random_tokens(200);
  a.params.max_tokens = 4;
  a.params.ignore_eos = true;
  std::vector<TestRequest> others(2);
  for (TestRequest& o : others) {
    o.prompt = random_tokens(40);
    o.params.max_tokens = 20;
    o.params.ignore_eos = true;
  }
  EngineOptions o = Options(true);
  o.block_size = bs;
  o.max_batched_tokens = 32;
  o.swa_replay_approx = true;
  EngineOptions cold = o;
  cold.prefix_caching = false;
  cold.swa_replay_approx = false;
  std::printf("[approx] deepseek_v4 W=%d bs=%d: shared -> cached + replayed, drift over 64 greedy tokens\n", W, bs);
  for (const int shared : {18, 60, 132, 200}) {
    TestRequest b;
    b.prompt.assign(a.prompt.begin(), a.prompt.begin() + shared);
    const std::vector<int32_t> own = random_tokens(30);
    b.prompt.insert(b.prompt.end(), own.begin(), own.end());
    b.params.max_tokens = 64;
    b.params.ignore_eos = true;
    b.params.logprobs = 1;
    const RequestResult ref = RunRequests(*m, cold, {b})[0];
    // The replay's start for a hit at H, as the engine derives it (ratios 4 and 128 on this model).
    const int hit = std::min(shared, static_cast<int>(b.prompt.size()) - 1) / bs * bs;
    const int from = std::max(0, std::min({hit - W, hit / 128 * 128, hit / 4 * 4 - 4})) / bs * bs;
    std::vector<RequestResult> runs;
    for (const bool batched : {false, false, true}) {
      for (const bool overlap : {true, false}) {
        EngineOptions oo = o;
        oo.overlap = overlap;
        auto eng = Engine::Create(*m, oo);
        ASSERT_TRUE(eng.ok()) << eng.status().ToString();
        Engine& e = **eng;
        RunOne(e, a);
        // Only the full-attention groups are cached: A's 203 written positions, in whole blocks, per group.
        int full_groups = 0;
        for (int g = 0; g < e.kv_layout().num_groups(); ++g) full_groups += e.kv_layout().window(g) == 0;
        EXPECT_EQ(e.kv_cached_blocks(), full_groups * ((200 + 4 - 1) / bs)) << "approx caches no window";
        RequestResult got;
        got.samples.resize(1);
        std::vector<RequestResult> side(others.size());
        auto id = e.Add(b.prompt, b.params, [&](const RequestOutput& ev) { Append(ev, &got); });
        ASSERT_TRUE(id.ok());
        if (batched)  // B shares its steps with two unrelated requests
          for (size_t k = 0; k < others.size(); ++k) {
            side[k].samples.resize(1);
            ASSERT_TRUE(e.Add(others[k].prompt, others[k].params, [&, k](const RequestOutput& ev) { Append(ev, &side[k]); }).ok());
          }
        ASSERT_TRUE(e.RunUntilIdle().ok());
        ASSERT_TRUE(e.CheckNoLeaks().ok());
        const std::string what = "shared " + std::to_string(shared) + (batched ? ", batched" : ", alone") +
                                 ", overlap " + (overlap ? "on" : "off");
        EXPECT_EQ(got.cached_tokens, from) << what;
        EXPECT_EQ(got.replayed_tokens, hit - from) << what;
        EXPECT_LE(got.replayed_tokens, W + 128 + bs) << what;
        runs.push_back(got);
      }
    }
    for (size_t k = 1; k < runs.size(); ++k) ExpectSameResults({runs[0]}, {runs[k]}, "approx, shared " + std::to_string(shared));
    const SampleResult &x = runs[0].samples[0], &y = ref.samples[0];
    ASSERT_EQ(x.tokens.size(), 64u);
    int agree = 0, diverged = -1;
    double max_diff = 0;
    for (size_t i = 0; i < x.tokens.size(); ++i) {
      if (x.tokens[i] != y.tokens[i]) {
        if (diverged < 0) diverged = static_cast<int>(i);
        continue;
      }
      ++agree;
      if (diverged < 0) max_diff = std::max(max_diff, static_cast<double>(std::abs(x.logprobs[i] - y.logprobs[i])));
    }
    if (from == 0) ExpectSameResults({ref}, {runs[0]}, "approx with nothing cut (S = 0) equals the cold run");
    else EXPECT_TRUE(max_diff > 0 || diverged >= 0) << "shared " << shared << ": approx replay cut the windows at " << from
                                                    << " yet equals the exact run: are windows still cached?";
    std::printf("[approx] shared %3d: hit %3d, cached %3d + replayed %3d; top-1 agreement %d/64, first divergence %d, "
                "max |dlogprob| before it %.3g\n",
                shared, hit, runs[0].cached_tokens, runs[0].replayed_tokens, agree, diverged, max_diff);
  }
}

// --swa-replay approx is DeepSeek-V4's: another model is refused with the reason, and so is --swa-full with it.
TEST(HybridKvTest, ApproxReplayIsRefusedWhereItDoesNotApply) {
  EngineOptions o = Options(true);
  o.swa_replay_approx = true;
  auto gemma = Engine::Create(TinyGemma3Window(16), o);
  ASSERT_FALSE(gemma.ok());
  EXPECT_NE(gemma.status().message().find("--swa-replay approx"), std::string::npos) << gemma.status().ToString();
  static std::unique_ptr<Model> m = MakeTiny(SmallSpec(Arch::kDeepseekV4), "dsv4_approx_refusal");
  o.swa_full = true;
  auto full = Engine::Create(*m, o);
  ASSERT_FALSE(full.ok());
  EXPECT_NE(full.status().message().find("--swa-full"), std::string::npos) << full.status().ToString();
}

}  // namespace
}  // namespace deepinfer::testing
