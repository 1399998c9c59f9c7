// The engine's contract: overlap on/off bit-identity, batch invariance, preemption and prefix-cache
// transparency, refusal of bad requests, and no leaks. Runs on stories260K (a real trained model) and on a
// tiny random qwen3-layout model (GQA, q/k norm, untied head), and tiny models of every other family.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <thread>

#include "engine_harness.h"
#include "kv/kv_groups.h"
#include "model/make_tiny.h"
#include "model/transformer.h"
#include "unit/test_util.h"

namespace deepinfer::testing {
namespace {
namespace fs = std::filesystem;

const Model& Tiny() {
  static std::unique_ptr<Model> m = MakeTiny(SmallSpec(Arch::kQwen3), "qwen3");
  return *m;
}

const Model& TinyMoe() {
  static std::unique_ptr<Model> m = [] {
    TinySpec s = SmallSpec(Arch::kQwen3Moe);
    s.experts = 8;
    s.experts_used = 2;
    return MakeTiny(s, "moe");
  }();
  return *m;
}

const Model& TinyDeepseek() {
  static std::unique_ptr<Model> m = [] {
    TinySpec s = SmallSpec(Arch::kDeepseekV3);
    s.layers = 3;
    s.experts = 8;
    s.experts_used = 2;
    s.n_group = 2;
    s.topk_group = 1;
    return MakeTiny(s, "ds");
  }();
  return *m;
}

const Model& TinyMixtral() {
  static std::unique_ptr<Model> m = [] {
    TinySpec s = SmallSpec(Arch::kMixtral);
    s.experts = 4;
    s.experts_used = 2;
    s.moe_intermediate = 64;
    return MakeTiny(s, "mixtral");
  }();
  return *m;
}

const Model& TinyQwen2Moe() {
  static std::unique_ptr<Model> m = [] {
    TinySpec s = SmallSpec(Arch::kQwen2Moe);
    s.experts = 8;
    s.experts_used = 2;
    s.shared_experts = 2;
    return MakeTiny(s, "qwen2moe");
  }();
  return *m;
}

// The families that differ from Llama in composition only: OLMo 2's post-norm layers (whole-projection q/k
// norms), SmolLM3's NoPE layers (layer 3 of 4 skips RoPE).
const Model& TinyOlmo2() {
  static std::unique_ptr<Model> m = MakeTiny(SmallSpec(Arch::kOlmo2), "olmo2");
  return *m;
}

const Model& TinySmolLM3() {
  static std::unique_ptr<Model> m = [] {
    TinySpec s = SmallSpec(Arch::kSmolLM3);
    s.layers = 4;
    s.tie_embeddings = true;  // as SmolLM3-3B
    return MakeTiny(s, "smollm3");
  }();
  return *m;
}

// Gemma 3 with a window of 12 on two layers of three (prompts of 20..120 tokens, chunks of 64, blocks of 8: the
// window edge falls inside blocks, chunks and attention tiles alike).
const Model& TinyGemma3() {
  static std::unique_ptr<Model> m = [] {
    TinySpec s = SmallSpec(Arch::kGemma3);
    s.layers = 3;
    s.window = 12;
    s.swa_period = 3;
    return MakeTiny(s, "gemma3");
  }();
  return *m;
}

// gpt-oss: layers 0 and 2 windowed (12), layer 1 full; sinks, biases, YaRN, top-4 of 8 experts weighted by a
// softmax over the 4, the clamped SwiGLU.
const Model& TinyGptOss() {
  static std::unique_ptr<Model> m = [] {
    TinySpec s = SmallSpec(Arch::kGptOss);
    s.layers = 3;
    s.window = 12;
    s.experts = 8;
    s.experts_used = 4;
    s.rope_theta = 150000;
    return MakeTiny(s, "gpt_oss");
  }();
  return *m;
}

// DeepSeek-V4: the specification's tiny shape (window 16; window-only, CSA and HCA layers; hash routing on
// layers 0-2; 4 hyper-connection streams): prompts of 20..120 tokens and their outputs cross CSA's 4-blocks
// everywhere and HCA's 128-block in the longer requests, chunks of 64 and blocks of 8 cut through both.
const Model& TinyDeepseekV4() {
  static std::unique_ptr<Model> m = MakeTiny(SmallSpec(Arch::kDeepseekV4), "deepseek_v4");
  return *m;
}

EngineOptions SmallEngine() {
  EngineOptions o;
  o.max_num_seqs = 16;
  o.max_batched_tokens = 64;  // forces chunked prefill
  o.block_size = 8;
  o.num_kv_blocks = 256;
  return o;
}

struct Case {
  const char* name;
  const Model& (*model)();
  std::vector<std::string> stops;
};

class EngineEquivalence : public ::testing::TestWithParam<int> {
 protected:
  Case Get() const {
    switch (GetParam()) {
      case 0: return Case{"stories260K", Stories, {".", "Lily", "the park", ", "}};
      case 1: return Case{"tiny-qwen3", Tiny, {"a", "e ", "\n"}};
      case 2: return Case{"tiny-qwen3-moe", TinyMoe, {"a", "e ", "\n"}};
      case 3: return Case{"tiny-deepseek-v3", TinyDeepseek, {"a", "e ", "\n"}};
      case 4: return Case{"tiny-mixtral", TinyMixtral, {"a", "e ", "\n"}};
      case 5: return Case{"tiny-qwen2-moe", TinyQwen2Moe, {"a", "e ", "\n"}};
      case 6: return Case{"tiny-olmo2", TinyOlmo2, {"a", "e ", "\n"}};
      case 7: return Case{"tiny-smollm3", TinySmolLM3, {"a", "e ", "\n"}};
      case 8: return Case{"tiny-gemma3", TinyGemma3, {"a", "e ", "\n"}};
      case 9: return Case{"tiny-gpt-oss", TinyGptOss, {"a", "e ", "\n"}};
      default: return Case{"tiny-deepseek-v4", TinyDeepseekV4, {"a", "e ", "\n"}};
    }
  }
};

// Must-show 1: 200+ mixed requests, overlap on vs off, bit-identical tokens, logprobs, text, finish reasons.
TEST_P(EngineEquivalence, OverlapOnAndOffAreBitIdentical) {
  const Case c = Get();
  const Model& m = c.model();
  auto reqs = MixedWorkload(220, m.config.vocab_size, m.tokenizer->bos_id(), 7, c.stops);
  EngineOptions on = SmallEngine(), off = SmallEngine();
  on.num_kv_blocks = off.num_kv_blocks = TestPoolBlocks(m, on.num_kv_blocks);
  off.overlap = false;
  EngineStats s_on, s_off;
  auto a = RunRequests(m, on, reqs, &s_on);
  auto b = RunRequests(m, off, reqs, &s_off);
  ExpectSameResults(a, b, std::string(c.name) + " overlap on vs off");
  int stopped = 0, aborted = 0, multi = 0, length = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (const auto& s : a[i].samples) {
      stopped += s.finish_reason == "stop";
      aborted += s.finish_reason == "abort";
      length += s.finish_reason == "length";
      multi += reqs[i].params.n > 1;
    }
  // The workload really exercises what it claims to.
  EXPECT_GT(stopped, 5) << c.name;
  EXPECT_GT(aborted, 5) << c.name;
  EXPECT_GT(length, 50) << c.name;
  EXPECT_GT(multi, 10) << c.name;
  EXPECT_GT(s_on.ghost_rows, 0) << "overlap never ran a step ahead of a stop";
  EXPECT_EQ(s_off.ghost_rows, 0) << "depth 0 must never schedule a row past a stop";
  EXPECT_GT(s_on.cached_prompt_tokens, 0);
}

// Must-show 2: a request gives the same tokens alone and inside batches of 1..64 other requests.
TEST_P(EngineEquivalence, RequestIsBatchInvariant) {
  const Case c = Get();
  const Model& m = c.model();
  auto others = MixedWorkload(64, m.config.vocab_size, m.tokenizer->bos_id(), 11, c.stops);
  for (auto& o : others) o.abort_after = -1;
  TestRequest target;
  target.prompt = others[3].prompt;
  target.params.max_tokens = 40;
  target.params.has_seed = true;
  target.params.sampling.seed = 1234;
  target.params.sampling.temperature = 1.0f;
  target.params.sampling.top_p = 0.9f;
  target.params.logprobs = 2;
  target.params.ignore_eos = true;
  EngineOptions opt = SmallEngine();
  opt.max_num_seqs = 80;
  opt.max_batched_tokens = 256;
  opt.num_kv_blocks = 2048;
  auto alone = RunRequests(m, opt, {target});
  ASSERT_EQ(alone[0].samples[0].tokens.size(), 40u);
  for (int k : {1, 3, 16, 64}) {
    std::vector<TestRequest> batch(others.begin(), others.begin() + k);
    batch.insert(batch.begin() + k / 2, target);
    auto got = RunRequests(m, opt, batch);
    ExpectSameResults(alone, {got[k / 2]}, std::string(c.name) + " batch of " + std::to_string(k + 1));
  }
}

// How many blocks of the engine's (hybrid) KV layout take the bytes of one block that holds every layer.
int HybridBlocksPerFullBlock(const Model& m, int block_size) {
  const KvLayout base = m.config.kv_layout();
  return base.num_layers / GroupKvLayout(base, m.config.kv_layer_windows(), block_size).num_planes();
}

// Must-show 4: a pool so small that preemption happens constantly gives the same outputs as a large pool.
TEST_P(EngineEquivalence, ConstantPreemptionChangesNothing) {
  const Case c = Get();
  const Model& m = c.model();
  auto reqs = MixedWorkload(60, m.config.vocab_size, m.tokenizer->bos_id(), 21, c.stops);
  for (auto& r : reqs) r.abort_after = -1;
  EngineOptions big = SmallEngine();
  big.num_kv_blocks = TestPoolBlocks(m, big.num_kv_blocks);
  auto ref = RunRequests(m, big, reqs);
  for (bool overlap : {true, false}) {
    EngineOptions tiny = SmallEngine();
    tiny.block_size = 4;
    // 192 tokens for 16 concurrent sequences of up to ~180 tokens. A hybrid KV cache (windowed layers in
    // groups of their own) needs far less: its blocks hold only a group's layers, and a windowed group keeps only
    // the blocks of the window and the chunks ahead of it (smaller chunks here, which change no output).
    if (m.config.is_dsv4()) {
      // DeepSeek-V4's eight groups include two full ones and a 128-window (HCA's compressor inputs): room for
      // about two of the longest sequences.
      tiny.max_batched_tokens = 16;
      const KvLayout base = m.config.kv_layout();
      tiny.num_kv_blocks = static_cast<int>(
          2 * MaxSeqBlocks(GroupKvLayout(base, m.config.kv_layer_windows(), tiny.block_size), tiny.block_size, 200, KvAhead(2, 16, 0)));
    } else if (HybridBlocksPerFullBlock(m, tiny.block_size) > 1) {
      tiny.max_batched_tokens = 16;
      tiny.num_kv_blocks = 72;
    } else {
      tiny.num_kv_blocks = 48;
    }
    tiny.overlap = overlap;
    EngineStats st;
    auto got = RunRequests(m, tiny, reqs, &st);
    EXPECT_GT(st.preemptions, 20) << "the pool was not small enough to force preemption";
    ExpectSameResults(ref, got, std::string(c.name) + " tiny pool, overlap " + (overlap ? "on" : "off"));
  }
}

std::string ModelName(const ::testing::TestParamInfo<int>& info) {
  static const char* kNames[] = {"Stories260K", "TinyQwen3", "TinyQwen3Moe", "TinyDeepseekV3", "TinyMixtral", "TinyQwen2Moe",
                                 "TinyOlmo2", "TinySmolLM3", "TinyGemma3", "TinyGptOss", "TinyDeepseekV4"};
  return kNames[info.param];
}
INSTANTIATE_TEST_SUITE_P(Models, EngineEquivalence, ::testing::Values(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10), ModelName);

// Issue 37, must-show 2: priority (vLLM's semantics: lower first). 30 long prompts, then an urgent short one:
// added behind them it still gets its first token before any of them, both when everything is queued at once and
// when it arrives while the long ones run and hold every sequence slot (it then preempts the least urgent idle
// one). Outputs are bitwise those of the run without priorities.
struct PriorityRun {
  std::vector<RequestResult> results;
  std::vector<int> first_token_rank;  // per request: the order in which its first token arrived
  std::vector<bool> had_token_at_arrival;  // per request: whether it had a token when the urgent one arrived
  int finished_before_urgent_token = 0;    // long requests finished before the urgent one's first token
  EngineStats stats;
};

PriorityRun RunWithLateArrival(const Model& m, EngineOptions opt, std::vector<TestRequest> reqs, bool arrive_late,
                               int late_after) {
  PriorityRun r;
  auto eng = Engine::Create(m, opt);
  EXPECT_TRUE(eng.ok()) << eng.status().ToString();
  if (!eng.ok()) return r;
  Engine& e = **eng;
  const size_t n = reqs.size(), urgent = n - 1;  // the last request is the urgent one
  r.results.resize(n);
  r.first_token_rank.assign(n, -1);
  r.had_token_at_arrival.assign(n, false);
  int next_rank = 0;
  bool urgent_added = false;
  std::function<void(size_t)> add;
  add = [&](size_t i) {
    r.results[i].samples.resize(1);
    auto id = e.Add(reqs[i].prompt, reqs[i].params, [&, i](const RequestOutput& ev) {
      SampleResult& s = r.results[i].samples[0];
      if (!ev.token_ids.empty() && r.first_token_rank[i] < 0) r.first_token_rank[i] = next_rank++;
      if (ev.finished && i != urgent && r.first_token_rank[urgent] < 0) ++r.finished_before_urgent_token;
      s.tokens.insert(s.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
      s.text += ev.text;
      if (ev.finished) ++s.finals, s.finish_reason = ev.finish_reason;
      // Late arrival: the urgent request comes in once `late_after` long ones have produced a token (every
      // sequence slot is then held by a long request that keeps decoding; the rest are queued).
      if (arrive_late && !urgent_added && next_rank >= late_after) {
        urgent_added = true;
        for (size_t j = 0; j < urgent; ++j) r.had_token_at_arrival[j] = r.first_token_rank[j] >= 0;
        add(urgent);
      }
    });
    EXPECT_TRUE(id.ok()) << id.status().ToString();
  };
  for (size_t i = 0; i < urgent; ++i) add(i);
  if (!arrive_late) add(urgent);
  EXPECT_TRUE(e.RunUntilIdle().ok());
  EXPECT_TRUE(urgent_added || !arrive_late);
  EXPECT_TRUE(e.CheckNoLeaks().ok());
  r.stats = e.Stats();
  return r;
}

TEST(EngineTest, UrgentRequestOvertakesLongPromptsAndChangesNoOutput) {
  const Model& m = Tiny();
  std::mt19937 rng(37);
  std::vector<TestRequest> reqs(31);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const bool last = i + 1 == reqs.size();  // 30 long prompts with long answers, then a short urgent one
    const int len = last ? 6 : 150;
    for (int t = 0; t < len; ++t) reqs[i].prompt.push_back(static_cast<int32_t>(3 + rng() % (m.config.vocab_size - 3)));
    reqs[i].params.max_tokens = last ? 6 : 40;
    reqs[i].params.ignore_eos = true;
  }
  for (const bool late : {false, true}) {
    EngineOptions opt = SmallEngine();
    opt.max_num_seqs = 4;  // four slots: once four long requests answer, every slot is held by one
    std::vector<TestRequest> plain = reqs, urgent = reqs;
    urgent.back().params.priority = -1;
    const PriorityRun ref = RunWithLateArrival(m, opt, plain, late, opt.max_num_seqs);
    const PriorityRun got = RunWithLateArrival(m, opt, urgent, late, opt.max_num_seqs);
    ExpectSameResults(ref.results, got.results, late ? "late urgent request" : "queued urgent request");
    const int u = got.first_token_rank.back();
    int overtaken = 0, ref_overtaken = 0;
    for (size_t i = 0; i + 1 < reqs.size(); ++i) {
      if (late && got.had_token_at_arrival[i]) continue;  // already answered before it arrived
      EXPECT_LT(u, got.first_token_rank[i]) << (late ? "late" : "queued") << ": long request " << i << " answered first";
      ++overtaken;
      ref_overtaken += ref.first_token_rank.back() < ref.first_token_rank[i];
    }
    EXPECT_GT(overtaken, 20) << "most long requests were still waiting";
    // Without the priority it waits its turn: most long requests answer first (the test can tell the two apart).
    EXPECT_LT(ref_overtaken, overtaken / 2) << (late ? "late" : "queued");
    if (late) {
      // Every slot was held by a long request with 40 tokens to go: without taking one it would wait for one to
      // finish.
      EXPECT_GT(got.stats.priority_preemptions, 0) << "all slots were busy: the urgent request must preempt";
      EXPECT_EQ(got.finished_before_urgent_token, 0);
      EXPECT_GT(ref.finished_before_urgent_token, 0);
    }
    EXPECT_EQ(ref.stats.priority_preemptions, 0);
  }
}

// Must-show 5: a prefix-cache hit gives the cold run's output and skips the cached prefill.
TEST(EngineTest, PrefixCacheHitMatchesColdRunAndSkipsPrefill) {
  const Model& m = Stories();
  std::mt19937 rng(5);
  TestRequest r;
  r.prompt.push_back(m.tokenizer->bos_id());
  for (int i = 0; i < 300; ++i) r.prompt.push_back(3 + rng() % (m.config.vocab_size - 3));
  r.params.max_tokens = 30;
  r.params.ignore_eos = true;
  EngineOptions cold = SmallEngine();
  cold.prefix_caching = false;
  auto ref = RunRequests(m, cold, {r});
  EngineOptions warm = SmallEngine();
  EngineStats st;
  auto got = RunRequests(m, warm, {r, r}, &st);  // the second arrives while the first runs: it must still hit
  ExpectSameResults(ref, {got[0]}, "first run");
  ExpectSameResults(ref, {got[1]}, "prefix hit");
  // Sequential: second request after the first has finished.
  auto eng = Engine::Create(m, warm);
  ASSERT_TRUE(eng.ok());
  std::vector<int32_t> toks[2];
  int cached[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE((*eng)->Add(r.prompt, r.params, [&, i](const RequestOutput& ev) {
                     toks[i].insert(toks[i].end(), ev.token_ids.begin(), ev.token_ids.end());
                     cached[i] = ev.cached_tokens;
                   }).ok());
    const int64_t before = (*eng)->Stats().prompt_tokens_computed;
    ASSERT_TRUE((*eng)->RunUntilIdle().ok());
    const int64_t computed = (*eng)->Stats().prompt_tokens_computed - before;
    if (i == 0) {
      EXPECT_EQ(computed, 301);
    } else {
      EXPECT_EQ(cached[1], 296) << "all full 8-token blocks of the 301-token prompt should hit";
      EXPECT_EQ(computed, 301 - 296);
    }
  }
  EXPECT_EQ(toks[0], ref[0].samples[0].tokens);
  EXPECT_EQ(toks[1], ref[0].samples[0].tokens);
  EXPECT_TRUE((*eng)->Shutdown().ok());
}

// A prompt prefilled in one chunk is offered to the prefix cache as soon as its blocks are written, not only once
// generation outgrows the blocks it was admitted with: the same prompt again with max_tokens 1..4 hits every full
// block (less the one that holds the last prompt token when the prompt ends on a block boundary: a row must run
// to produce logits), with or without sliding windows, and its output is bitwise a cold run's. Sample 1 of an
// n = 2 request (held until sample 0's prompt is cached) hits too.
TEST(EngineTest, SingleChunkPromptIsCachedBeforeGenerationOutgrowsIt) {
  struct M {
    const char* name;
    const Model& (*model)();
  };
  for (const M& mc : {M{"stories260K", Stories}, M{"tiny-qwen3", Tiny}, M{"tiny-gemma3", TinyGemma3}}) {
    const Model& m = mc.model();
    for (const int len : {61, 64}) {
      std::mt19937 rng(static_cast<uint32_t>(len));
      TestRequest r;
      r.prompt.push_back(m.tokenizer->bos_id());
      while (static_cast<int>(r.prompt.size()) < len) r.prompt.push_back(3 + rng() % (m.config.vocab_size - 3));
      r.params.ignore_eos = true;
      r.params.logprobs = 5;
      const int expect_cached = (len - 1) / 8 * 8;  // full 8-token blocks, the last prompt token's excluded
      for (const int max_tokens : {1, 2, 4}) {
        for (const bool overlap : {true, false}) {
          const std::string what = std::string(mc.name) + " prompt " + std::to_string(len) + " max_tokens " +
                                   std::to_string(max_tokens) + (overlap ? " overlap" : " no overlap");
          r.params.max_tokens = max_tokens;
          EngineOptions opt = SmallEngine();
          opt.max_batched_tokens = 512;  // the whole prompt in one chunk
          opt.overlap = overlap;
          EngineOptions cold = opt;
          cold.prefix_caching = false;
          const auto ref = RunRequests(m, cold, {r});
          // Sequential requests on one engine: the second arrives after the first has finished.
          auto eng = Engine::Create(m, opt);
          ASSERT_TRUE(eng.ok()) << eng.status().ToString();
          for (int i = 0; i < 2; ++i) {
            RequestResult got;
            got.samples.resize(1);
            ASSERT_TRUE((*eng)->Add(r.prompt, r.params, [&](const RequestOutput& ev) {
                             SampleResult& s = got.samples[0];
                             s.tokens.insert(s.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
                             for (const auto& lp : ev.logprobs) {
                               s.logprobs.push_back(lp.logprob);
                               s.top.push_back(lp.top);
                             }
                             s.text += ev.text;
                             got.cached_tokens = ev.cached_tokens;
                             if (ev.finished) {
                               ++s.finals;
                               s.finish_reason = ev.finish_reason;
                             }
                           }).ok());
            const int64_t before = (*eng)->Stats().prompt_tokens_computed;
            ASSERT_TRUE((*eng)->RunUntilIdle().ok());
            const int64_t computed = (*eng)->Stats().prompt_tokens_computed - before;
            ExpectSameResults(ref, {got}, what + (i == 0 ? " first" : " second"));
            EXPECT_EQ(got.cached_tokens, i == 0 ? 0 : expect_cached) << what << " request " << i;
            EXPECT_EQ(computed, i == 0 ? len : len - expect_cached) << what << " request " << i;
          }
          EXPECT_TRUE((*eng)->CheckNoLeaks().ok()) << what;
          EXPECT_TRUE((*eng)->Shutdown().ok());
          // n = 2: sample 1 waits for sample 0's prompt to be cached, then reuses its full blocks.
          TestRequest two = r;
          two.params.n = 2;
          two.params.has_seed = true;
          two.params.sampling.seed = 17;
          two.params.sampling.temperature = 0.8f;
          EngineStats st;
          const auto cold2 = RunRequests(m, cold, {two});
          const auto warm2 = RunRequests(m, opt, {two}, &st);
          ExpectSameResults(cold2, warm2, what + " n=2");
          EXPECT_EQ(st.cached_prompt_tokens, expect_cached) << what << " n=2";
        }
      }
    }
  }
}

// Must-show 6: bad requests are refused with a clear error; the others run undisturbed.
TEST(EngineTest, InvalidRequestsAreRefusedAndOthersUndisturbed) {
  const Model& m = Stories();
  auto good = MixedWorkload(20, m.config.vocab_size, m.tokenizer->bos_id(), 3, {"."});
  for (auto& g : good) g.abort_after = -1;
  EngineOptions opt = SmallEngine();
  auto ref = RunRequests(m, opt, good);
  std::vector<TestRequest> mixed;
  std::vector<std::string> expect_error;
  auto bad = [&](TestRequest r, const std::string& needle) {
    mixed.push_back(std::move(r));
    expect_error.push_back(needle);
  };
  TestRequest base;
  base.prompt = {1, 50, 60};
  TestRequest r = base;
  r.prompt.assign(600, 50);  // stories260K's context is 512
  bad(r, "context");
  r = base;
  r.prompt = {};
  bad(r, "empty");
  r = base;
  r.prompt = {1, 100000};
  bad(r, "outside the vocabulary");
  r = base;
  r.params.sampling.temperature = -1;
  bad(r, "temperature");
  r = base;
  r.params.sampling.top_p = 0;
  bad(r, "top_p");
  r = base;
  r.params.max_tokens = 0;
  bad(r, "max_tokens");
  r = base;
  r.params.n = 1000;
  bad(r, "n must be");
  r = base;
  r.params.sampling.logit_bias = {{99999, 1.f}};
  bad(r, "logit_bias");
  r = base;
  r.params.sampling.presence_penalty = 3;
  bad(r, "presence_penalty");
  for (size_t i = 0; i < good.size(); ++i) {
    mixed.insert(mixed.begin() + std::min(mixed.size(), i * 2), good[i]);
    expect_error.insert(expect_error.begin() + std::min(expect_error.size(), i * 2), "");
  }
  auto got = RunRequests(m, opt, mixed);
  std::vector<RequestResult> good_got;
  for (size_t i = 0; i < mixed.size(); ++i) {
    if (expect_error[i].empty()) {
      EXPECT_EQ(got[i].error, "");
      good_got.push_back(got[i]);
    } else {
      EXPECT_NE(got[i].error.find(expect_error[i]), std::string::npos) << "got: '" << got[i].error << "'";
    }
  }
  ExpectSameResults(ref, good_got, "good requests next to bad ones");
  // A request that can never fit in the KV pool is refused at admission rather than deadlocking.
  EngineOptions small = SmallEngine();
  small.num_kv_blocks = 4;  // 32 tokens
  TestRequest big = base;
  big.params.max_tokens = 100;
  auto refused = RunRequests(m, small, {big});
  EXPECT_NE(refused[0].error.find("whole pool"), std::string::npos) << refused[0].error;
}

// Stop strings across token boundaries are cut from the text; the streamed text never shows the stop string.
TEST(EngineTest, StopStringsCutTextAcrossTokens) {
  const Model& m = Stories();
  TestRequest r;
  r.prompt = {m.tokenizer->bos_id()};
  r.params.max_tokens = 100;
  auto ref = RunRequests(m, SmallEngine(), {r});
  const std::string full = ref[0].samples[0].text;
  ASSERT_NE(full.find("Lily. She"), std::string::npos) << full;
  r.params.stop = {"ly. Sh"};  // spans the tokens of "Lily", "." and " She"
  auto got = RunRequests(m, SmallEngine(), {r});
  EXPECT_EQ(got[0].samples[0].text, full.substr(0, full.find("ly. Sh")));
  EXPECT_EQ(got[0].samples[0].finish_reason, "stop");
  EXPECT_EQ(got[0].samples[0].stop_reason, "ly. Sh");
  r.params.include_stop_str_in_output = true;
  got = RunRequests(m, SmallEngine(), {r});
  EXPECT_EQ(got[0].samples[0].text, full.substr(0, full.find("ly. Sh") + 6));
}

// Must-show 3: thousands of requests with random aborts from another thread while the engine runs on its own
// thread; every sample gets exactly one final event, and shutdown finds every block and slot free. The sanitizer
// pass (scripts/sanitize.sh) runs fewer requests per variant, DEEPINFER_TEST_ABORT_FUZZ_REQUESTS, as instrumented
// code runs 5-10x slower; ctest runs the 1,500.
TEST(EngineTest, RandomAbortFuzzLeavesNoLeak) {
  const char* requests_env = std::getenv("DEEPINFER_TEST_ABORT_FUZZ_REQUESTS");
  const int kRequests = requests_env ? std::atoi(requests_env) : 1500;
  ASSERT_GE(kRequests, 200) << "DEEPINFER_TEST_ABORT_FUZZ_REQUESTS: at least 200";
  const Model& m = Stories();
  for (int variant = 0; variant < 3; ++variant) {
    const bool overlap = variant != 1;
    EngineOptions opt = SmallEngine();
    opt.overlap = overlap;
    opt.num_kv_blocks = 64;  // tight: preemption under load too
    opt.block_size = 4;
    if (variant == 2) {  // speculative decoding: aborts land inside accepted runs and on dynamic rows in flight
      opt.speculative.method = SpecMethod::kDraft;
      opt.speculative.draft_model = &m;
      opt.speculative.num_tokens = 4;
    }
    auto eng = Engine::Create(m, opt);
    ASSERT_TRUE(eng.ok());
    Engine& e = **eng;
    e.Start();
    std::vector<std::atomic<int>> finals(kRequests);
    std::vector<uint64_t> ids(kRequests, 0);
    std::mt19937 rng(variant + 1);
    auto work = MixedWorkload(kRequests, m.config.vocab_size, m.tokenizer->bos_id(), 99, {"."});
    std::atomic<int> submitted{0};
    std::thread aborter([&] {
      std::mt19937 r2(3);
      while (submitted.load() < kRequests) {
        const int hi = submitted.load();
        if (hi > 0) {
          const uint64_t id = ids[r2() % hi];
          if (id) e.Abort(id);
          e.Abort(1u << 30);  // unknown ids are ignored
        }
        std::this_thread::sleep_for(std::chrono::microseconds(r2() % 300));
      }
    });
    for (int i = 0; i < kRequests; ++i) {
      work[i].params.max_tokens = 1 + rng() % 12;
      auto id = e.Add(work[i].prompt, work[i].params, [&finals, i](const RequestOutput& ev) {
        if (ev.finished) finals[i]++;
      });
      ASSERT_TRUE(id.ok()) << id.status().ToString();
      ids[i] = *id;
      submitted = i + 1;
      if (rng() % 8 == 0) e.Abort(*id);  // some die while still queued
      if (rng() % 64 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    aborter.join();
    // Wait for everything to finish, then shut down (which drains and checks for leaks).
    for (int spins = 0; spins < 6000; ++spins) {
      const EngineStats st = e.Stats();
      if (st.requests_finished + st.requests_aborted >= kRequests) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    Status leaks = e.Shutdown();
    EXPECT_TRUE(leaks.ok()) << leaks.ToString();
    const EngineStats st = e.Stats();
    EXPECT_EQ(st.requests_finished + st.requests_aborted, kRequests);
    EXPECT_GT(st.requests_aborted, kRequests / 15);  // 100 of 1,500: an eighth are aborted while queued alone
    for (int i = 0; i < kRequests; ++i) {
      ASSERT_EQ(finals[i].load(), work[i].params.n) << "request " << i << ": one final event per sample";
    }
  }
}

// The engine's reported log-probs (chosen token and alternatives) equal a plain single-sequence forward over the
// same tokens: positions, slots and block tables are wired right, also across chunked prefill and preemption.
// The plain forward keeps every cache layer's row at its position (SequenceKvCache, the layout the parity tests
// check against llama.cpp); the engine's paged cache groups layers by window and, for DeepSeek-V4, packs the
// compressed rows and indexer keys (one row per 4 or 128 positions, several layers to a plane): 150 prompt tokens
// reach an HCA row (position 127) and many CSA rows, in blocks of 8 and of 6 (a block holding one or two CSA rows),
// with f32 and bf16 K/V.
TEST(EngineTest, LogprobsMatchPlainForward) {
  struct Run {
    const Model& m;
    int prompt, block_size;
    DType kv;
  };
  for (const Run& run : {Run{Tiny(), 37, 8, DType::kF32}, Run{TinyDeepseekV4(), 150, 8, DType::kF32},
                         Run{TinyDeepseekV4(), 150, 6, DType::kBF16}}) {
    const Model& m = run.m;
    const std::string what = ArchName(m.config.arch) + std::string(" blocks of ") + std::to_string(run.block_size) +
                             " " + DTypeName(run.kv);
    TestRequest r;
    for (int i = 0; i < run.prompt; ++i) r.prompt.push_back(3 + (i * 31) % 300);
    r.params.max_tokens = 20;
    r.params.logprobs = 3;
    r.params.ignore_eos = true;
    EngineOptions opt = SmallEngine();
    opt.max_batched_tokens = 16;  // the prompt runs in chunks
    opt.block_size = run.block_size;
    opt.kv_dtype = run.kv;
    opt.num_kv_blocks = TestPoolBlocks(m, opt.num_kv_blocks);
    auto got = RunRequests(m, opt, {r});
    ASSERT_TRUE(got[0].error.empty()) << what << ": " << got[0].error;
    const SampleResult& s = got[0].samples[0];
    ASSERT_EQ(s.tokens.size(), 20u) << what;
    std::vector<int32_t> all = r.prompt;
    all.insert(all.end(), s.tokens.begin(), s.tokens.end());
    const int n = static_cast<int>(all.size());
    Transformer tf(m, n, nullptr);
    SequenceKvCache kv(m.config.kv_layout(), n, run.kv);
    const int V = m.config.vocab_size;
    std::vector<float> logits(all.size() * V);
    ASSERT_TRUE(tf.Forward(all.data(), n, 0, kv, logits.data(), true).ok()) << what;
    for (size_t k = 0; k < s.tokens.size(); ++k) {
      const size_t row = r.prompt.size() - 1 + k;  // logits at this position predict token k
      TopLogprobs ref = ComputeLogprobs(logits.data() + row * V, V, s.tokens[k], 3);
      EXPECT_FLOAT_EQ(s.logprobs[k], ref.logprob) << what << " token " << k;
      EXPECT_EQ(s.top[k], ref.top) << what << " token " << k;
      EXPECT_EQ(s.tokens[k], ref.top[0].first) << what << ": greedy picks the argmax";
    }
  }
}

// bf16 and f16 KV caches: overlap on/off still bit-identical; outputs stay close to the f32 cache's.
TEST(EngineTest, HalfPrecisionKvCache) {
  const Model& m = Stories();
  auto reqs = MixedWorkload(40, m.config.vocab_size, m.tokenizer->bos_id(), 5, {"."});
  for (auto& q : reqs) q.abort_after = -1;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    EngineOptions on = SmallEngine();
    on.kv_dtype = dt;
    EngineOptions off = on;
    off.overlap = false;
    ExpectSameResults(RunRequests(m, on, reqs), RunRequests(m, off, reqs), DTypeName(dt));
  }
  // Greedy logprobs of the first tokens: half-precision K/V moves them only slightly.
  TestRequest g;
  g.prompt = {m.tokenizer->bos_id()};
  g.params.max_tokens = 8;
  g.params.logprobs = 0;
  auto f32 = RunRequests(m, SmallEngine(), {g});
  EngineOptions h = SmallEngine();
  h.kv_dtype = DType::kBF16;
  auto bf = RunRequests(m, h, {g});
  ASSERT_EQ(f32[0].samples[0].tokens[0], bf[0].samples[0].tokens[0]);
  EXPECT_NEAR(f32[0].samples[0].logprobs[0], bf[0].samples[0].logprobs[0], 0.05);
}

// Check validates once and keeps the request: Add(ValidatedRequest) queues it unchecked with the same result
// as Add(prompt, params); Check's errors are Add's; a request checked by one engine is refused by another.
TEST(EngineTest, CheckedRequestsQueueWithoutASecondValidation) {
  const Model& m = Stories();
  auto reqs = MixedWorkload(6, m.config.vocab_size, m.tokenizer->bos_id(), 2, {"."});
  for (auto& r : reqs) r.abort_after = -1;
  const EngineOptions opt = SmallEngine();
  auto ref = RunRequests(m, opt, reqs);
  auto eng = Engine::Create(m, opt);
  ASSERT_TRUE(eng.ok());
  Engine& e = **eng;
  std::vector<RequestResult> got(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    got[i].samples.resize(reqs[i].params.n);
    auto v = e.Check(reqs[i].prompt, reqs[i].params);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(v->prompt(), reqs[i].prompt);
    ASSERT_TRUE(e.Add(std::move(*v), [&got, i](const RequestOutput& ev) {
                   SampleResult& s = got[i].samples[ev.index];
                   s.tokens.insert(s.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
                   for (const auto& lp : ev.logprobs) {
                     s.logprobs.push_back(lp.logprob);
                     s.top.push_back(lp.top);
                   }
                   s.text += ev.text;
                   got[i].cached_tokens = ev.cached_tokens;
                   if (ev.finished) {
                     ++s.finals;
                     s.finish_reason = ev.finish_reason;
                     s.stop_reason = ev.stop_reason;
                   }
                 }).ok());
  }
  ASSERT_TRUE(e.RunUntilIdle().ok());
  EXPECT_TRUE(e.CheckNoLeaks().ok());
  ExpectSameResults(ref, got, "Check + Add(ValidatedRequest) vs Add");

  RequestParams bad;
  bad.max_tokens = 0;
  auto refused = e.Check({1, 2}, bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(), e.Validate({1, 2}, bad).message());
  EXPECT_EQ(refused.status().message(), e.Add({1, 2}, bad, nullptr).status().message());

  auto other = Engine::Create(m, opt);
  ASSERT_TRUE(other.ok());
  auto v = e.Check({1, 2}, RequestParams{});
  ASSERT_TRUE(v.ok());
  auto id = (*other)->Add(std::move(*v), nullptr);
  EXPECT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("another engine"), std::string::npos) << id.status().message();
}

// Shutdown with requests still running aborts them, drains the pipeline, and leaves nothing behind; also
// without overlap, where no step is in flight when the loop stops and the aborts alone release everything.
class ShutdownMidFlight : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(Overlap, ShutdownMidFlight, ::testing::Bool());

TEST_P(ShutdownMidFlight, DrainsAndChecksLeaks) {
  const Model& m = Stories();
  EngineOptions opt = SmallEngine();
  opt.overlap = GetParam();
  auto eng = Engine::Create(m, opt);
  ASSERT_TRUE(eng.ok());
  Engine& e = **eng;
  std::atomic<int> finals{0}, aborted{0};
  e.Start();
  for (int i = 0; i < 40; ++i) {
    RequestParams p;
    p.max_tokens = 400;
    p.ignore_eos = true;
    ASSERT_TRUE(e.Add({1, static_cast<int32_t>(10 + i)}, p, [&](const RequestOutput& ev) {
                   if (ev.finished) {
                     ++finals;
                     aborted += ev.finish_reason == "abort";
                   }
                 }).ok());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  Status s = e.Shutdown();
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(finals.load(), 40);
  EXPECT_GT(aborted.load(), 0);
  EXPECT_FALSE(e.Add({1, 2}, RequestParams{}, nullptr).ok()) << "a stopped engine refuses new work";
}

}  // namespace
}  // namespace deepinfer::testing
