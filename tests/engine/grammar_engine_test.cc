// Grammar-constrained rows inside the engine's mixed workload: overlap on/off identity, batch invariance and
// constant preemption (the matcher is rolled back and replayed from the token table) change nothing, and every
// constrained sample that finished is a full match of its regex under std::regex (an independent matcher).
#include <gtest/gtest.h>

#include <regex>

#include "engine_harness.h"
#include "grammar/compile.h"
#include "unit/test_util.h"

namespace deepinfer::testing {
namespace {

EngineOptions Small() {
  EngineOptions o;
  o.max_num_seqs = 16;
  o.max_batched_tokens = 64;
  o.block_size = 8;
  o.num_kv_blocks = 256;
  return o;
}

TEST(GrammarEngine, ConstrainedRowsInTheMixedWorkload) {
  auto model = LoadModelFromPath(SharedModels() + "/stories260K.gguf");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const Model& m = **model;
  const std::vector<std::string> patterns = {"(cat|dog|bird)( and (cat|dog|bird)){0,4}\\.", "[a-z]{2,6} [0-9]{1,3}",
                                             "\\{\"a\": (true|false), \"b\": [0-9]{1,2}\\}"};
  std::vector<std::shared_ptr<const grammar::Grammar>> grammars;
  for (const auto& p : patterns) {
    auto g = grammar::CompileRegex(p);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    grammars.push_back(*g);
  }
  auto reqs = MixedWorkload(200, m.config.vocab_size, m.tokenizer->bos_id(), 31, {"Lily", "."});
  std::vector<int> which(reqs.size(), -1);
  for (size_t i = 0; i < reqs.size(); i += 3) {
    which[i] = static_cast<int>(i / 3 % patterns.size());
    reqs[i].params.grammar = grammars[which[i]];
    reqs[i].params.stop.clear();  // a stop string would cut the sentence
    reqs[i].params.max_tokens = 64;
    reqs[i].abort_after = -1;
  }
  EngineOptions on = Small(), off = Small();
  off.overlap = false;
  auto ref = RunRequests(m, on, reqs);
  ExpectSameResults(ref, RunRequests(m, off, reqs), "grammar rows, overlap off");
  EngineOptions tiny = Small();
  tiny.block_size = 4;
  tiny.num_kv_blocks = 48;
  EngineStats st;
  auto pre = RunRequests(m, tiny, reqs, &st);
  EXPECT_GT(st.preemptions, 20) << "the pool was not small enough to force preemption";
  ExpectSameResults(ref, pre, "grammar rows under constant preemption");
  // Speculative decoding: drafts are verified under the same masks (a draft the grammar forbids is rejected, the
  // matcher rolls back with it), alone and under constant preemption.
  for (SpecMethod method : {SpecMethod::kNgram, SpecMethod::kDraft}) {
    {
      const bool preempt = method == SpecMethod::kDraft;
      EngineOptions spec = preempt ? tiny : Small();
      spec.speculative.method = method;
      spec.speculative.num_tokens = 4;
      if (method == SpecMethod::kDraft) spec.speculative.draft_model = &m;
      EngineStats sst;
      ExpectSameResults(ref, RunRequests(m, spec, reqs, &sst),
                        std::string("grammar rows, speculative ") + SpecMethodName(method) + (preempt ? ", preempted" : ""));
      EXPECT_GT(sst.spec_accepted_tokens, 100);
      if (preempt) {
        EXPECT_GT(sst.preemptions, 20);
      }
    }
  }
  // One constrained request alone equals the same request inside the batch.
  for (size_t i : {size_t{0}, size_t{3}, size_t{30}}) {
    auto alone = RunRequests(m, on, {reqs[i]});
    ExpectSameResults({ref[i]}, alone, "grammar row " + std::to_string(i) + " alone");
  }
  int finished = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (which[i] < 0) continue;
    const std::regex re(patterns[which[i]]);
    for (const SampleResult& s : ref[i].samples) {
      if (s.finish_reason != "stop") continue;
      ++finished;
      EXPECT_TRUE(std::regex_match(s.text, re)) << patterns[which[i]] << " vs '" << s.text << "'";
    }
  }
  EXPECT_GT(finished, 40) << "too few constrained samples finished to check";
}

}  // namespace
}  // namespace deepinfer::testing
