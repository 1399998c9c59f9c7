// Tool-call and reasoning parsing on model outputs written out by hand in each format (the expected fields are
// literal strings, not recomputed by the parser).
#include <gtest/gtest.h>

#include "protocol/tool_parse.h"

#include <nlohmann/json.hpp>

#include "grammar/compile.h"
#include "grammar/matcher.h"
#include "server/tool_grammar.h"
#include "tokenizer/tokenizer.h"
#include "vocab_test_util.h"

namespace deepinfer {
namespace {

TEST(ToolParseTest, DetectsFormatsFromTemplates) {
  EXPECT_EQ(DetectToolFormat("{{'<｜tool▁calls▁begin｜>'}} ... <tool_call>"), ToolFormat::kDeepSeekV3);
  EXPECT_EQ(DetectToolFormat("{{- '<tool_call>\\n' }}"), ToolFormat::kHermes);
  EXPECT_EQ(DetectToolFormat("<|start_header_id|>ipython<|end_header_id|>"), ToolFormat::kLlama3Json);
  EXPECT_EQ(DetectToolFormat("{% for m in messages %}{{ m.content }}{% endfor %}"), ToolFormat::kNone);
  EXPECT_TRUE(TemplateHasThinking("{{ '<think>\\n\\n</think>\\n\\n' }}"));
}

TEST(ToolParseTest, HermesCallsWithContentBefore) {
  const auto p = ParseAssistantOutput(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
      ToolFormat::kHermes, true, false);
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[0].name, "get_weather");
  EXPECT_EQ(p.tool_calls[0].arguments, "{\"city\": \"Paris\", \"days\": 3}");  // verbatim: the model's text
  EXPECT_EQ(p.tool_calls[1].name, "get_time");
  EXPECT_EQ(p.tool_calls[1].arguments, "{}");  // a parameterless call keeps its {} (vllm#28806)
  ASSERT_TRUE(p.content.has_value());
  EXPECT_EQ(*p.content, "Let me check.");
}

TEST(ToolParseTest, HermesUnclosedLastCallAndBadJson) {
  auto p = ParseAssistantOutput("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 123}}", ToolFormat::kHermes, true, false);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].arguments, "{\"x\": 123}");  // a trailing number survives (vllm#48342)
  EXPECT_FALSE(p.content.has_value());
  // Broken JSON after the name: the call stands (a stream has sent it by then), with no arguments.
  p = ParseAssistantOutput("<tool_call>{\"name\": \"f\", </tool_call>", ToolFormat::kHermes, true, false);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "f");
  EXPECT_EQ(p.tool_calls[0].arguments, "{}");
  // A marker that never names a call: nothing is a call, the text stays content.
  p = ParseAssistantOutput("Hi <tool_call>{\"nome\": 1} </tool_call>", ToolFormat::kHermes, true, false);
  EXPECT_TRUE(p.tool_calls.empty());
  EXPECT_EQ(*p.content, "Hi <tool_call>{\"nome\": 1} </tool_call>");
  // tools off: never parsed.
  p = ParseAssistantOutput("<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", ToolFormat::kHermes, false, false);
  EXPECT_TRUE(p.tool_calls.empty());
}

TEST(ToolParseTest, DeepSeekV3Calls) {
  const auto p = ParseAssistantOutput(
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\", \"code\": 123}\n```"
      "<｜tool▁call▁end｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      ToolFormat::kDeepSeekV3, true, false);
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[0].name, "get_weather");
  EXPECT_EQ(p.tool_calls[0].arguments, "{\"city\": \"Paris\", \"code\": 123}");  // verbatim
  EXPECT_EQ(p.tool_calls[1].name, "get_time");
  EXPECT_EQ(p.tool_calls[1].arguments, "{}");
  EXPECT_FALSE(p.content.has_value());
}

TEST(ToolParseTest, Llama3JsonCalls) {
  auto p = ParseAssistantOutput("{\"name\": \"get_weather\", \"parameters\": {\"city\": {\"name\": \"Oslo\"}}}",
                                ToolFormat::kLlama3Json, true, false);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "get_weather");
  EXPECT_EQ(p.tool_calls[0].arguments, "{\"city\": {\"name\": \"Oslo\"}}");
  EXPECT_FALSE(p.content.has_value());
  p = ParseAssistantOutput("<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"arguments\": {\"k\": [1, 2]}}",
                           ToolFormat::kLlama3Json, true, false);
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[1].name, "b");
  EXPECT_EQ(p.tool_calls[1].arguments, "{\"k\": [1, 2]}");
  p = ParseAssistantOutput("The weather is {nice}.", ToolFormat::kLlama3Json, true, false);
  EXPECT_TRUE(p.tool_calls.empty());
  EXPECT_EQ(*p.content, "The weather is {nice}.");
}

TEST(ToolParseTest, ReasoningSplit) {
  auto p = ParseAssistantOutput("<think>\nThe user wants a city.\n</think>\n\nParis.", ToolFormat::kNone, false, true);
  ASSERT_TRUE(p.reasoning.has_value());
  EXPECT_EQ(*p.reasoning, "The user wants a city.");
  EXPECT_EQ(*p.content, "Paris.");
  // The template opened the block (the generation prompt ends in <think>): the output starts inside it.
  p = ParseAssistantOutput("hmm</think>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>",
                           ToolFormat::kHermes, true, true, /*opened=*/true);
  EXPECT_EQ(*p.reasoning, "hmm");
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_FALSE(p.content.has_value());
  // No </think>: everything is content, no reasoning.
  p = ParseAssistantOutput("Just an answer.", ToolFormat::kNone, false, true);
  EXPECT_FALSE(p.reasoning.has_value());
  EXPECT_EQ(*p.content, "Just an answer.");
  // Not opened and not starting with <think>: a later </think> is content (a stream decides at the start).
  p = ParseAssistantOutput("a</think>b", ToolFormat::kNone, false, true);
  EXPECT_FALSE(p.reasoning.has_value());
  EXPECT_EQ(*p.content, "a</think>b");
  // Opened and never closed: all reasoning.
  p = ParseAssistantOutput("  still thinking \n", ToolFormat::kNone, false, true, true);
  EXPECT_EQ(*p.reasoning, "still thinking");
  EXPECT_EQ(*p.content, "");
}

