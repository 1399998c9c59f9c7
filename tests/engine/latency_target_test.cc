// The latency target (--target-itl-ms, issue 37): the step cost model's fit, and the engine that sizes each step's
// prefill from it. Step times come from a deterministic clock (EngineOptions::step_clock: a fixed linear function
// of the step's tokens and query-key pairs), so what the scheduler may do is known exactly and the test does not
// depend on the machine's speed; the model, the executor and the scheduler are the real ones.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <functional>
#include <random>

#include "engine/step_cost_model.h"
#include "engine_harness.h"

namespace deepinfer::testing {
namespace {

// The synthetic device: 2 ms per step, 20 us per token, 50 ns per query-key pair.
constexpr double kA = 2e-3, kB = 20e-6, kC = 50e-9;
double SyntheticSeconds(double tokens, double attention) { return kA + kB * tokens + kC * attention; }
double SyntheticSeconds(const StepShape& s) { return SyntheticSeconds(s.tokens, s.attention); }

StepShape Shape(int tokens, int prefill, double attention) {
  StepShape s;
  s.tokens = tokens;
  s.prefill_tokens = prefill;
  s.decode_rows = tokens - prefill;
  s.attention = attention;
  return s;
}

TEST(StepCostModelTest, RecoversTheCostAndSizesPrefillToTheTarget) {
  StepCostModel m;
  std::mt19937 rng(37);
  for (int i = 0; i < 40; ++i) {
    const int decode = 1 + static_cast<int>(rng() % 16), prefill = i % 3 == 0 ? static_cast<int>(rng() % 400) : 0;
    const double attention = decode * (50.0 + rng() % 300) + AttentionPairs(rng() % 200, prefill);
    const StepShape s = Shape(decode + prefill, prefill, attention);
    if (i < StepCostModel::kWarmupSteps - 1) {
      EXPECT_FALSE(m.warm()) << i;
    }
    m.Observe(s, SyntheticSeconds(s));
  }
  ASSERT_TRUE(m.warm());
  EXPECT_NEAR(m.coefficients()[0], kA, 1e-9);
  EXPECT_NEAR(m.coefficients()[1], kB, 1e-12);
  EXPECT_NEAR(m.coefficients()[2], kC, 1e-15);
  // The budget is the largest prefill whose step fits: one token more would not.
  const double target = 5e-3, decode_attention = 8 * 120.0;
  for (const int64_t context : {0, 100, 300}) {
    const int p = m.MaxPrefill(target, 8, decode_attention, context, 4096);
    EXPECT_GT(p, 0) << context;
    EXPECT_LE(SyntheticSeconds(8 + p, decode_attention + AttentionPairs(context, p)), target + 1e-12) << context;
    EXPECT_GT(SyntheticSeconds(9 + p, decode_attention + AttentionPairs(context, p + 1)), target) << context;
  }
  // A longer context leaves room for fewer prefill tokens; the cap and an impossible target are respected.
  EXPECT_GT(m.MaxPrefill(target, 8, decode_attention, 0, 4096), m.MaxPrefill(target, 8, decode_attention, 300, 4096));
  EXPECT_EQ(m.MaxPrefill(target, 8, decode_attention, 0, 10), 10);
  EXPECT_EQ(m.MaxPrefill(1e-3, 8, decode_attention, 0, 4096), 0);
}

TEST(StepCostModelTest, NoisyTimesNeverGiveNegativeCosts) {
  StepCostModel m;
  std::mt19937 rng(38);
  std::normal_distribution<double> noise(0, 1e-3);  // jitter as large as half the fixed cost
  for (int i = 0; i < 200; ++i) {
    const int decode = 4 + static_cast<int>(rng() % 4), prefill = i % 4 == 0 ? static_cast<int>(rng() % 64) : 0;
    const StepShape s = Shape(decode + prefill, prefill, decode * 100.0 + AttentionPairs(0, prefill));
    m.Observe(s, std::max(0.0, SyntheticSeconds(s) + noise(rng)));
    for (double c : m.coefficients()) ASSERT_GE(c, 0) << "step " << i;
  }
  EXPECT_TRUE(m.warm());
  // Only the fixed cost explains steps of equal size: without a spread of token counts the model stays cold.
  StepCostModel flat;
  for (int i = 0; i < 20; ++i) flat.Observe(Shape(4, 0, 400), 3e-3);
  EXPECT_FALSE(flat.warm());
  flat.Observe(Shape(4, 0, 400), std::nan(""));  // a broken reading is ignored
  EXPECT_EQ(flat.observed(), 20);
}

TEST(StepCostModelTest, LongDecodingDoesNotForgetWhatPrefillCosts) {
  StepCostModel m;
  for (int i = 0; i < 8; ++i) {  // a few prefill steps, then a long run of decode-only steps of one size
    const StepShape s = Shape(6 + 50 * (i + 1), 50 * (i + 1), 600 + AttentionPairs(0, 50 * (i + 1)));
    m.Observe(s, SyntheticSeconds(s));
  }
  for (int i = 0; i < 500; ++i) {
    const StepShape s = Shape(6, 0, 6 * (100.0 + i));
    m.Observe(s, SyntheticSeconds(s));
  }
  ASSERT_TRUE(m.warm());
  EXPECT_NEAR(m.coefficients()[1], kB, 1e-12) << "the per-token cost must survive 500 decode-only steps";
  const int p = m.MaxPrefill(5e-3, 6, 6 * 600.0, 0, 4096);
  EXPECT_LE(SyntheticSeconds(6 + p, 6 * 600.0 + AttentionPairs(0, p)), 5e-3 + 1e-12);
}

// One engine run with the synthetic clock: `streams` decode from the start; the long prompts arrive once stream 0
// has `late_after` tokens (the cost model has long been warm by then).
struct TargetRun {
  std::vector<RequestResult> results;
  std::vector<StepShape> steps;  // every step the executor ran, in order
  EngineStats stats;
  int arrived_at_step = -1;      // steps launched when the long prompts were added
};

TargetRun RunWithLongPromptsArrivingLate(const Model& m, EngineOptions opt, const std::vector<TestRequest>& streams,
                                         const std::vector<TestRequest>& longs, int late_after) {
  TargetRun run;
  // Called on the executor's stream, one step at a time in order; read after RunUntilIdle (every fence passed).
  opt.step_clock = [&run](const StepShape& s) {
    run.steps.push_back(s);
    return SyntheticSeconds(s);
  };
  auto eng = Engine::Create(m, opt);
  EXPECT_TRUE(eng.ok()) << eng.status().ToString();
  if (!eng.ok()) return run;
  Engine& e = **eng;
  run.results.resize(streams.size() + longs.size());
  bool added = false;
  std::function<void(size_t, const TestRequest&)> add = [&](size_t i, const TestRequest& r) {
    run.results[i].samples.resize(1);
    auto id = e.Add(r.prompt, r.params, [&, i](const RequestOutput& ev) {
      SampleResult& s = run.results[i].samples[0];
      s.tokens.insert(s.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
      for (const auto& lp : ev.logprobs) s.logprobs.push_back(lp.logprob), s.top.push_back(lp.top);
      s.text += ev.text;
      if (ev.finished) ++s.finals, s.finish_reason = ev.finish_reason;
      if (i == 0 && !added && static_cast<int>(s.tokens.size()) >= late_after) {
        added = true;
        run.arrived_at_step = static_cast<int>(e.Stats().steps);
        for (size_t j = 0; j < longs.size(); ++j) add(streams.size() + j, longs[j]);
      }
    });
    EXPECT_TRUE(id.ok()) << id.status().ToString();
  };
  for (size_t i = 0; i < streams.size(); ++i) add(i, streams[i]);
  EXPECT_TRUE(e.RunUntilIdle().ok());
  EXPECT_TRUE(added);
  EXPECT_TRUE(e.CheckNoLeaks().ok());
  run.stats = e.Stats();
  return run;
}

// Issue 37, must-show 1: with decoding streams running and long prompts arriving, no step after warm-up holds more
// prefill than the target allows, every such step stays within the target on the (synthetic) device, the
// untargeted engine puts the long prompts into steps several times the target, and outputs are bitwise those of
// the untargeted engine, overlap on and off.
TEST(EngineTest, LatencyTargetBoundsPrefillPerStepAndChangesNoOutput) {
  const Model& m = Stories();
  std::mt19937 rng(37);
  auto random_prompt = [&](int len) {
    std::vector<int32_t> p{m.tokenizer->bos_id()};
    for (int t = 1; t < len; ++t) p.push_back(static_cast<int32_t>(3 + rng() % (m.config.vocab_size - 3)));
    return p;
  };
  std::vector<TestRequest> streams(6), longs(3);
  for (size_t i = 0; i < streams.size(); ++i) {
    streams[i].prompt = random_prompt(4 + static_cast<int>(rng() % 9));
    streams[i].params.max_tokens = 80 + static_cast<int>(rng() % 60);  // they end at different steps
    streams[i].params.ignore_eos = true;
    streams[i].params.logprobs = i % 2 ? 3 : -1;
    streams[i].params.seed = rng();
    if (i % 3 == 1) streams[i].params.temperature = 0.8f, streams[i].params.top_k = 40;
  }
  for (TestRequest& r : longs) {  // random tokens: no prefix-cache hits, so every prompt position is computed
    r.prompt = random_prompt(300 + static_cast<int>(rng() % 40));
    r.params.max_tokens = 8;
    r.params.ignore_eos = true;
    r.params.logprobs = 2;
    r.params.seed = rng();
  }
  EngineOptions base;
  base.max_num_seqs = 16;
  base.max_batched_tokens = 512;  // room for a whole long prompt and more in one step
  base.block_size = 8;
  base.num_kv_blocks = 512;
  const double target = 5e-3;  // a decode step of these streams costs ~2.2 ms; a 512-token step ~15 ms
  const int late_after = 20;

  const TargetRun plain = RunWithLongPromptsArrivingLate(m, base, streams, longs, late_after);
  double plain_worst = 0;
  for (const StepShape& s : plain.steps) {
    EXPECT_EQ(s.prefill_limit, -1) << "no target, no limit";
    if (s.decode_rows > 0) plain_worst = std::max(plain_worst, SyntheticSeconds(s));
  }
  // The slow step the target is there to prevent: decoding streams stalled behind a long prefill.
  EXPECT_GT(plain_worst, 2.5 * target) << "the test must provoke a step far over the target";
  EXPECT_EQ(plain.stats.target_limited_steps, 0);

  for (const bool overlap : {true, false}) {
    SCOPED_TRACE(overlap ? "overlap on" : "overlap off");
    EngineOptions opt = base;
    opt.overlap = overlap;
    opt.target_itl_ms = target * 1e3;
    const TargetRun got = RunWithLongPromptsArrivingLate(m, opt, streams, longs, late_after);
    ExpectSameResults(plain.results, got.results, overlap ? "target, overlap on" : "target, overlap off");
    // Warm-up: the first steps run on --max-batched-tokens alone; the model is warm long before the long prompts.
    int warm_at = -1;
    for (size_t i = 0; i < got.steps.size() && warm_at < 0; ++i)
      if (got.steps[i].prefill_limit >= 0) warm_at = static_cast<int>(i);
    ASSERT_GE(warm_at, StepCostModel::kWarmupSteps) << "a limit before the cost model has seen enough steps";
    ASSERT_LT(warm_at, got.arrived_at_step) << "the cost model should be warm before the long prompts arrive";
    int limited = 0, long_prefill_steps = 0;
    for (size_t i = warm_at; i < got.steps.size(); ++i) {
      const StepShape& s = got.steps[i];
      if (s.decode_rows == 0) continue;  // no stream waits on a step without decode rows: no limit applies
      // Once warm, every step with decode rows has a limit, and the scheduler keeps to it.
      ASSERT_GE(s.prefill_limit, 0) << "step " << i;
      EXPECT_LE(s.prefill_tokens, s.prefill_limit) << "step " << i;
      // The limit is what the target allows: the step runs within it (a prompt's minimum progress of one KV block
      // per step excepted, which these decode rows never need).
      if (s.prefill_tokens > base.block_size) {
        EXPECT_LE(SyntheticSeconds(s), target + 1e-12)
            << "step " << i << ": " << s.tokens << " tokens (" << s.prefill_tokens << " prefill), " << s.attention
            << " query-key pairs";
      }
      limited += s.prefill_limit < base.max_batched_tokens - (s.tokens - s.prefill_tokens);
      long_prefill_steps += s.prefill_tokens > 0;
    }
    // The long prompts ran in many small chunks beside the streams, not in one or two large steps.
    EXPECT_GE(long_prefill_steps, 6);
    EXPECT_GE(limited, long_prefill_steps);
    EXPECT_GT(got.stats.target_limited_steps, 0);
  }
}

TEST(EngineTest, LatencyTargetRejectsBadValues) {
  for (const double bad : {-1.0, std::nan(""), static_cast<double>(INFINITY)}) {
    EngineOptions opt;
    opt.num_kv_blocks = 64;
    opt.target_itl_ms = bad;
    auto e = Engine::Create(Stories(), opt);
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_NE(e.status().message().find("--target-itl-ms"), std::string::npos) << e.status().ToString();
  }
}

}  // namespace
}  // namespace deepinfer::testing
