// The gated grammar (engine/grammar_gate.h) on token sequences over a small Harmony-like vocabulary, through the
// executor's own grammar stage (ConstrainRow, then AcceptToken on the sampled token as SampleRow does): before
// the open header the grammar does not apply (an analysis body takes tokens the grammar refuses, and the
// matcher holds nothing), headers are held to the listed ones, end-of-generation is refused until the grammar
// has started, and after the header the grammar's mask applies; rollbacks across the opening re-derive it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "engine/grammar_gate.h"
#include "engine/grammar_mask.h"
#include "engine/wire.h"
#include "grammar/compile.h"
#include "grammar/matcher.h"
#include "grammar/token_sets.h"
#include "grammar/token_trie.h"
#include "protocol/harmony.h"
#include "server/tool_grammar.h"

namespace deepinfer {
namespace {

// Markers are control tokens (no bytes in the trie), as a gpt-oss GGUF has them.
enum : int32_t { kStart, kChannel, kMessage, kEnd, kCall, kConstrain, kAssistant, kAnalysis, kFinal, kLBrace, kRBrace,
                 kKeyA, kColon, kOne, kX, kSpace, kFin, kAl, kCommentary, kToF, kJson, kLt, kChannelText, kToG,
                 kKeyB, kVocab };
const std::vector<std::string> kBytes = {"", "", "", "", "", "", "assistant", "analysis", "final", "{", "}",
                                         "\"a\"", ":", "1", "x", " ", "fin", "al", "commentary", " to=functions.f",
                                         "json", "<", "|channel|>", " to=functions.g", "\"b\""};

GrammarGate FinalGate() {
  HarmonyTokens t;
  t.start = kStart, t.channel = kChannel, t.message = kMessage, t.end = kEnd, t.call = kCall, t.constrain = kConstrain;
  GrammarGate g;
  HarmonyFinalGate(t, &g);
  return g;
}

bool Finite(float v) { return std::isfinite(v); }

// One sample's grammar stage, driven token by token as the executor drives it, over a vocabulary (each id's
// bytes; control tokens empty) and a prompt.
struct Row {
  Row(std::shared_ptr<const grammar::Grammar> g, const GrammarGate& spec, const std::vector<std::string>& vocab = kBytes,
      std::vector<int32_t> eog = {kCall}, std::vector<int32_t> prompt = {kX, kStart, kAssistant})
      : trie(std::make_shared<grammar::TokenTrie>(vocab, std::move(eog))),
        m(grammar::TokenSets::Build(std::move(g), trie)),
        spec(spec),
        hist(std::move(prompt)),  // Harmony: a prompt ending in the generation prompt <|start|>assistant
        prompt_len(static_cast<int>(hist.size())),
        gate(this->spec, trie.get(), hist) {}
  // The logits the stage leaves at the end of the history (all 0 before it).
  std::vector<float> Logits() {
    std::vector<float> l(trie->vocab_size(), 0.f);
    accept = ConstrainRow(&m, &gate, hist.data(), prompt_len, static_cast<int>(hist.size()), l.data(), trie->vocab_size(), &bits);
    return l;
  }
  // The phase at the end of the history (the gate is synced when the next position's mask is made).
  GrammarGateState::Phase Phase() {
    Logits();
    return gate.phase();
  }
  void Take(int32_t t) {
    const std::vector<float> l = Logits();
    ASSERT_TRUE(Finite(l[t])) << "token " << t << " is masked at position " << hist.size();
    if (accept) {
      ASSERT_TRUE(m.AcceptToken(t));
    }
    hist.push_back(t);
  }
  std::shared_ptr<const grammar::TokenTrie> trie;
  grammar::GrammarMatcher m;
  GrammarGate spec;
  std::vector<int32_t> hist;
  int prompt_len;
  GrammarGateState gate;
  std::vector<uint32_t> bits;
  bool accept = false;
};

std::vector<int32_t> Allowed(const std::vector<float>& l) {
  std::vector<int32_t> out;
  for (int32_t i = 0; i < static_cast<int32_t>(l.size()); ++i)
    if (Finite(l[i])) out.push_back(i);
  return out;
}

// What a free body allows: all but the end of the turn and the header markers.
std::vector<int32_t> FreeBody() {
  std::vector<int32_t> out;
  for (int32_t i = 0; i < kVocab; ++i)
    if (i != kCall && i != kChannel && i != kMessage && i != kConstrain) out.push_back(i);
  return out;
}

std::shared_ptr<const grammar::Grammar> Json() {
  auto g = grammar::CompileGbnf("root ::= \"{\" \"\\\"a\\\"\" \":\" [0-9] \"}\"\n");
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return *g;
}

TEST(GrammarGate, AnalysisRunsFreeAndTheGrammarStartsAfterTheFinalHeader) {
  Row r(Json(), FinalGate());
  // The header: only <|channel|> continues "assistant" (never text that spells it: "<" "|channel|>").
  EXPECT_EQ(Allowed(r.Logits()), std::vector<int32_t>{kChannel});
  EXPECT_FALSE(r.accept);
  r.Take(kChannel);
  // "analysis", "final" or "fin"+"al": the listed headers' channel names, in any tokenization.
  EXPECT_EQ(Allowed(r.Logits()), (std::vector<int32_t>{kAnalysis, kFinal, kFin}));
  r.Take(kAnalysis);
  r.Take(kMessage);
  EXPECT_EQ(r.Phase(), GrammarGateState::Phase::kFree);
  // The analysis body is unconstrained: "x", "<" and "}" (which the grammar refuses first) are all allowed, as
  // is every text token; only the end of the turn and stray header markers are refused, and the matcher has
  // seen nothing.
  for (int32_t t : {kX, kLt, kRBrace, kX}) r.Take(t);
  std::vector<float> l = r.Logits();
  EXPECT_FALSE(r.accept);
  EXPECT_EQ(r.m.num_steps(), 0);
  EXPECT_EQ(Allowed(l), FreeBody());
  r.Take(kEnd);
  r.Take(kStart);
  EXPECT_EQ(r.Phase(), GrammarGateState::Phase::kHeader);
  EXPECT_EQ(Allowed(r.Logits()), std::vector<int32_t>{kAssistant});
  for (int32_t t : {kAssistant, kChannel, kFin, kAl}) r.Take(t);
  // "final" is complete: the header's end marker, or the space of ` <|constrain|>json`.
  EXPECT_EQ(Allowed(r.Logits()), (std::vector<int32_t>{kMessage, kSpace}));
  r.Take(kMessage);
  EXPECT_EQ(r.Phase(), GrammarGateState::Phase::kOpen);
  // From here the grammar: "{" only, then the object; the end of generation once it is complete.
  EXPECT_EQ(Allowed(r.Logits()), std::vector<int32_t>{kLBrace});
  EXPECT_TRUE(r.accept);
  for (int32_t t : {kLBrace, kKeyA, kColon, kOne}) r.Take(t);
  EXPECT_EQ(Allowed(r.Logits()), std::vector<int32_t>{kRBrace});
  r.Take(kRBrace);
  EXPECT_EQ(Allowed(r.Logits()), std::vector<int32_t>{kCall});

  // Rolled back into the analysis body (a preemption or rejected drafts): free again, the matcher emptied; and
  // forward again to the same place: the grammar's state is rebuilt.
  std::vector<int32_t> full = r.hist;
  r.hist.resize(8);
  l = r.Logits();
  EXPECT_EQ(r.Phase(), GrammarGateState::Phase::kFree);
  EXPECT_EQ(r.m.num_steps(), 0);
  EXPECT_TRUE(Finite(l[kX]));
  r.hist = full;
  EXPECT_EQ(Allowed(r.Logits()), std::vector<int32_t>{kCall});
  // Rolled back into the final header (after "fin"): the header is replayed, "al" is what comes next.
  r.hist.resize(15);
  ASSERT_EQ(r.hist.back(), kFin);
  EXPECT_EQ(Allowed(r.Logits()), std::vector<int32_t>{kAl});
}

TEST(GrammarGate, AnUnlistedHeaderIsFreeAndTheFirstMessageMayBeTheAnswer) {
  Row r(Json(), FinalGate());
  for (int32_t t : {kChannel, kFinal, kMessage}) r.Take(t);
  EXPECT_EQ(r.Phase(), GrammarGateState::Phase::kOpen);
  EXPECT_EQ(Allowed(r.Logits()), std::vector<int32_t>{kLBrace});
  // A header none of the lists has (a masked token forced in, e.g. by a rejected mask): the body is free.
  Row u(Json(), FinalGate());
  u.hist.push_back(kChannel);
  u.hist.push_back(kCommentary);
  EXPECT_EQ(Allowed(u.Logits()), FreeBody());
  EXPECT_EQ(u.Phase(), GrammarGateState::Phase::kFree);
}

// Forced tool calls: the header names the function and the grammar reads it, so each function gets its own
// arguments' schema.
TEST(GrammarGate, HarmonyToolCallHeaderPicksTheFunctionsSchema) {
  const nlohmann::json tools = nlohmann::json::parse(R"([
    {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}},
    {"type": "function", "function": {"name": "g", "parameters": {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]}}}])");
  HarmonyTokens t;
  t.start = kStart, t.channel = kChannel, t.message = kMessage, t.end = kEnd, t.call = kCall, t.constrain = kConstrain;
  GrammarGate spec;
  auto gbnf = HarmonyToolCallGbnf(tools, "", grammar::JsonWhitespace::kCompact, t, &spec);
  ASSERT_TRUE(gbnf.ok()) << gbnf.status().ToString();
  EXPECT_TRUE(spec.feed_header);
  auto g = grammar::CompileGbnf(*gbnf);
  ASSERT_TRUE(g.ok()) << g.status().ToString() << "\n" << *gbnf;
  for (const bool to_g : {false, true}) {
    Row r(*g, spec);
    r.Take(kChannel);
    // analysis (free), a commentary preamble (free) or a call: no final answer, so no "final".
    EXPECT_EQ(Allowed(r.Logits()), (std::vector<int32_t>{kAnalysis, kCommentary}));
    for (int32_t x : {kAnalysis, kMessage, kX, kRBrace, kEnd, kStart, kAssistant, kChannel, kCommentary}) r.Take(x);
    EXPECT_EQ(r.m.num_steps(), 0);  // the reasoning never reached the grammar
    // A preamble ends here, or a call's recipient follows (" " and " to=functions.f" both spell it).
    EXPECT_EQ(Allowed(r.Logits()), (std::vector<int32_t>{kMessage, kSpace, kToF, kToG}));
    for (int32_t x : {to_g ? kToG : kToF, kSpace, kConstrain, kJson, kMessage}) r.Take(x);
    ASSERT_EQ(r.Phase(), GrammarGateState::Phase::kOpen);
    EXPECT_EQ(Allowed(r.Logits()), std::vector<int32_t>{kLBrace});
    r.Take(kLBrace);
    const std::vector<float> l = r.Logits();
    EXPECT_TRUE(Finite(l[to_g ? kKeyB : kKeyA]));  // the named function's key, not the other's
    EXPECT_FALSE(Finite(l[to_g ? kKeyA : kKeyB]));
    EXPECT_FALSE(Finite(l[kCall]));
    for (int32_t x : {to_g ? kKeyB : kKeyA, kColon, kOne, kRBrace}) r.Take(x);
    EXPECT_TRUE(Finite(r.Logits()[kCall]));
    EXPECT_FALSE(Finite(r.Logits()[kX]));
  }
  // A named function: only its header opens.
  GrammarGate only;
  ASSERT_TRUE(HarmonyToolCallGbnf(tools, "g", grammar::JsonWhitespace::kCompact, t, &only).ok());
  for (const std::string& h : only.open_headers) EXPECT_NE(h.find("functions.g"), std::string::npos) << h;
}