// Fed in pieces of every size, the splitter gives what the whole text gives (literal expectations).
TEST(ToolParseTest, ReasoningSplitterStreams) {
  struct Case { const char* text; bool opened; const char* reasoning; const char* content; };
  const Case cases[] = {
      {"<think>\n  step one\n step two \n</think>\n\nThe answer.", false, "step one\n step two", "The answer."},
      {"\n<think>x</th", false, "x</th", ""},
      {"why </think>\nok </thin", true, "why", "ok </thin"},
      {"<thinker>", false, nullptr, "<thinker>"},
      {" <thi", false, nullptr, " <thi"},
  };
  for (const Case& c : cases) {
    const std::string text = c.text;
    for (size_t piece = 1; piece <= text.size(); ++piece) {
      ReasoningSplitter s(c.opened);
      std::string r, o;
      for (size_t i = 0; i < text.size(); i += piece) s.Feed(text.substr(i, piece), &r, &o);
      s.Finish(&r, &o);
      EXPECT_EQ(s.reasoned(), c.reasoning != nullptr) << text << " piece " << piece;
      if (c.reasoning) {
        EXPECT_EQ(r, c.reasoning) << text << " piece " << piece;
      }
      EXPECT_EQ(o, c.content) << text << " piece " << piece;
    }
  }
}

// Forced tool calls on the real vocabularies: the call markers are added (non-special) tokens of their own in
// DeepSeek-V3's and Qwen3's vocabularies, and a model trained on them emits those ids, so the grammar's mask must
// allow the marker token where the marker starts, not only its spelling in pieces. A walk that always takes the
// longest allowed token (a model that prefers the marker) must produce the marker ids and an answer the parser
// turns into the one call with valid arguments.
TEST(ToolGrammarTest, MarkersAreSingleTokensOnRealVocabularies) {
  const nlohmann::json tools = nlohmann::json::parse(R"([{"type":"function","function":{"name":"get_weather",
      "parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":12}},"required":["city"]}}}])");
  struct Case {
    const char* vocab;
    ToolFormat format;
    std::vector<std::string> markers;
  };
  for (const Case& c : {Case{"deepseek_v3", ToolFormat::kDeepSeekV3,
                             {"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
                              "<｜tool▁calls▁end｜>"}},
                        Case{"qwen3", ToolFormat::kHermes, {"<tool_call>", "</tool_call>"}}}) {
    auto tok = testing::LoadReferenceVocab(c.vocab);
    if (!tok) continue;  // failed, naming the vocabulary (vocab_test_util.h); the next one is still checked
    auto gbnf = ToolCallGbnf(tools, c.format, "", /*parallel=*/false);
    ASSERT_TRUE(gbnf.ok()) << gbnf.status().ToString();
    auto g = grammar::CompileGbnf(*gbnf);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    auto trie = grammar::TokenTrie::FromTokenizer(*tok);
    std::vector<int32_t> marker_ids;
    for (const auto& m : c.markers) {
      const auto ids = tok->Encode(m, false);
      ASSERT_EQ(ids.size(), 1u) << c.vocab << ": '" << m << "' is not one token";
      marker_ids.push_back(ids[0]);
    }
    grammar::GrammarMatcher m(grammar::TokenSets::Build(*g, trie));
    std::vector<uint32_t> bits((trie->vocab_size() + 31) / 32);
    std::vector<int32_t> out;
    std::string text;
    for (int step = 0; step < 200 && !m.IsTerminated(); ++step) {
      m.FillMask(bits.data());
      int32_t pick = -1;
      for (int32_t id = 0; id < trie->vocab_size(); ++id)
        if (((bits[id >> 5] >> (id & 31)) & 1) && !tok->IsEog(id) &&
            (pick < 0 || trie->bytes(id).size() > trie->bytes(pick).size()))
          pick = id;
      if (pick < 0) break;
      ASSERT_TRUE(m.AcceptToken(pick));
      out.push_back(pick);
      text += trie->bytes(pick);
    }
    EXPECT_TRUE(m.IsAccepting()) << c.vocab << ": " << text;
    for (size_t k = 0; k < marker_ids.size(); ++k)
      EXPECT_NE(std::find(out.begin(), out.end(), marker_ids[k]), out.end())
          << c.vocab << ": the marker '" << c.markers[k] << "' (id " << marker_ids[k] << ") was never emitted as its token: " << text;
    const ParsedAssistant p = ParseAssistantOutput(text, c.format, /*tools=*/true, /*thinking=*/false);
    ASSERT_EQ(p.tool_calls.size(), 1u) << c.vocab << ": " << text;
    EXPECT_EQ(p.tool_calls[0].name, "get_weather");
    const auto args = nlohmann::json::parse(p.tool_calls[0].arguments, nullptr, false);
    ASSERT_TRUE(args.is_object() && args.contains("city") && args["city"].is_string()) << p.tool_calls[0].arguments;
    EXPECT_LE(args["city"].get<std::string>().size(), 12u * 4);
  }
}

}  // namespace
}  // namespace deepinfer
