// Speculative decoding's contract (engine/speculative.h): with exact verification every proposer gives plain
// decoding's tokens, text, finish reasons and log-probs bit for bit, overlap on and off, over a mixed workload
// (sampling filters, penalties, logit bias, stop strings, EOS, n > 1, logprobs, aborts, per-request k and
// method); a self-draft accepts every draft; rejected drafts leave the KV cache as a fresh prefill would;
// rejection sampling keeps the output distribution; bad configurations fail clearly.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "engine_harness.h"
#include "engine/speculative.h"

namespace deepinfer::testing {
namespace {

EngineOptions SpecEngine(SpecMethod method, int k = 3) {
  EngineOptions o;
  o.max_num_seqs = 16;
  o.max_batched_tokens = 64;  // forces chunked prefill, and cuts some verify rows short of k
  o.block_size = 8;
  o.num_kv_blocks = 320;
  o.speculative = method;
  o.num_speculative_tokens = k;
  return o;
}

const Model& TinyTarget() {
  static std::unique_ptr<Model> m = MakeTiny(SmallSpec(Arch::kQwen3), "spec_target");
  return *m;
}

// Same layout and vocabulary, other weights: a draft that is almost always wrong.
const Model& TinyOtherDraft() {
  static std::unique_ptr<Model> m = [] {
    TinySpec s = SmallSpec(Arch::kQwen3);
    s.seed = 99;
    s.vocab_seed = 1;  // the target's tokenizer
    s.layers = 1;
    return MakeTiny(s, "spec_draft");
  }();
  return *m;
}

const Model& TinyDeepseekMtp() {
  static std::unique_ptr<Model> m = [] {
    TinySpec s = SmallSpec(Arch::kDeepseekV3);
    s.layers = 2;
    s.experts = 8;
    s.experts_used = 2;
    s.n_group = 2;
    s.topk_group = 1;
    s.mtp = true;
    return MakeTiny(s, "spec_mtp");
  }();
  return *m;
}

// DeepSeek-V4's MTP block over the specification's tiny shape (window 16; window-only, CSA and HCA layers):
// the module reads the main model's four residual streams and keeps its window K/V in its own cache; drafts
// are verified across CSA's 4-blocks, HCA's 128-block and window edges, prefix hits replay windows (exact).
const Model& TinyDeepseekV4Mtp() {
  static std::unique_ptr<Model> m = [] {
    TinySpec s = SmallSpec(Arch::kDeepseekV4);
    s.mtp = true;
    return MakeTiny(s, "spec_v4_mtp");
  }();
  return *m;
}

// Sliding windows of 10 on two layers of three: verification rows and rejected drafts at the window's edge.
const Model& TinyGemma3Windowed() {
  static std::unique_ptr<Model> m = [] {
    TinySpec s = SmallSpec(Arch::kGemma3);
    s.layers = 3;
    s.window = 10;
    s.swa_period = 3;
    return MakeTiny(s, "spec_gemma3");
  }();
  return *m;
}

// The mixed workload, with per-request speculation varied inside one batch: some requests off, some with
// k = 1 or 5, some switched to the n-gram proposer whatever the engine's method.
std::vector<TestRequest> SpecWorkload(const Model& m, int count, uint32_t seed, const std::vector<std::string>& stops) {
  auto reqs = MixedWorkload(count, m.config.vocab_size, m.tokenizer->bos_id(), seed, stops);
  std::mt19937 rng(seed + 1);
  for (auto& r : reqs) {
    switch (rng() % 8) {
      case 0: r.params.num_speculative_tokens = 0; break;
      case 1: r.params.num_speculative_tokens = 1; break;
      case 2: r.params.num_speculative_tokens = 5; break;
      case 3:
        r.params.spec_method = SpecMethod::kNgram;
        break;
      default: break;
    }
  }
  return reqs;
}

struct SpecCase {
  const char* name;
  const Model& (*model)();
  SpecMethod method;
  const Model* (*draft)();
  std::vector<std::string> stops;
  bool expect_accepts;  // the proposer is good enough that some drafts must be accepted
};

const Model* NoDraft() { return nullptr; }
const Model* StoriesSelf() { return &Stories(); }
const Model* OtherDraft() { return &TinyOtherDraft(); }
const Model* Gemma3Self() { return &TinyGemma3Windowed(); }

class SpecEquivalence : public ::testing::TestWithParam<int> {
 protected:
  SpecCase Get() const {
    const std::vector<std::string> story_stops = {".", "Lily", "the park", ", "}, tiny_stops = {"a", "e ", "\n"};
    switch (GetParam()) {
      case 0: return {"stories260K ngram", Stories, SpecMethod::kNgram, NoDraft, story_stops, true};
      case 1: return {"stories260K self-draft", Stories, SpecMethod::kDraft, StoriesSelf, story_stops, true};
      case 2: return {"tiny-qwen3 other-weights draft", TinyTarget, SpecMethod::kDraft, OtherDraft, tiny_stops, false};
      case 3: return {"tiny-deepseek-v3 mtp", TinyDeepseekMtp, SpecMethod::kMtp, NoDraft, tiny_stops, false};
      case 4: return {"tiny-gemma3 windowed self-draft", TinyGemma3Windowed, SpecMethod::kDraft, Gemma3Self, tiny_stops, true};
      default: return {"tiny-deepseek-v4 mtp", TinyDeepseekV4Mtp, SpecMethod::kMtp, NoDraft, tiny_stops, false};
    }
  }
};

// Must-show 1: 200+ mixed requests, each method on vs off, overlap on and off: bit-identical results.
TEST_P(SpecEquivalence, SameOutputsAsPlainDecoding) {
  const SpecCase c = Get();
  const Model& m = c.model();
  auto reqs = SpecWorkload(m, 220, 7, c.stops);
  EngineOptions plain = SpecEngine(SpecMethod::kNone);
  plain.num_kv_blocks = TestPoolBlocks(m, plain.num_kv_blocks);
  auto ref = RunRequests(m, plain, reqs);
  for (bool overlap : {true, false}) {
    EngineOptions o = SpecEngine(c.method);
    o.num_kv_blocks = plain.num_kv_blocks;
    o.draft = c.draft();
    o.overlap = overlap;
    EngineStats st;
    auto got = RunRequests(m, o, reqs, &st);
    ExpectSameResults(ref, got, std::string(c.name) + (overlap ? ", overlap on" : ", overlap off"));
    EXPECT_GT(st.spec_draft_tokens, 300) << c.name << ": the proposer hardly ran";
    if (c.expect_accepts) {
      EXPECT_GT(st.spec_accepted_tokens, 50) << c.name;
      // Runs of several tokens committed in one step, and rejections, both happened.
      EXPECT_GT(st.spec_accepted_len[2] + st.spec_accepted_len[3], 10) << c.name;
    }
    EXPECT_GT(st.spec_accepted_len[0], 0) << c.name << ": no verify row rejected its first draft";
    int64_t rows = 0;
    for (int64_t n : st.spec_accepted_len) rows += n;
    EXPECT_EQ(rows, st.spec_drafts);
  }
}

// Rejection verification's tokens depend on the drafts verified (which positions have one, and which draft of a
// chain it is), so those must come from the request's own history alone: a pool so small that sequences are
// preempted and recomputed all the time (and rows wait for blocks), overlap off, and a larger token budget give
// the large pool's outputs bit for bit, for every proposer.
TEST_P(SpecEquivalence, RejectionOutputsIgnorePoolOverlapAndBudget) {
  const SpecCase c = Get();
  if (GetParam() == 1 || GetParam() == 4) GTEST_SKIP() << "self-drafts: covered by the other-weights draft";
  const Model& m = c.model();
  auto reqs = SpecWorkload(m, 60, 21, c.stops);
  for (auto& r : reqs) r.abort_after = -1;
  EngineOptions big = SpecEngine(c.method);
  big.draft = c.draft();
  big.spec_verify = SpecVerify::kRejection;
  big.num_kv_blocks = TestPoolBlocks(m, big.num_kv_blocks);
  EngineStats ref_st;
  auto ref = RunRequests(m, big, reqs, &ref_st);
  EXPECT_GT(ref_st.spec_accepted_tokens, 10) << c.name;
  EXPECT_GT(ref_st.spec_draft_tokens - ref_st.spec_accepted_tokens, 50) << c.name << ": too few rejections";
  for (bool overlap : {true, false}) {
    EngineOptions tiny = big;
    tiny.block_size = 4;
    tiny.max_batched_tokens = 16;
    tiny.num_kv_blocks = m.config.is_dsv4() ? 240 : 40;
    tiny.overlap = overlap;
    EngineStats st;
    auto got = RunRequests(m, tiny, reqs, &st);
    EXPECT_GT(st.preemptions, 20) << c.name << ": the pool was not small enough to force preemption";
    ExpectSameResults(ref, got, std::string(c.name) + ", rejection, tiny pool, overlap " + (overlap ? "on" : "off"));
  }
  EngineOptions wide = big;
  wide.overlap = false;
  wide.max_batched_tokens = 512;
  ExpectSameResults(ref, RunRequests(m, wide, reqs), std::string(c.name) + ", rejection, overlap off, budget 512");
}

std::string SpecName(const ::testing::TestParamInfo<int>& info) {
  static const char* kNames[] = {"Stories260KNgram", "Stories260KSelfDraft", "TinyQwen3OtherDraft", "TinyDeepseekV3Mtp",
                                 "TinyGemma3WindowedSelfDraft", "TinyDeepseekV4Mtp"};
  return kNames[info.param];
}
INSTANTIATE_TEST_SUITE_P(Methods, SpecEquivalence, ::testing::Values(0, 1, 2, 3, 4, 5), SpecName);

// Must-show 2: the target as its own draft proposes exactly the target's tokens (its logits are bitwise the
// target's and it draws with the same keyed randomness), so every draft is accepted, sampled or greedy; a
// draft with other weights is nearly always wrong and only costs speed (outputs checked above).
TEST(SpecEngineTest, SelfDraftAcceptsEveryDraftAndWrongDraftOnlyCostsSpeed) {
  const Model& m = Stories();
  auto reqs = MixedWorkload(60, m.config.vocab_size, m.tokenizer->bos_id(), 3, {});
  for (auto& r : reqs) r.abort_after = -1;
  EngineOptions o = SpecEngine(SpecMethod::kDraft, 4);
  o.draft = &m;
  EngineStats st;
  RunRequests(m, o, reqs, &st);
  EXPECT_GT(st.spec_draft_tokens, 1000);
  EXPECT_EQ(st.spec_accepted_tokens, st.spec_draft_tokens);

  const Model& t = TinyTarget();
  auto treqs = MixedWorkload(40, t.config.vocab_size, t.tokenizer->bos_id(), 4, {});
  for (auto& r : treqs) r.abort_after = -1, static_cast<SamplingParams&>(r.params) = SamplingParams{}, r.params.ignore_eos = true;
  EngineOptions w = SpecEngine(SpecMethod::kDraft, 4);
  w.draft = &TinyOtherDraft();
  EngineStats wst;
  auto got = RunRequests(t, w, treqs, &wst);
  auto ref = RunRequests(t, SpecEngine(SpecMethod::kNone), treqs);
  ExpectSameResults(ref, got, "wrong draft");
  EXPECT_LT(wst.spec_accepted_tokens * 10, wst.spec_draft_tokens) << "the other-weights draft was expected to be wrong";
}

// Must-show 4: after rejections, the K/V the sequence left in the cache equals a fresh prefill of its
// committed tokens: a second request whose prompt is the first's prompt plus output reuses those blocks from
// the prefix cache and must produce the log-probs of an engine that computes everything from scratch.
TEST(SpecEngineTest, RejectedDraftsLeaveTheCacheAsAFreshPrefill) {
  const Model& m = TinyTarget();
  TestRequest first;
  first.prompt = {1};
  for (int i = 0; i < 40; ++i) first.prompt.push_back(3 + (i * 37) % 300);
  first.params.max_tokens = 80;
  first.params.ignore_eos = true;
  EngineOptions o = SpecEngine(SpecMethod::kDraft, 4);
  o.draft = &TinyOtherDraft();
  auto eng = Engine::Create(m, o);
  ASSERT_TRUE(eng.ok()) << eng.status().ToString();
  std::vector<int32_t> out;
  ASSERT_TRUE((*eng)->Add(first.prompt, first.params, [&](const RequestOutput& ev) {
    out.insert(out.end(), ev.token_ids.begin(), ev.token_ids.end());
  }).ok());
  ASSERT_TRUE((*eng)->RunUntilIdle().ok());
  EngineStats st = (*eng)->Stats();
  ASSERT_GT(st.spec_draft_tokens - st.spec_accepted_tokens, 20) << "too few rejections to test rollback";
  ASSERT_EQ(out.size(), 80u);
  TestRequest second;
  second.prompt = first.prompt;
  second.prompt.insert(second.prompt.end(), out.begin(), out.end() - 1);
  second.params.max_tokens = 8;
  second.params.logprobs = 5;
  second.params.ignore_eos = true;
  RequestResult warm;
  warm.samples.resize(1);
  ASSERT_TRUE((*eng)->Add(second.prompt, second.params, [&](const RequestOutput& ev) {
    SampleResult& s = warm.samples[0];
    s.tokens.insert(s.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
    for (const auto& lp : ev.logprobs) s.logprobs.push_back(lp.logprob), s.top.push_back(lp.top);
    s.text += ev.text;
    warm.cached_tokens = ev.cached_tokens;
    if (ev.finished) ++s.finals, s.finish_reason = ev.finish_reason;
  }).ok());
  ASSERT_TRUE((*eng)->RunUntilIdle().ok());
  EXPECT_GE(warm.cached_tokens, 96) << "the second request did not reuse the speculated blocks";
  ASSERT_TRUE((*eng)->Shutdown().ok());
  EngineOptions cold = SpecEngine(SpecMethod::kNone);
  cold.prefix_caching = false;
  auto ref = RunRequests(m, cold, {second});
  warm.cached_tokens = ref[0].cached_tokens;
  ExpectSameResults(ref, {warm}, "prefix reuse after speculation");
  EXPECT_EQ(ref[0].samples[0].tokens.front(), out.back());
}

// The prefix cache publishes a block only once its K/V is verified in every cache: a self-draft (whose cache
// must then be complete wherever the target's is) keeps accepting every draft after reusing another request's
// blocks, whichever position the first request ended at relative to a block boundary.
TEST(SpecEngineTest, SelfDraftKeepsAcceptingAfterPrefixReuse) {
  const Model& m = Stories();
  EngineOptions o = SpecEngine(SpecMethod::kDraft, 4);
  o.block_size = 4;
  o.draft = &m;
  const std::vector<int32_t> prompt = {1, 400, 37, 99, 23, 250, 12, 77, 301};
  for (int max_tokens = 10; max_tokens <= 26; ++max_tokens) {
    auto eng = Engine::Create(m, o);  // a fresh prefix cache: the first request's blocks are the only ones
    ASSERT_TRUE(eng.ok()) << eng.status().ToString();
    RequestParams p;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    std::vector<int32_t> out;
    ASSERT_TRUE((*eng)->Add(prompt, p, [&](const RequestOutput& ev) {
      out.insert(out.end(), ev.token_ids.begin(), ev.token_ids.end());
    }).ok());
    ASSERT_TRUE((*eng)->RunUntilIdle().ok());
    const EngineStats s1 = (*eng)->Stats();
    std::vector<int32_t> second = prompt;
    second.insert(second.end(), out.begin(), out.end());
    int cached = 0;
    p.max_tokens = 24;
    ASSERT_TRUE((*eng)->Add(second, p, [&](const RequestOutput& ev) { cached = ev.cached_tokens; }).ok());
    ASSERT_TRUE((*eng)->RunUntilIdle().ok());
    const EngineStats s2 = (*eng)->Stats();
    EXPECT_GT(cached, 4) << "max_tokens " << max_tokens << ": no prefix reuse";
    EXPECT_EQ(s2.spec_accepted_tokens - s1.spec_accepted_tokens, s2.spec_draft_tokens - s1.spec_draft_tokens)
        << "max_tokens " << max_tokens << ": the draft's cache had a hole in a reused block";
    ASSERT_TRUE((*eng)->Shutdown().ok());
  }
}

// MTP's first draft comes from the previous step; drafts 2..k come from chaining the module on its own output.
// Exact verification keeps the outputs whatever the proposer does (checked above), so only the counters show a
// chain that stopped: rows of k = 3 must verify more than two drafts on average.
TEST(SpecEngineTest, MtpChainsTheModuleForDraftsAfterTheFirst) {
  const Model& m = TinyDeepseekMtp();
  std::vector<TestRequest> reqs(4);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].prompt = {1, static_cast<int32_t>(5 + i), 9, 200};
    reqs[i].params.max_tokens = 24;
    reqs[i].params.ignore_eos = true;
  }
  EngineOptions o = SpecEngine(SpecMethod::kMtp, 3);
  o.num_kv_blocks = TestPoolBlocks(m, o.num_kv_blocks);
  EngineStats st;
  RunRequests(m, o, reqs, &st);
  EXPECT_GT(st.spec_drafts, 40);
  EXPECT_GT(st.spec_draft_tokens, 2 * st.spec_drafts) << "the MTP module was not chained past the first draft";
}

// max_tokens up to INT32_MAX is a valid request: the context ends it ("length"), with speculation as without.
TEST(SpecEngineTest, HugeMaxTokensEndsAtTheContext) {
  const Model& m = Stories();
  EngineOptions o = SpecEngine(SpecMethod::kNgram, 4);
  o.max_model_len = 96;
  TestRequest r;
  r.prompt = {1, 400, 37, 99};
  r.params.max_tokens = INT32_MAX;
  r.params.ignore_eos = true;
  auto got = RunRequests(m, o, {r});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].samples[0].finish_reason, "length");
  EXPECT_EQ(got[0].samples[0].tokens.size(), 92u);
}