// A trigger gate (reasoning models whose generation prompt opens <think>): free until the output's text holds
// "</think>", in any tokenization, then the grammar (AfterReasoningGbnf: up to 4 spaces/newlines, then the
// calls), which first reads what the triggering token holds after the trigger.
enum : int32_t { tEot, tLt, tThink, tGt, tGtNlBrace, tLBrace, tKeyA, tColon, tOne, tRBrace, tX, tNl, tCtrlThink, tXLt,
                 tThinkGt, tVocab };
const std::vector<std::string> kTriggerBytes = {"", "</", "think", ">", ">\n{", "{", "\"a\"", ":", "1", "}", "x", "\n",
                                                "", "x</", "think>"};

std::shared_ptr<const grammar::Grammar> AfterThinkJson() {
  auto g = grammar::CompileGbnf(AfterReasoningGbnf("root ::= \"{\" \"\\\"a\\\"\" \":\" [0-9] \"}\"\n"));
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return *g;
}

// A row over the trigger vocabulary whose prompt ("x") ends inside <think>.
struct TriggerRow : Row {
  explicit TriggerRow(const GrammarGate& spec) : Row(AfterThinkJson(), spec, kTriggerBytes, {tEot}, {tX}) {}
};

GrammarGate ThinkGate() {
  GrammarGate g;
  g.open_after = "</think>";
  g.open_after_tokens = {tCtrlThink};
  return g;
}

