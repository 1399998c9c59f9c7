// Speculative decoding's contract (engine/speculative.h): with exact verification every proposer gives plain
// decoding's tokens, text, finish reasons and log-probs bit for bit, overlap on and off, over a mixed workload
// (sampling filters, penalties, logit bias, stop strings, EOS, n > 1, logprobs, aborts, per-request k and
// method); a self-draft accepts every draft; rejected drafts leave the KV cache as a fresh prefill would;
// rejection sampling keeps the output distribution; bad configurations fail clearly.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
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
// Self-drafts are left out (instantiated below): the other-weights draft covers the draft model.
class SpecRejection : public SpecEquivalence {};
TEST_P(SpecRejection, RejectionOutputsIgnorePoolOverlapAndBudget) {
  const SpecCase c = Get();
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
INSTANTIATE_TEST_SUITE_P(Methods, SpecRejection, ::testing::Values(0, 2, 3, 5), SpecName);

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

// DeepSeek-V4's MTP block attends to a window of W: with --speculative mtp its K=V rows are one more windowed
// plane of the main cache (ModelConfig::Dsv4Layout(true)), released as the window slides, so the KV bytes a
// sequence holds with MTP on exceed plain decoding's by a constant, not by head_dim x dtype bytes per token.
// Shown to fail with main's separate cache indexed by the anchor's table (EngineOptions::mtp_separate_cache),
// checked here too: from 100 to 400 tokens its excess grew by 766 KB (it pages an MTP row for every position of
// every block id the sequence holds, in any group) against a bound of 38 KB.
TEST(SpecEngineTest, DeepseekV4MtpKvIsBoundedByTheWindow) {
  const Model& m = TinyDeepseekV4Mtp();
  // Peak bytes over every cache the engine pages, one greedy request of a `len`-token prompt and 8 tokens.
  auto held = [&](SpecMethod method, int len, bool separate) -> int64_t {
    EngineOptions o = SpecEngine(method, 3);
    o.num_kv_blocks = TestPoolBlocks(m, o.num_kv_blocks);
    o.prefix_caching = false;
    o.max_num_seqs = 1;
    o.mtp_separate_cache = separate;
    auto e = MakeEngine(m, o);
    if (!e) return -1;
    RequestParams p;
    p.max_tokens = 8;
    p.ignore_eos = true;
    std::vector<int32_t> prompt = {1};
    for (int i = 1; i < len; ++i) prompt.push_back(3 + (i * 37) % 300);
    int got = 0;
    EXPECT_TRUE(e->Add(prompt, p, [&](const RequestOutput& ev) { got += static_cast<int>(ev.token_ids.size()); }).ok());
    EXPECT_TRUE(e->RunUntilIdle().ok());
    EXPECT_EQ(got, 8);
    EXPECT_TRUE(e->CheckNoLeaks().ok());
    EXPECT_GT(e->kv_block_bytes(), 0u);
    int64_t blocks = 0;
    for (int g = 0; g < e->kv_layout().num_groups(); ++g) blocks += e->kv_group_peak(g);
    return blocks * static_cast<int64_t>(e->kv_block_bytes());
  };
  const int short_len = 100, long_len = 400;
  const int64_t plain_short = held(SpecMethod::kNone, short_len, false), plain_long = held(SpecMethod::kNone, long_len, false);
  ASSERT_GT(plain_short, 0);
  // A row per position adds head_dim x dtype bytes per token; the windowed plane's blocks only vary with how the
  // lengths fall on block edges (a few blocks over the 23 groups).
  const int64_t per_position = static_cast<int64_t>(long_len - short_len) *
                               static_cast<int64_t>(DTypeBytes(SpecEngine(SpecMethod::kMtp).kv_dtype(), m.config.head_dim));
  for (bool separate : {false, true}) {
    const int64_t mtp_short = held(SpecMethod::kMtp, short_len, separate), mtp_long = held(SpecMethod::kMtp, long_len, separate);
    ASSERT_GT(mtp_short, 0);
    const int64_t growth = (mtp_long - plain_long) - (mtp_short - plain_short);
    const std::string what = "MTP on (" + std::string(separate ? "separate cache" : "windowed plane") + "): " +
                             std::to_string(mtp_short) + " -> " + std::to_string(mtp_long) + " bytes; plain: " +
                             std::to_string(plain_short) + " -> " + std::to_string(plain_long) + " bytes (" +
                             std::to_string(short_len) + " -> " + std::to_string(long_len) + " tokens)";
    if (separate)
      EXPECT_GT(growth, per_position) << what << ": the separate cache was expected to grow per position";
    else
      EXPECT_LT(growth, per_position / 4) << what;
    EXPECT_GE(mtp_long, plain_long);
  }
}

// The windowed MTP plane is a layout variant only where it is used: DeepSeek-V4 without --speculative mtp keeps
// the plain model's layout and KV digest, with it the layout gains the plane (and the digest differs: its blocks
// hold more); DeepSeek-V3's MTP (full attention) keeps its separate cache and the plain layout.
TEST(SpecEngineTest, DeepseekV4MtpPlaneOnlyWithMtp) {
  const Model& v4 = TinyDeepseekV4Mtp();
  EngineOptions plain = SpecEngine(SpecMethod::kNone), mtp = SpecEngine(SpecMethod::kMtp), ngram = SpecEngine(SpecMethod::kNgram);
  plain.num_kv_blocks = mtp.num_kv_blocks = ngram.num_kv_blocks = TestPoolBlocks(v4, plain.num_kv_blocks);
  auto a = MakeEngine(v4, plain), b = MakeEngine(v4, mtp), n = MakeEngine(v4, ngram);
  ASSERT_TRUE(a && b && n);
  EXPECT_EQ(a->kv_layout().num_layers, static_cast<int>(v4.config.kv_layer_windows().size()));
  EXPECT_EQ(b->kv_layout().num_layers, a->kv_layout().num_layers + v4.config.n_mtp);
  EXPECT_EQ(b->kv_layout().num_groups(), a->kv_layout().num_groups() + 1);  // one plane per block: a group of its own
  EXPECT_EQ(b->kv_block_bytes(), a->kv_block_bytes());                      // no separate cache
  EXPECT_EQ(n->model_digest(), a->model_digest());
  EXPECT_NE(b->model_digest(), a->model_digest());
  const Model& v3 = TinyDeepseekMtp();
  auto c = MakeEngine(v3, SpecEngine(SpecMethod::kNone)), d = MakeEngine(v3, SpecEngine(SpecMethod::kMtp));
  ASSERT_TRUE(c && d);
  EXPECT_EQ(d->kv_layout().num_layers, c->kv_layout().num_layers);
  EXPECT_EQ(d->model_digest(), c->model_digest());
  EXPECT_EQ(2 * d->kv_block_bytes(), 3 * c->kv_block_bytes());  // V3: the MTP cache's layer beside the model's two
}

// The windowed MTP plane holds what the separate cache held, wherever the module reads it: under rejection
// verification a sampled row's output depends on its drafts and their distributions, so the module's every row
// (the window through the main cache's window group, its blocks from prefix hits and rebuilt by bounded replay,
// chained drafts) must equal the separate cache's for the outputs to agree bit for bit. Overlap on and off.
TEST(SpecEngineTest, DeepseekV4MtpWindowedPlaneDraftsAsTheSeparateCache) {
  const Model& m = TinyDeepseekV4Mtp();
  auto reqs = SpecWorkload(m, 120, 11, {"a", "e ", "\n"});
  for (bool overlap : {true, false}) {
    EngineOptions sep = SpecEngine(SpecMethod::kMtp, 3);
    // One pool for both: the two layouts take different bytes per block, and no run preempts in 4000 blocks.
    sep.num_kv_blocks = 4000;
    sep.spec_verify = SpecVerify::kRejection;
    sep.overlap = overlap;
    sep.mtp_separate_cache = true;
    EngineOptions win = sep;
    win.mtp_separate_cache = false;
    EngineStats st_sep, st_win;
    auto ref = RunRequests(m, sep, reqs, &st_sep);
    auto got = RunRequests(m, win, reqs, &st_win);
    ExpectSameResults(ref, got, std::string("windowed MTP plane vs separate cache, overlap ") + (overlap ? "on" : "off"));
    EXPECT_GT(st_win.spec_draft_tokens, 300);
    EXPECT_EQ(st_win.spec_draft_tokens, st_sep.spec_draft_tokens);
    EXPECT_EQ(st_win.spec_accepted_tokens, st_sep.spec_accepted_tokens);
    EXPECT_GT(st_win.spec_accepted_tokens, 0) << "no draft accepted: the comparison shows little";
    EXPECT_GT(st_win.replayed_prompt_tokens, 0) << "no prefix hit replayed a window";
    EXPECT_GT(st_win.cached_prompt_tokens, 0);
    EXPECT_EQ(st_win.preemptions + st_sep.preemptions, 0);
    std::cout << "overlap " << overlap << ": drafts " << st_win.spec_draft_tokens << ", accepted " << st_win.spec_accepted_tokens
              << ", replayed prompt tokens " << st_win.replayed_prompt_tokens << " (separate cache: " << st_sep.replayed_prompt_tokens
              << ")\n";
  }
}

// --speculative mtp on DeepSeek-V4 with the cache's other modes. --swa-full: every plane keeps every position (the
// MTP plane too, KvLayout::mtp_first_layer still naming it); under exact verification the outputs are plain
// decoding's with --swa-full. --swa-replay approx: a hit recomputes the window and the open compressor block (the
// MTP plane restarts there with the target's windows); outputs are approximate by design but must not depend on
// the batch layout or overlap.
TEST(SpecEngineTest, DeepseekV4MtpUnderSwaFullAndApproxReplay) {
  const Model& m = TinyDeepseekV4Mtp();
  auto reqs = SpecWorkload(m, 80, 23, {"a", "e ", "\n"});
  {
    EngineOptions plain = SpecEngine(SpecMethod::kNone);
    plain.swa_full = true;
    plain.num_kv_blocks = 4000;
    EngineOptions mtp = SpecEngine(SpecMethod::kMtp, 3);
    mtp.swa_full = true;
    mtp.num_kv_blocks = plain.num_kv_blocks;
    auto e = MakeEngine(m, mtp);
    ASSERT_TRUE(e);
    EXPECT_GE(e->kv_layout().mtp_first_layer, 0);
    EXPECT_FALSE(e->kv_layout().windowed());
    EngineStats st;
    auto ref = RunRequests(m, plain, reqs);
    auto got = RunRequests(m, mtp, reqs, &st);
    ExpectSameResults(ref, got, "--swa-full: MTP vs plain decoding");
    EXPECT_GT(st.spec_draft_tokens, 100);
    EXPECT_GT(st.cached_prompt_tokens, 0);
  }
  // --swa-replay approx: A (300 tokens) runs first; B shares its first 280 and hits there, recomputing from a cut
  // below the windows (cached > 0: the 128-ratio layers' rows end at 256) with the module drafting throughout.
  const int32_t bos = m.tokenizer->bos_id();
  TestRequest a, b;
  a.prompt = {bos};
  for (int i = 1; i < 300; ++i) a.prompt.push_back(3 + (i * 7919 + 13) % (m.config.vocab_size - 3));
  a.params.max_tokens = 4;
  a.params.ignore_eos = true;
  b.prompt.assign(a.prompt.begin(), a.prompt.begin() + 280);
  for (int i = 0; i < 20; ++i) b.prompt.push_back(3 + (i * 104729 + 5) % (m.config.vocab_size - 3));
  b.params.max_tokens = 48;
  b.params.ignore_eos = true;
  b.params.temperature = 0.9f;
  b.params.seed = 77;
  b.params.logprobs = 1;
  std::vector<TestRequest> others(2);
  for (size_t k = 0; k < others.size(); ++k) {
    others[k].prompt = {bos, static_cast<int32_t>(40 + k), 41, 42};
    others[k].params.max_tokens = 24;
    others[k].params.ignore_eos = true;
  }
  std::vector<RequestResult> runs;
  for (const bool batched : {false, true})
    for (const bool overlap : {true, false}) {
      EngineOptions o = SpecEngine(SpecMethod::kMtp, 3);
      o.swa_replay_approx = true;
      o.num_kv_blocks = 4000;
      o.overlap = overlap;
      // Rejection: B's sampled tokens depend on the module's drafts and their distributions, so on every row of
      // the MTP plane the replay rebuilt.
      o.spec_verify = SpecVerify::kRejection;
      auto e = MakeEngine(m, o);
      ASSERT_TRUE(e);
      auto run = [&](const TestRequest& r, RequestResult* out) {
        out->samples.resize(1);
        return e->Add(r.prompt, r.params, [out](const RequestOutput& ev) {
          SampleResult& s = out->samples[0];
          s.tokens.insert(s.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
          for (const auto& lp : ev.logprobs) s.logprobs.push_back(lp.logprob), s.top.push_back(lp.top);
          out->cached_tokens = ev.cached_tokens;
          out->replayed_tokens = ev.replayed_tokens;
          if (ev.finished) ++s.finals, s.finish_reason = ev.finish_reason;
        });
      };
      RequestResult ra, rb;
      std::vector<RequestResult> side(others.size());
      ASSERT_TRUE(run(a, &ra).ok());
      ASSERT_TRUE(e->RunUntilIdle().ok());
      ASSERT_TRUE(run(b, &rb).ok());
      if (batched) {
        for (size_t k = 0; k < others.size(); ++k) ASSERT_TRUE(run(others[k], &side[k]).ok());
      }
      ASSERT_TRUE(e->RunUntilIdle().ok());
      ASSERT_TRUE(e->CheckNoLeaks().ok());
      const std::string what = std::string("approx + MTP, ") + (batched ? "batched" : "alone") + ", overlap " + (overlap ? "on" : "off");
      ASSERT_EQ(rb.samples[0].tokens.size(), 48u) << what;
      EXPECT_GT(rb.cached_tokens, 0) << what << ": the hit was not cut below the window";
      EXPECT_GT(rb.replayed_tokens, 0) << what;
      // --speculative mtp matches one block less (Scheduler's prefix_drop_last_block: the module needs the
      // target's hidden state of the row before the first one it runs).
      EXPECT_EQ(rb.cached_tokens + rb.replayed_tokens, 280 - o.block_size) << what;
      EXPECT_GT(e->Stats().spec_draft_tokens, 20) << what;
      // Rejection verification takes every row's full k or waits (SchedulerConfig::spec_full_k), so the tokens do
      // not depend on overlap or the batch either.
      runs.push_back(rb);
      if (runs.size() > 1) ExpectSameResults({runs[0]}, {runs.back()}, what + " vs alone, overlap on");
    }
  std::printf("[approx+mtp] shared 280: cached %d + replayed %d\n", runs[0].cached_tokens, runs[0].replayed_tokens);
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