// Upper tail of the chi-square distribution with k degrees of freedom (Wilson-Hilferty; accurate to ~1e-3
// relative for k >= 10, plenty for a threshold of 1e-4).
double ChiSquarePValue(double x, int k) {
  const double z = (std::cbrt(x / k) - (1 - 2.0 / (9 * k))) / std::sqrt(2.0 / (9 * k));
  return 0.5 * std::erfc(z / std::sqrt(2.0));
}

// Must-show 3: rejection sampling keeps the output distribution. 20,000 seeded requests of three tokens at
// temperature 1 on a tiny model, once plainly and once verified by rejection sampling against a draft with
// other weights: the second and third tokens' distributions (where drafts were verified) must agree by a
// two-sample chi-square test (p >= 1e-4; cells with fewer than 10 expected merged). Runs repeat per seed.
TEST(SpecEngineTest, RejectionSamplingKeepsTheDistribution) {
  const Model& m = TinyTarget();
  std::vector<TestRequest> reqs(20000);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].prompt = {1, 17, 42, 99, 17, 42};
    reqs[i].params.max_tokens = 3;
    reqs[i].params.ignore_eos = true;
    reqs[i].params.seed = 1000 + i;
    reqs[i].params.temperature = 1.0f;
  }
  EngineOptions plain = SpecEngine(SpecMethod::kNone);
  plain.max_num_seqs = 64;
  plain.max_batched_tokens = 512;
  plain.num_kv_blocks = 1024;
  EngineOptions rej = plain, exact = plain;
  rej.speculative = exact.speculative = SpecMethod::kDraft;
  rej.num_speculative_tokens = exact.num_speculative_tokens = 2;
  rej.draft = exact.draft = &TinyOtherDraft();
  rej.spec_verify = SpecVerify::kRejection;
  EngineStats st_rej, st_exact;
  // Disjoint seeds: the two samples must be independent (with equal seeds a rejected draft's replacement reuses
  // plain decoding's random number, which would couple them and hide a biased replacement distribution).
  std::vector<TestRequest> other = reqs;
  for (size_t i = 0; i < other.size(); ++i) other[i].params.seed = 5000000 + i;
  auto a = RunRequests(m, plain, reqs);
  auto b = RunRequests(m, rej, other, &st_rej);
  RunRequests(m, exact, reqs, &st_exact);
  ASSERT_GT(st_rej.spec_draft_tokens, 10000);
  ASSERT_GT(st_rej.spec_draft_tokens - st_rej.spec_accepted_tokens, 1000) << "residual sampling barely ran";
  std::printf("acceptance: rejection %.4f, exact %.4f (draft with other weights, k = 2, temperature 1)\n",
              double(st_rej.spec_accepted_tokens) / st_rej.spec_draft_tokens,
              double(st_exact.spec_accepted_tokens) / st_exact.spec_draft_tokens);
  EXPECT_GT(st_rej.spec_accepted_tokens, st_exact.spec_accepted_tokens);
  for (int pos : {1, 2}) {
    std::map<int32_t, std::pair<double, double>> counts;
    for (size_t i = 0; i < reqs.size(); ++i) {
      ASSERT_EQ(a[i].samples[0].tokens.size(), 3u);
      ASSERT_EQ(b[i].samples[0].tokens.size(), 3u);
      counts[a[i].samples[0].tokens[pos]].first += 1;
      counts[b[i].samples[0].tokens[pos]].second += 1;
    }
    // Two-sample chi-square with equal sample sizes; rare tokens pooled into one cell.
    double chi = 0, pool_a = 0, pool_b = 0;
    int cells = 0;
    auto add = [&](double x, double y) {
      chi += (x - y) * (x - y) / (x + y);
      ++cells;
    };
    for (const auto& [tok, n] : counts) {
      if (n.first + n.second < 20) {
        pool_a += n.first, pool_b += n.second;
        continue;
      }
      add(n.first, n.second);
    }
    if (pool_a + pool_b > 0) add(pool_a, pool_b);
    const double p = ChiSquarePValue(chi, cells - 1);
    std::printf("token %d: chi-square %.1f over %d cells, p = %.4f\n", pos + 1, chi, cells, p);
    EXPECT_GE(p, 1e-4) << "token " << pos + 1 << ": rejection sampling changed the distribution";
    EXPECT_GT(cells, 20);
  }
  auto again = RunRequests(m, rej, std::vector<TestRequest>(other.begin(), other.begin() + 500));
  for (size_t i = 0; i < again.size(); ++i) ASSERT_EQ(again[i].samples[0].tokens, b[i].samples[0].tokens) << i;
}

