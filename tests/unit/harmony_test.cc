// Harmony (gpt-oss) output parsing: llama.cpp's own test vectors (tests/test-chat.cpp, "GPT-OSS format tests")
// and the design note's turn, tokenized by a real byte-level BPE vocabulary (Llama 3's, with the o200k_harmony
// special tokens added as specials), parsed token by token as a stream and all at once: the stream's deltas
// concatenate to the non-streamed message, and both equal the expected fields written out here.
#include "protocol/harmony.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "protocol/tool_parse.h"
#include "tokenizer/hf_tokenizer.h"
#include "vocab_test_util.h"

namespace deepinfer {
namespace {

using nlohmann::json;

// Llama 3's tokenizer.json with o200k_harmony's markers appended as special added tokens (their ids differ from
// o200k's; the parser finds them by text).
const Tokenizer* HarmonyVocab() {
  static std::unique_ptr<Tokenizer> tok = [] {
    const std::string dir = testing::ReferenceVocabDir("llama3");
    std::ifstream in(dir + "/tokenizer.json");
    std::stringstream ss;
    ss << in.rdbuf();
    json j = json::parse(ss.str(), nullptr, false);
    if (j.is_discarded()) {
      ADD_FAILURE() << dir << "/tokenizer.json did not load (scripts/setup.sh installs it)";
      return std::unique_ptr<Tokenizer>();
    }
    int next = 0;
    for (auto& [k, v] : j["model"]["vocab"].items()) next = std::max(next, v.get<int>() + 1);
    for (auto& a : j["added_tokens"]) next = std::max(next, a["id"].get<int>() + 1);
    for (const char* s : {"<|startoftext|>", "<|return|>", "<|constrain|>", "<|channel|>", "<|start|>", "<|end|>",
                          "<|message|>", "<|call|>"})
      j["added_tokens"].push_back({{"id", next++}, {"content", s}, {"special", true}, {"single_word", false},
                                   {"lstrip", false}, {"rstrip", false}, {"normalized", false}});
    auto t = ParseHfTokenizer(j.dump(), "", "llama3+harmony");
    if (!t.ok()) {
      ADD_FAILURE() << t.status().ToString();
      return std::unique_ptr<Tokenizer>();
    }
    return std::move(*t);
  }();
  return tok.get();
}

// The same vocabulary as a GGUF stores it (tokenizer.ggml.tokens / token_type / merges): the markers are
// control tokens (type 3), as in gpt-oss GGUFs.
const Tokenizer* HarmonyVocabGguf() {
  static std::unique_ptr<Tokenizer> tok = [] {
    std::ifstream in(testing::ReferenceVocabDir("llama3") + "/tokenizer.json");
    std::stringstream ss;
    ss << in.rdbuf();
    json j = json::parse(ss.str(), nullptr, false);
    if (j.is_discarded()) return std::unique_ptr<Tokenizer>();
    ByteLevelBpeSpec spec;
    for (auto& [piece, id] : j["model"]["vocab"].items()) {
      if (id.get<size_t>() >= spec.tokens.size()) spec.tokens.resize(id.get<size_t>() + 1), spec.types.resize(id.get<size_t>() + 1, 1);
      spec.tokens[id.get<size_t>()] = piece;
    }
    for (const char* s : {"<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>", "<|start|>", "<|end|>",
                          "<|message|>", "<|call|>"}) {
      spec.tokens.push_back(s);
      spec.types.push_back(3);
    }
    for (auto& m : j["model"]["merges"]) spec.merges.push_back(m.get<std::string>());
    spec.split_regexes = {R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"};
    spec.eos = static_cast<int>(spec.tokens.size()) - 8;  // <|endoftext|>, as some gpt-oss GGUFs have it
    auto t = MakeByteLevelBpe(spec, "llama3+harmony.gguf");
    if (!t.ok()) {
      ADD_FAILURE() << t.status().ToString();
      return std::unique_ptr<Tokenizer>();
    }
    return std::move(*t);
  }();
  return tok.get();
}

struct Streamed {
  std::string reasoning, content;
  std::vector<ParsedToolCall> calls;
  bool shape_ok = true;  // each call's first delta names it, in index order
  int deltas_before_end = 0;  // deltas that carried text before the last token (streaming is incremental)
};

Streamed StreamIds(const Tokenizer& tok, const std::vector<int32_t>& ids, bool tools, int max_calls = 1 << 30) {
  HarmonyParser p(tok, FindHarmonyTokens(tok), tools, max_calls);
  Streamed s;
  auto take = [&](const HarmonyDelta& d, bool last) {
    s.reasoning += d.reasoning;
    s.content += d.out.content;
    if (!last && !d.empty()) ++s.deltas_before_end;
    for (const ToolCallDelta& c : d.out.calls) {
      if (c.first != (c.index == static_cast<int>(s.calls.size()))) s.shape_ok = false;
      if (c.first) s.calls.push_back({c.name, ""});
      if (c.index >= static_cast<int>(s.calls.size())) {
        s.shape_ok = false;
        continue;
      }
      s.calls[c.index].arguments += c.arguments;
    }
  };
  for (size_t i = 0; i < ids.size(); ++i) {
    HarmonyDelta d;
    p.Feed(ids[i], &d);
    take(d, i + 1 == ids.size());
  }
  HarmonyDelta d;
  p.Finish(&d);
  take(d, true);
  return s;
}

struct Want {
  std::optional<std::string> reasoning, content;
  std::vector<ParsedToolCall> calls;
};

// Parses `text` (markers written as text, tokenized into their special ids) whole and streamed; both must give `w`.
void Check(const std::string& text, bool tools, const Want& w, int max_calls = 1 << 30) {
  SCOPED_TRACE(text);
  const Tokenizer* tok = HarmonyVocab();
  ASSERT_NE(tok, nullptr);
  const HarmonyTokens t = FindHarmonyTokens(*tok);
  ASSERT_TRUE(t.usable());
  const std::vector<int32_t> ids = tok->Encode(text, false);
  const ParsedAssistant whole = ParseHarmony(*tok, t, ids, tools, max_calls);
  EXPECT_EQ(whole.reasoning, w.reasoning);
  EXPECT_EQ(whole.content, w.content);
  ASSERT_EQ(whole.tool_calls.size(), w.calls.size());
  for (size_t i = 0; i < w.calls.size(); ++i) {
    EXPECT_EQ(whole.tool_calls[i].name, w.calls[i].name);
    EXPECT_EQ(json::parse(whole.tool_calls[i].arguments, nullptr, false), json::parse(w.calls[i].arguments)) << whole.tool_calls[i].arguments;
  }
  const Streamed s = StreamIds(*tok, ids, tools, max_calls);
  EXPECT_TRUE(s.shape_ok);
  EXPECT_EQ(s.reasoning, whole.reasoning.value_or(""));
  EXPECT_EQ(s.content, whole.content.value_or(""));
  ASSERT_EQ(s.calls.size(), whole.tool_calls.size());
  for (size_t i = 0; i < s.calls.size(); ++i) {
    EXPECT_EQ(s.calls[i].name, whole.tool_calls[i].name);
    EXPECT_EQ(s.calls[i].arguments, whole.tool_calls[i].arguments);
  }
}

const std::string kHello = "Hello, world!\nWhat's up?";

TEST(HarmonyTest, DetectsTheTemplate) {
  std::ifstream in(std::string(DEEPINFER_SOURCE_DIR) + "/tools/ref/llama-data/templates/openai-gpt-oss-120b.jinja");
  std::stringstream ss;
  ss << in.rdbuf();
  ASSERT_FALSE(ss.str().empty());
  EXPECT_EQ(DetectToolFormat(ss.str()), ToolFormat::kHarmony);
  EXPECT_FALSE(TemplateHasThinking(ss.str()));
}

TEST(HarmonyTest, FindsMarkersAndEndsTurnsOnReturnAndCallOnly) {
  const Tokenizer* tok = HarmonyVocab();
  ASSERT_NE(tok, nullptr);
  const HarmonyTokens t = FindHarmonyTokens(*tok);
  ASSERT_TRUE(t.usable());
  ASSERT_GE(t.ret, 0);
  ASSERT_GE(t.call, 0);
  EXPECT_TRUE(tok->IsEog(t.ret));
  EXPECT_TRUE(tok->IsEog(t.call));
  EXPECT_FALSE(tok->IsEog(t.end));  // the analysis message's <|end|> must not stop the turn
  EXPECT_FALSE(tok->IsEog(t.start));
  EXPECT_FALSE(tok->IsEog(t.channel));
}

// A GGUF vocabulary marks the markers control: end of generation as for tokenizer.json, and a rendered chat prompt
// (EncodeWithSpecials) reads them as their ids, where plain Encode (llama.cpp's tokenizer tests) keeps the text.
TEST(HarmonyTest, GgufControlMarkers) {
  const Tokenizer* tok = HarmonyVocabGguf();
  ASSERT_NE(tok, nullptr);
  const HarmonyTokens t = FindHarmonyTokens(*tok);
  ASSERT_TRUE(t.usable());
  EXPECT_TRUE(tok->IsControl(t.channel));
  EXPECT_TRUE(tok->IsEog(t.ret));
  EXPECT_TRUE(tok->IsEog(t.call));
  EXPECT_TRUE(tok->IsEog(tok->eos_id()));
  EXPECT_FALSE(tok->IsEog(t.end));
  const std::string prompt = "<|start|>user<|message|>Hi<|end|><|start|>assistant";
  const std::vector<int32_t> ids = tok->EncodeWithSpecials(prompt, false);
  ASSERT_EQ(ids.size(), 7u);
  EXPECT_EQ(ids[0], t.start);
  EXPECT_EQ(ids[2], t.message);
  EXPECT_EQ(ids[4], t.end);
  EXPECT_EQ(ids[5], t.start);
  EXPECT_EQ(tok->Decode(ids, false), prompt);
  const std::vector<int32_t> plain = tok->Encode(prompt, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), t.start), 0);
  // The parser over the GGUF vocabulary's ids.
  const ParsedAssistant p = ParseHarmony(
      *tok, t, tok->EncodeWithSpecials("<|channel|>analysis<|message|>r<|end|><|start|>assistant<|channel|>final<|message|>c<|return|>", false),
      false);
  EXPECT_EQ(p.reasoning, "r");
  EXPECT_EQ(p.content, "c");
}

// llama.cpp tests/test-chat.cpp:5998-6090, in order.
TEST(HarmonyTest, LlamaCppVectors) {
  Check("<|channel|>final<|message|>" + kHello, false, {std::nullopt, kHello, {}});
  Check("<|channel|>commentary<|message|>" + kHello, false, {std::nullopt, kHello, {}});
  Check("<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>final<|message|>" + kHello, false,
        {"I'm\nthinking", kHello, {}});
  Check("<|channel|>analysis<|message|>I'm\nthinking", false, {"I'm\nthinking", "", {}});  // partial
  const std::vector<ParsedToolCall> call = {{"special_function", R"({"arg1": 1})"}};
  Check(" to=functions.special_function<|channel|>analysis<|message|>{\"arg1\": 1}", true, {std::nullopt, std::nullopt, call});
  Check("<|channel|>analysis to=functions.special_function<|message|>{\"arg1\": 1}", true, {std::nullopt, std::nullopt, call});
  Check(" to=functions.special_function<|channel|>analysis <|constrain|>json<|message|>{\"arg1\": 1}", true,
        {std::nullopt, std::nullopt, call});
  Check("<|channel|>commentary to=functions.special_function<|message|>{\"arg1\": 1}", true, {std::nullopt, std::nullopt, call});
  Check("<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant to=functions.special_function<|channel|>analysis"
        "<|message|>{\"arg1\": 1}",
        true, {"I'm\nthinking", std::nullopt, call});
  Check("<|channel|>analysis<|message|>Thinking about edit...<|end|><|start|>assistant<|channel|>commentary to=functions.edit "
        "<|constrain|>json<|message|>{\"oldString\": \"if (part < railCount - 1) {\", \"newString\": \"if (part < 4) {\", "
        "\"replaceAll\": false}",
        true,
        {"Thinking about edit...", std::nullopt,
         {{"edit", R"({"oldString": "if (part < railCount - 1) {", "newString": "if (part < 4) {", "replaceAll": false})"}}});
  Check("<|channel|>analysis<|message|>I need to output the invoice details in JSON<|end|><|start|>assistant<|channel|>final "
        "<|constrain|>json<|message|>{\"amount\": 123.45, \"date\": \"2025-12-03\"}",
        false, {"I need to output the invoice details in JSON", R"({"amount": 123.45, "date": "2025-12-03"})", {}});
}

// The turn of docs/design/gpt_oss.md section 6 as the model writes it (recipient in the channel header, with
// <|constrain|>, ending in <|call|>), then the answer after the tool result (ending in <|return|>).
TEST(HarmonyTest, ReasoningThenToolCallThenFinal) {
  Check("<|channel|>analysis<|message|>Need get_weather.<|end|><|start|>assistant<|channel|>commentary "
        "to=functions.get_weather <|constrain|>json<|message|>{\"location\":\"SF\"}<|call|>",
        true, {"Need get_weather.", std::nullopt, {{"get_weather", R"({"location":"SF"})"}}});
  Check("<|channel|>analysis<|message|>It is 20C there.<|end|><|start|>assistant<|channel|>final<|message|>It is 20C.<|return|>",
        true, {"It is 20C there.", "It is 20C.", {}});
}

TEST(HarmonyTest, SeveralAnalysisMessagesAndPreambleConcatenate) {
  Check("<|channel|>analysis<|message|>First, <|end|><|start|>assistant<|channel|>analysis<|message|>then more.<|end|>"
        "<|start|>assistant<|channel|>commentary<|message|>Checking. <|end|><|start|>assistant<|channel|>commentary "
        "to=functions.f <|constrain|>json<|message|>{\"a\":[1,2]}<|call|>",
        true, {"First, then more.", "Checking. ", {{"f", R"({"a":[1,2]})"}}});
}

TEST(HarmonyTest, CallsWithoutToolsAndOtherRecipientsAreDropped) {
  // Without tools an unsolicited call is consumed (llama.cpp: empty content); built-in tools go nowhere.
  Check("<|channel|>analysis<|message|>hm<|end|><|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json"
        "<|message|>{}<|call|>",
        false, {"hm", "", {}});
  Check("<|channel|>analysis to=browser.search<|message|>{\"query\":\"x\"}<|end|><|start|>assistant<|channel|>final<|message|>ok",
        true, {std::nullopt, "ok", {}});
  // A stray `to=assistant` before the real channel (llama.cpp's grammar allows it) is no recipient.
  Check("<|channel|>commentary to=assistant<|channel|>analysis<|message|>r<|end|><|start|>assistant<|channel|>final<|message|>c",
        true, {"r", "c", {}});
}

TEST(HarmonyTest, ParallelCallsAndTheLimit) {
  const std::string two = "<|channel|>commentary to=functions.a <|constrain|>json<|message|>{\"x\":1}<|end|><|start|>assistant"
                          "<|channel|>commentary to=functions.b <|constrain|>json<|message|>{}<|call|>";
  Check(two, true, {std::nullopt, std::nullopt, {{"a", R"({"x":1})"}, {"b", "{}"}}});
  Check(two, true, {std::nullopt, std::nullopt, {{"a", R"({"x":1})"}}}, /*max_calls=*/1);
  // A call with an empty body gets {} as its arguments, as OpenAI sends a parameterless call.
  Check("<|channel|>commentary to=functions.now<|message|><|call|>", true, {std::nullopt, std::nullopt, {{"now", "{}"}}});
}

TEST(HarmonyTest, UnstructuredOutputIsContent) {
  Check("just text, no channels", false, {std::nullopt, "just text, no channels", {}});
}

TEST(HarmonyTest, StreamsBodiesAsTokensArriveAndHoldsOnlyHeaders) {
  const Tokenizer* tok = HarmonyVocab();
  ASSERT_NE(tok, nullptr);
  const std::vector<int32_t> ids = tok->Encode(
      "<|channel|>analysis<|message|>Let me think about the weather in San Francisco today.<|end|><|start|>assistant<|channel|>final"
      "<|message|>Sunny and mild, about twenty degrees.",
      false);
  HarmonyParser p(*tok, FindHarmonyTokens(*tok), false);
  std::string reasoning, content;
  size_t i = 0;
  for (; i < ids.size() && reasoning.find("think") == std::string::npos; ++i) {
    HarmonyDelta d;
    p.Feed(ids[i], &d);
    reasoning += d.reasoning;
  }
  // "think" arrived while the analysis message is far from over: reasoning streams, it is not held to <|end|>.
  EXPECT_LT(i, ids.size() / 2);
  for (; i < ids.size(); ++i) {
    HarmonyDelta d;
    p.Feed(ids[i], &d);
    reasoning += d.reasoning;
    content += d.out.content;
  }
  EXPECT_EQ(content, "Sunny and mild, about twenty degrees.");  // all of it before Finish
  EXPECT_GT(p.reasoning_tokens(), 5);
  // A character split over tokens waits for its last byte: the stream never sends broken UTF-8.
  const std::vector<int32_t> emoji = tok->Encode("<|channel|>final<|message|>ok 🐶🐶 done", false);
  HarmonyParser q(*tok, FindHarmonyTokens(*tok), false);
  std::string streamed;
  for (int32_t id : emoji) {
    HarmonyDelta d;
    q.Feed(id, &d);
    EXPECT_TRUE(json(d.out.content).dump(-1, ' ', false, json::error_handler_t::strict).size() > 0);
    streamed += d.out.content;
  }
  EXPECT_EQ(streamed, "ok 🐶🐶 done");
}

}  // namespace
}  // namespace deepinfer
