// Grammar-constrained rows inside the engine's mixed workload: overlap on/off identity, batch invariance and
// constant preemption (the matcher is rolled back and replayed from the token table) change nothing, and every
// constrained sample that finished is a full match of its regex under std::regex (an independent matcher); the
// same for gated grammars (engine/grammar_gate.h), whose grammar starts only after an open header.
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
    reqs[i].params.compiled_grammar = grammars[which[i]];
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
      spec.speculative = method;
      spec.num_speculative_tokens = 4;
      if (method == SpecMethod::kDraft) spec.draft = &m;
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

// Gated grammars (engine/grammar_gate.h) in the same workload: the gate is generic, so here a "header" follows
// a token ending in "." and must be " Lily said" (open: the regex then constrains the body) or " The" (a free body).
// Overlap off, constant preemption, speculative drafts (rolled back across header and opening) and alone vs
// batched give the same tokens; every finished sample's body after " Lily said" is a full regex match, and
// nothing ends before it (the end of generation is refused until the grammar has started).
TEST(GrammarEngine, GatedRowsInTheMixedWorkload) {
  auto model = LoadModelFromPath(SharedModels() + "/stories260K.gguf");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const Model& m = **model;
  GrammarGate gate;
  for (int32_t id = 0; id < m.config.vocab_size; ++id) {  // every token that ends a sentence begins a header
    const std::string b = m.tokenizer->TokenBytes(id);
    if (!b.empty() && b.back() == '.') gate.header_begin.push_back(id);
  }
  ASSERT_FALSE(gate.header_begin.empty());
  const std::string body = " (cat|dog|bird)( and (cat|dog|bird)){0,4}\\.";
  auto g = grammar::CompileRegex(body);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  gate.open_headers = {" Lily said"};
  gate.free_headers = {" The"};
  auto reqs = MixedWorkload(120, m.config.vocab_size, m.tokenizer->bos_id(), 47, {"Lily", "."});
  std::vector<size_t> gated;
  for (size_t i = 0; i < reqs.size(); i += 2) {
    gated.push_back(i);
    reqs[i].params.compiled_grammar = *g;
    reqs[i].params.gate = gate;
    reqs[i].params.stop.clear();
    reqs[i].params.max_tokens = 140;
    reqs[i].abort_after = -1;
  }
  EngineOptions on = Small(), off = Small();
  off.overlap = false;
  auto ref = RunRequests(m, on, reqs);
  ExpectSameResults(ref, RunRequests(m, off, reqs), "gated rows, overlap off");
  EngineOptions tiny = Small();
  tiny.block_size = 4;
  tiny.num_kv_blocks = 80;  // the longest gated request fits alone
  EngineStats st;
  ExpectSameResults(ref, RunRequests(m, tiny, reqs, &st), "gated rows under constant preemption");
  EXPECT_GT(st.preemptions, 20);
  for (SpecMethod method : {SpecMethod::kNgram, SpecMethod::kDraft}) {
    EngineOptions spec = Small();
    spec.speculative = method;
    spec.num_speculative_tokens = 4;
    if (method == SpecMethod::kDraft) spec.draft = &m;
    ExpectSameResults(ref, RunRequests(m, spec, reqs), std::string("gated rows, speculative ") + SpecMethodName(method));
  }
  for (size_t i : {gated[0], gated[5]}) ExpectSameResults({ref[i]}, RunRequests(m, on, {reqs[i]}), "gated row alone");
  const std::regex re(body);
  int finished = 0, reasoned = 0;
  for (size_t i : gated)
    for (const SampleResult& s : ref[i].samples) {
      const size_t at = s.text.find(" Lily said");
      if (s.finish_reason != "stop") {
        EXPECT_EQ(s.finish_reason, "length") << s.text;
        continue;
      }
      ++finished;
      ASSERT_NE(at, std::string::npos) << "finished before the open header: '" << s.text << "'";
      EXPECT_TRUE(std::regex_match(s.text.substr(at + 10), re)) << s.text;
      if (at > 0) ++reasoned;  // free messages came first
    }
  EXPECT_GT(finished, 20) << "too few gated samples finished to check";
  EXPECT_GT(reasoned, 5) << "too few gated samples wrote a free message before the open one";
}

}  // namespace
}  // namespace deepinfer::testing