// Must-show 5: bad configurations fail at start-up, bad requests at Add, with messages naming the problem.
TEST(SpecEngineTest, BadInputIsRefusedClearly) {
  EngineOptions o = SpecEngine(SpecMethod::kDraft);
  o.draft = &TinyTarget();  // 384 tokens, stories260K has 512
  auto e = Engine::Create(Stories(), o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("vocabulary"), std::string::npos) << e.status().ToString();
  o.draft = nullptr;
  e = Engine::Create(Stories(), o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("--draft-model"), std::string::npos) << e.status().ToString();
  o = SpecEngine(SpecMethod::kNgram, 17);
  e = Engine::Create(Stories(), o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("--num-speculative-tokens"), std::string::npos) << e.status().ToString();
  o = SpecEngine(SpecMethod::kMtp);
  e = Engine::Create(Stories(), o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("MTP"), std::string::npos) << e.status().ToString();

  e = Engine::Create(Stories(), SpecEngine(SpecMethod::kNgram));
  ASSERT_TRUE(e.ok());
  RequestParams p;
  p.num_speculative_tokens = 99;
  Status s = (*e)->Validate({1, 2, 3}, p);
  EXPECT_NE(s.message().find("num_speculative_tokens"), std::string::npos) << s.ToString();
  p.num_speculative_tokens = 2;
  p.spec_method = SpecMethod::kDraft;
  s = (*e)->Validate({1, 2, 3}, p);
  EXPECT_NE(s.message().find("draft"), std::string::npos) << s.ToString();
  p.spec_method = SpecMethod::kMtp;
  s = (*e)->Validate({1, 2, 3}, p);
  EXPECT_NE(s.message().find("MTP"), std::string::npos) << s.ToString();
}