std::vector<int32_t> AllBut(std::vector<int32_t> refused) {
  std::vector<int32_t> out;
  for (int32_t i = 0; i < tVocab; ++i)
    if (std::find(refused.begin(), refused.end(), i) == refused.end()) out.push_back(i);
  return out;
}

TEST(GrammarGate, ReasoningRunsFreeUntilTheTriggerThenTheGrammarHolds) {
  TriggerRow r(ThinkGate());
  // Reasoning: every token but the end of generation, "}" and "x" too (the grammar refuses them first).
  EXPECT_EQ(r.Phase(), GrammarGateState::Phase::kFree);
  EXPECT_EQ(Allowed(r.Logits()), AllBut({tEot}));
  for (int32_t t : {tRBrace, tX, tLt, tThink, tX, tLt, tThink}) r.Take(t);  // "</think" twice, not closed
  EXPECT_EQ(r.Phase(), GrammarGateState::Phase::kFree);
  EXPECT_EQ(r.m.num_steps(), 0);
  r.Take(tGt);  // "</" "think" ">" completes it
  EXPECT_EQ(r.Phase(), GrammarGateState::Phase::kOpen);
  EXPECT_TRUE(r.accept);
  EXPECT_EQ(Allowed(r.Logits()), (std::vector<int32_t>{tLBrace, tNl}));
  for (int32_t t : {tNl, tLBrace, tKeyA, tColon, tOne}) r.Take(t);
  EXPECT_EQ(Allowed(r.Logits()), std::vector<int32_t>{tRBrace});
  r.Take(tRBrace);
  EXPECT_EQ(Allowed(r.Logits()), std::vector<int32_t>{tEot});

  // Rolled back into the reasoning (a preemption, rejected drafts): free again, the matcher emptied; forward to
  // a different closing: the trigger inside one token ("think>") after one that starts it ("x</").
  r.hist.resize(8);
  EXPECT_EQ(r.Phase(), GrammarGateState::Phase::kFree);
  EXPECT_EQ(r.m.num_steps(), 0);
  r.hist.resize(3);
  for (int32_t t : {tXLt, tThinkGt}) r.Take(t);
  EXPECT_EQ(r.Phase(), GrammarGateState::Phase::kOpen);
  EXPECT_EQ(Allowed(r.Logits()), (std::vector<int32_t>{tLBrace, tNl}));
}