TEST(SpecEngineTest, NgramProposerFindsTheLatestLongestMatch) {
  const std::vector<int32_t> h = {5, 6, 7, 8, 1, 6, 7, 9, 4, 2, 6, 7};
  int32_t out[4];
  // "6 7" last occurred followed by 9 4 2; the 3-gram "2 6 7" never occurred before.
  ASSERT_EQ(ProposeNgram(h.data(), static_cast<int>(h.size()), 2, 3, 3, out), 3);
  EXPECT_EQ(std::vector<int32_t>(out, out + 3), (std::vector<int32_t>{9, 4, 2}));
  EXPECT_EQ(ProposeNgram(h.data(), static_cast<int>(h.size()), 3, 4, 3, out), 0);
  // A match near the end continues with the period it implies: 3 4 3 4 -> 3 4 3 4; 5 5 5 -> 5 5 5.
  const std::vector<int32_t> g = {3, 4, 3, 4};
  ASSERT_EQ(ProposeNgram(g.data(), 4, 2, 2, 4, out), 4);
  EXPECT_EQ(std::vector<int32_t>(out, out + 4), (std::vector<int32_t>{3, 4, 3, 4}));
  const std::vector<int32_t> r = {7, 5, 5, 5};
  ASSERT_EQ(ProposeNgram(r.data(), 4, 2, 3, 3, out), 3);
  EXPECT_EQ(std::vector<int32_t>(out, out + 3), (std::vector<int32_t>{5, 5, 5}));
}

}  // namespace
}  // namespace deepinfer::testing