TEST(GrammarGate, TheTriggeringTokensRestIsTheGrammarsFirstText) {
  // ">\n{" closes the reasoning and starts the answer: the grammar has read "\n{", so the key comes next.
  TriggerRow r(ThinkGate());
  for (int32_t t : {tLt, tThink, tGtNlBrace}) r.Take(t);
  EXPECT_EQ(r.Phase(), GrammarGateState::Phase::kOpen);
  EXPECT_EQ(Allowed(r.Logits()), std::vector<int32_t>{tKeyA});
  // The trigger as one control token (no text the trie spells): open with nothing read.
  TriggerRow c(ThinkGate());
  c.Take(tX);
  c.Take(tCtrlThink);
  EXPECT_EQ(c.Phase(), GrammarGateState::Phase::kOpen);
  EXPECT_EQ(Allowed(c.Logits()), (std::vector<int32_t>{tLBrace, tNl}));
  // A ">" with no "</think" before it opens nothing.
  TriggerRow n(ThinkGate());
  for (int32_t t : {tThink, tGt, tLt, tGt}) n.Take(t);
  EXPECT_EQ(n.Phase(), GrammarGateState::Phase::kFree);
}

// Multi-process runs send each request's parameters to the other ranks: the gate must arrive whole, or those
// ranks would constrain from the first token.
TEST(GrammarGate, TravelsToOtherRanksWhole) {
  RequestParams p;
  p.gate.header_begin = {200006};
  p.gate.markers = {{200005, "<|channel|>"}, {200008, "<|message|>"}};
  p.gate.open_headers = {"assistant<|channel|>final<|message|>", "assistant<|channel|>final <|constrain|>json<|message|>"};
  p.gate.free_headers = {"assistant<|channel|>analysis<|message|>"};
  p.gate.feed_header = true;
  p.priority = 3;
  RequestParams t;
  t.gate.open_after = "</think>";
  t.gate.open_after_tokens = {128799};
  {
    wire::Writer w;
    wire::PutParams(w, t);
    wire::Reader r(w.bytes().data(), w.bytes().size());
    const RequestParams q = wire::GetParams(r);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(q.gate.open_after, "</think>");
    EXPECT_EQ(q.gate.open_after_tokens, t.gate.open_after_tokens);
  }
  wire::Writer w;
  wire::PutParams(w, p);
  wire::Reader r(w.bytes().data(), w.bytes().size());
  const RequestParams q = wire::GetParams(r);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(q.gate.header_begin, p.gate.header_begin);
  EXPECT_EQ(q.gate.markers, p.gate.markers);
  EXPECT_EQ(q.gate.open_headers, p.gate.open_headers);
  EXPECT_EQ(q.gate.free_headers, p.gate.free_headers);
  EXPECT_TRUE(q.gate.feed_header);
  EXPECT_EQ(q.priority, 3);
}

}  // namespace
}  // namespace deepinfer
