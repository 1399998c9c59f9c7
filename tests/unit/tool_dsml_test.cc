// DeepSeek-V3.2 / V4 DSML tool calls: answers written out by hand in the format the V4 template teaches, parsed
// whole and streamed in every cutting (the expected content and arguments are literal strings), with reasoning
// before the calls; and the forced-call grammar, on accept / reject strings and on random walks over the real
// DeepSeek-V3 vocabulary whose answers must parse into calls that satisfy the tool's schema.
#include <fstream>
#include <random>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "grammar/compile.h"
#include "grammar/matcher.h"
#include "protocol/tool_parse.h"
#include "protocol/tool_stream.h"
#include "server/tool_grammar.h"
#include "tokenizer/tokenizer.h"
#include "tool_stream_test_util.h"
#include "vocab_test_util.h"

namespace deepinfer {
namespace {

// The markers, spelled out (｜ is U+FF5C) so the test does not borrow the parser's constants.
#define DSML_OPEN "<｜DSML｜tool_calls>\n"
#define DSML_CLOSE "</｜DSML｜tool_calls>"
#define DSML_INVOKE(name) "<｜DSML｜invoke name=\"" name "\">\n"
#define DSML_END_INVOKE "</｜DSML｜invoke>\n"
#define DSML_PARAM(key, str, value) "<｜DSML｜parameter name=\"" key "\" string=\"" str "\">" value "</｜DSML｜parameter>\n"

std::string DsmlReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct DsmlCase {
  std::string text;
  std::string content;  // "<null>": none (only calls)
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
};

const std::vector<DsmlCase>& DsmlCases() {
  static const std::vector<DsmlCase> cases = {
      // 0: one call, a string and a non-string parameter, content before.
      {"Let me look that up.\n\n" DSML_OPEN DSML_INVOKE("get_weather") DSML_PARAM("city", "true", "Paris")
           DSML_PARAM("days", "false", "3") DSML_END_INVOKE DSML_CLOSE,
       "Let me look that up.",
       {{"get_weather", "{\"city\": \"Paris\", \"days\": 3}"}}},
      // 1: two calls, the second with no parameters (the template's "\n"), a JSON object value kept verbatim.
      {DSML_OPEN DSML_INVOKE("search") DSML_PARAM("opts", "false", "{\"x\": [1, 2.5e3], \"y\": null}")
           DSML_PARAM("q", "true", "deep seek") DSML_END_INVOKE DSML_INVOKE("now") "\n" DSML_END_INVOKE DSML_CLOSE,
       "<null>",
       {{"search", "{\"opts\": {\"x\": [1, 2.5e3], \"y\": null}, \"q\": \"deep seek\"}"}, {"now", "{}"}}},
      // 2: a raw string that must be escaped (quotes, newline, tab, backslashes, a control character, UTF-8 kept);
      // a string="false" value with whitespace around it (trimmed), one that is not JSON (a JSON string of its text).
      {DSML_OPEN DSML_INVOKE("write") DSML_PARAM("text", "true", "He said \"hi\"\n\tC:\\dir\\ \x01 ünï 日本 🐶")
           DSML_PARAM("n", "false", " \n[1, true]\n ") DSML_PARAM("bad", "false", "not \"json\"") DSML_END_INVOKE
               DSML_CLOSE,
       "<null>",
       {{"write",
         "{\"text\": \"He said \\\"hi\\\"\\n\\tC:\\\\dir\\\\ \\u0001 ünï 日本 🐶\", \"n\": [1, true], \"bad\": \"not \\\"json\\\"\"}"}}},
      // 3: cut off by max_tokens inside a string value: the call keeps what it got.
      {"ok " DSML_OPEN DSML_INVOKE("get_weather") DSML_PARAM("unit", "true", "c") "<｜DSML｜parameter name=\"city\" "
       "string=\"true\">Par",
       "ok",
       {{"get_weather", "{\"unit\": \"c\", \"city\": \"Par"}}},
      // 4: cut off inside a JSON value: held to its end, then sent by the same rule (not JSON yet: a string).
      {DSML_OPEN DSML_INVOKE("f") "<｜DSML｜parameter name=\"xs\" string=\"false\">[1, 2", "<null>", {{"f", "{\"xs\": \"[1, 2\""}}},
      // 5: a marker that never names a call: everything stays content.
      {"Hi! " DSML_OPEN "<｜DSML｜invoke nom=\"x\">\n</｜DSML｜invoke>", "Hi! " DSML_OPEN "<｜DSML｜invoke nom=\"x\">\n</｜DSML｜invoke>", {}},
      // 6: an invoke whose name never closes: dropped, the next one is read.
      {DSML_OPEN "<｜DSML｜invoke name=\"oops>\n" DSML_END_INVOKE DSML_INVOKE("g") DSML_PARAM("a", "false", "-1") DSML_END_INVOKE
           DSML_CLOSE,
       "<null>",
       {{"g", "{\"a\": -1}"}}},
      // 7: a parameter head that is not `string="true|false"` is skipped; text after the block is dropped.
      {DSML_OPEN DSML_INVOKE("g") DSML_PARAM("a", "maybe", "x") DSML_PARAM("b", "true", "y") DSML_END_INVOKE DSML_CLOSE
       " trailing " DSML_OPEN DSML_INVOKE("h") DSML_END_INVOKE,
       "<null>",
       {{"g", "{\"b\": \"y\"}"}}},
      // 8: DeepSeek-V3.2's block name; a call cut off after its name.
      {"<｜DSML｜function_calls>\n" DSML_INVOKE("g") DSML_PARAM("a", "true", "") DSML_END_INVOKE DSML_INVOKE("h"),
       "<null>",
       {{"g", "{\"a\": \"\"}"}, {"h", "{}"}}},
      // 9: no calls, a lone '<' and a partial marker at the end stay content.
      {"a < b and <｜DSML｜tool_c", "a < b and <｜DSML｜tool_c", {}},
      // 10: an invoke left open ends where the next one starts: two calls, each with its own parameters.
      {DSML_OPEN DSML_INVOKE("g") DSML_PARAM("a", "true", "x") DSML_INVOKE("h") DSML_PARAM("b", "false", "2")
           DSML_END_INVOKE DSML_CLOSE,
       "<null>",
       {{"g", "{\"a\": \"x\"}"}, {"h", "{\"b\": 2}"}}},
  };
  return cases;
}

using DsmlAssembled = testing::AssembledToolStream;

DsmlAssembled DsmlStream(const std::string& text, const std::vector<size_t>& cuts) {
  return testing::StreamToolCalls(ToolFormat::kDeepSeekDsml, text, cuts);
}

void ExpectDsmlCase(const DsmlCase& c, const DsmlAssembled& a, const std::string& how) {
  EXPECT_TRUE(a.shape_ok) << how;
  EXPECT_EQ(a.content, c.content == "<null>" ? "" : c.content) << how;
  ASSERT_EQ(a.calls.size(), c.calls.size()) << how;
  for (size_t i = 0; i < c.calls.size(); ++i) {
    EXPECT_EQ(a.calls[i].name, c.calls[i].first) << how << " call " << i;
    EXPECT_EQ(a.calls[i].arguments, c.calls[i].second) << how << " call " << i;
  }
}

TEST(ToolDsmlTest, DetectedBeforeDeepSeekV3) {
  EXPECT_EQ(DetectToolFormat("{%- set dsml_token = '｜DSML｜' -%} ... tool▁calls▁begin"), ToolFormat::kDeepSeekDsml);
  for (const char* f : {"deepseek-ai-DeepSeek-V4.jinja", "deepseek-ai-DeepSeek-V4-Flash-0731.jinja", "deepseek-ai-DeepSeek-V3.2.jinja"}) {
    const std::string src = DsmlReadFile(std::string(DEEPINFER_SOURCE_DIR) + "/tools/ref/llama-data/templates/" + f);
    EXPECT_EQ(DetectToolFormat(src), ToolFormat::kDeepSeekDsml) << f;
    EXPECT_TRUE(TemplateHasThinking(src)) << f;
  }
}

TEST(ToolDsmlTest, WholeAnswersParse) {
  for (const DsmlCase& c : DsmlCases()) {
    ExpectDsmlCase(c, DsmlStream(c.text, {}), "whole: " + c.text);
    const ParsedAssistant p = ParseAssistantOutput(c.text, ToolFormat::kDeepSeekDsml, true, false);
    EXPECT_EQ(p.content.value_or("<null>"), c.content) << c.text;
    ASSERT_EQ(p.tool_calls.size(), c.calls.size()) << c.text;
    for (size_t i = 0; i < c.calls.size(); ++i) {
      EXPECT_EQ(p.tool_calls[i].name, c.calls[i].first) << c.text;
      EXPECT_EQ(p.tool_calls[i].arguments, c.calls[i].second) << c.text;
      // Complete calls' arguments are always JSON objects, whatever the values were.
      if (i + 1 < c.calls.size() || c.text.find(DSML_CLOSE) != std::string::npos) {
        EXPECT_TRUE(nlohmann::json::parse(p.tool_calls[i].arguments, nullptr, false).is_object()) << p.tool_calls[i].arguments;
      }
    }
  }
}

TEST(ToolDsmlTest, EveryCuttingGivesTheNonStreamedParse) {
  std::mt19937 rng(5);
  for (const DsmlCase& c : DsmlCases()) {
    int n = 0;  // cuttings 0-8: fixed pieces of 1-9 bytes; then random ones
    for (const std::vector<size_t>& cuts : testing::ToolStreamCuttings(c.text.size(), &rng, 50, 16))
      ExpectDsmlCase(c, DsmlStream(c.text, cuts), "cutting " + std::to_string(n++) + ": " + c.text);
  }
}

TEST(ToolDsmlTest, ArgumentsGoOutAsParametersArrive) {
  // A byte at a time, a string value's characters go out as they come: many fragments, the first before the end.
  const DsmlCase& c = DsmlCases()[2];
  std::vector<size_t> cuts;
  for (size_t at = 1; at < c.text.size(); ++at) cuts.push_back(at);
  EXPECT_GT(DsmlStream(c.text, cuts).arg_deltas, 20);
  ToolCallStreamer s(ToolFormat::kDeepSeekDsml);
  ToolStreamDelta d;
  s.Feed(DSML_OPEN DSML_INVOKE("get_weather") "<｜DSML｜parameter name=\"city\" string=\"true\">Pa\"r", &d);
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_TRUE(d.calls[0].first);
  EXPECT_EQ(d.calls[0].name, "get_weather");
  EXPECT_EQ(d.calls[0].arguments, "{\"city\": \"Pa\\\"r");
}

// Reasoning before the calls, split as the server does (ReasoningSplitter, then the call parser on the content),
// streamed in pieces: the same reasoning, content and calls as the non-streamed parse, and the literal ones.
TEST(ToolDsmlTest, ReasoningBeforeTheCalls) {
  const std::string calls = DSML_OPEN DSML_INVOKE("get_weather") DSML_PARAM("city", "true", "Oslo") DSML_END_INVOKE DSML_CLOSE;
  struct R { std::string text; bool opened; };
  // Thinking on: the generation prompt ends in <think>, so the answer starts inside it; or the answer opens it.
  for (const R& r : {R{"The user wants Oslo's weather.\n</think>\n\nChecking. " + calls, true},
                     R{"<think>The user wants Oslo's weather.</think>Checking. " + calls, false}}) {
    const ParsedAssistant p = ParseAssistantOutput(r.text, ToolFormat::kDeepSeekDsml, true, true, r.opened);
    ASSERT_TRUE(p.reasoning.has_value()) << r.text;
    EXPECT_EQ(*p.reasoning, "The user wants Oslo's weather.");
    EXPECT_EQ(p.content.value_or("<null>"), "Checking.");
    ASSERT_EQ(p.tool_calls.size(), 1u);
    EXPECT_EQ(p.tool_calls[0].arguments, "{\"city\": \"Oslo\"}");
    std::mt19937 rng(7);
    for (int trial = 0; trial < 40; ++trial) {
      ReasoningSplitter split(r.opened);
      ToolCallStreamer s(ToolFormat::kDeepSeekDsml);
      std::string reasoning, content, args;
      auto feed = [&](const std::string& piece_content) {
        ToolStreamDelta d;
        s.Feed(piece_content, &d);
        content += d.content;
        for (const auto& c : d.calls) args += c.arguments;
      };
      for (size_t at = 0; at < r.text.size();) {
        const size_t n = trial == 0 ? 1 : 1 + rng() % 10;
        std::string c;
        split.Feed(r.text.substr(at, n), &reasoning, &c);
        feed(c);
        at += n;
      }
      std::string c;
      split.Finish(&reasoning, &c);
      feed(c);
      ToolStreamDelta d;
      s.Finish(&d);
      content += d.content;
      for (const auto& x : d.calls) args += x.arguments;
      EXPECT_EQ(reasoning, *p.reasoning) << trial;
      EXPECT_EQ(content, *p.content) << trial;
      EXPECT_EQ(args, p.tool_calls[0].arguments) << trial;
    }
  }
}

// ---- the forced-call grammar ----

const nlohmann::json& DsmlTools() {
  static const nlohmann::json tools = nlohmann::json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 10}, "unit": {"enum": ["celsius", "fahrenheit"]},
                     "days": {"type": "integer", "minimum": 1, "maximum": 7}},
      "required": ["city", "unit"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "tag", "parameters": {"type": "object",
      "properties": {"id": {"type": "string", "pattern": "^[a-z]{2}$"}, "labels": {"type": "array", "items": {"type": "string"}}}}}},
    {"type": "function", "function": {"name": "now"}}])");
  return tools;
}

std::shared_ptr<const grammar::Grammar> DsmlGrammar(const std::string& only, bool parallel) {
  auto gbnf = ToolCallGbnf(DsmlTools(), ToolFormat::kDeepSeekDsml, only, parallel);
  EXPECT_TRUE(gbnf.ok()) << gbnf.status().ToString();
  if (!gbnf.ok()) return nullptr;
  auto g = grammar::CompileGbnf(*gbnf);
  EXPECT_TRUE(g.ok()) << g.status().ToString() << "\n" << *gbnf;
  return g.ok() ? *g : nullptr;
}

bool DsmlAccepts(const std::shared_ptr<const grammar::Grammar>& g, const std::string& s) {
  grammar::GrammarMatcher m(g);
  return m.AcceptBytes(s) && m.IsAccepting();
}

TEST(ToolDsmlTest, GrammarAcceptsTheTemplatesCallsOnly) {
  const auto any = DsmlGrammar("", /*parallel=*/true), one = DsmlGrammar("", false), named = DsmlGrammar("now", false);
  ASSERT_TRUE(any && one && named);
  const std::string weather = DSML_INVOKE("get_weather") DSML_PARAM("city", "true", "Pa\"ris\n") DSML_PARAM("days", "false", "3")
      DSML_PARAM("unit", "true", "celsius") DSML_END_INVOKE;
  const std::string now = DSML_INVOKE("now") "\n" DSML_END_INVOKE;
  const std::string tag = DSML_INVOKE("tag") DSML_PARAM("id", "false", "\"ab\"") DSML_PARAM("labels", "false", "[\"x\"]") DSML_END_INVOKE;
  const std::string tag_none = DSML_INVOKE("tag") "\n" DSML_END_INVOKE;
  for (const std::string& call : {weather, now, tag, tag_none}) {
    EXPECT_TRUE(DsmlAccepts(any, DSML_OPEN + call + DSML_CLOSE)) << call;
    EXPECT_TRUE(DsmlAccepts(one, "<｜DSML｜function_calls>\n" + call + "</｜DSML｜function_calls>")) << call;
  }
  EXPECT_TRUE(DsmlAccepts(any, DSML_OPEN + weather + now + tag + DSML_CLOSE));
  EXPECT_FALSE(DsmlAccepts(one, DSML_OPEN + weather + now + DSML_CLOSE));  // parallel off: one call
  EXPECT_TRUE(DsmlAccepts(named, DSML_OPEN + now + DSML_CLOSE));
  EXPECT_FALSE(DsmlAccepts(named, DSML_OPEN + weather + DSML_CLOSE));
  const std::string bad[] = {
      // a required property missing; the wrong string attribute; a value outside the schema; an unknown property;
      // too long a raw string; a raw string holding ｜; a pattern-constrained string written raw; a mixed block.
      DSML_INVOKE("get_weather") DSML_PARAM("city", "true", "Paris") DSML_END_INVOKE,
      DSML_INVOKE("get_weather") DSML_PARAM("city", "false", "\"Paris\"") DSML_PARAM("unit", "true", "celsius") DSML_END_INVOKE,
      DSML_INVOKE("get_weather") DSML_PARAM("city", "true", "Paris") DSML_PARAM("days", "false", "9")
          DSML_PARAM("unit", "true", "celsius") DSML_END_INVOKE,
      DSML_INVOKE("get_weather") DSML_PARAM("city", "true", "Paris") DSML_PARAM("unit", "true", "kelvin") DSML_END_INVOKE,
      DSML_INVOKE("get_weather") DSML_PARAM("city", "true", "Paris") DSML_PARAM("unit", "true", "celsius")
          DSML_PARAM("extra", "true", "x") DSML_END_INVOKE,
      DSML_INVOKE("get_weather") DSML_PARAM("city", "true", "Parisxxxxxxxx") DSML_PARAM("unit", "true", "celsius") DSML_END_INVOKE,
      DSML_INVOKE("get_weather") DSML_PARAM("city", "true", "a｜b") DSML_PARAM("unit", "true", "celsius") DSML_END_INVOKE,
      DSML_INVOKE("tag") DSML_PARAM("id", "true", "ab") DSML_END_INVOKE,
      DSML_INVOKE("nope") "\n" DSML_END_INVOKE,
  };
  for (const std::string& call : bad) EXPECT_FALSE(DsmlAccepts(any, DSML_OPEN + call + DSML_CLOSE)) << call;
  EXPECT_FALSE(DsmlAccepts(any, DSML_OPEN + now + "</｜DSML｜function_calls>"));
  EXPECT_FALSE(DsmlAccepts(any, DSML_OPEN DSML_CLOSE));  // at least one call
  // Schemas the element syntax cannot carry are refused, naming the field.
  auto refused = ToolCallGbnf(nlohmann::json::parse(R"([{"type": "function", "function": {"name": "f",
      "parameters": {"anyOf": [{"type": "object"}, {"type": "object"}]}}}])"), ToolFormat::kDeepSeekDsml, "", false);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("tools[0].function.parameters"), std::string::npos) << refused.status().ToString();
}

// Random walks through the grammar on the real DeepSeek-V3 vocabulary (any allowed token, seeded): every answer
// parses into calls of allowed functions whose arguments are JSON objects satisfying the hand-checked schema facts.
TEST(ToolDsmlTest, GrammarWalksParseIntoValidCalls) {
  auto tok = testing::LoadReferenceVocab("deepseek_v3");
  if (!tok) return;  // failed, naming the vocabulary (vocab_test_util.h)
  const auto g = DsmlGrammar("", /*parallel=*/true);
  ASSERT_TRUE(g);
  auto trie = grammar::TokenTrie::FromTokenizer(*tok);
  const auto sets = grammar::TokenSets::Build(g, trie);
  std::mt19937 rng(11);
  std::vector<uint32_t> bits((trie->vocab_size() + 31) / 32);
  int complete = 0;
  for (int walk = 0; walk < 12; ++walk) {
    grammar::GrammarMatcher m(sets);
    std::string text;
    for (int step = 0; step < 400 && !m.IsTerminated(); ++step) {
      m.FillMask(bits.data());
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < trie->vocab_size(); ++id)
        if (((bits[id >> 5] >> (id & 31)) & 1) && !tok->IsEog(id)) allowed.push_back(id);
      // End as soon as the grammar allows it half the time, so walks finish.
      if (m.IsAccepting() && (allowed.empty() || rng() % 2 == 0)) break;
      if (allowed.empty()) break;
      const int32_t pick = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.AcceptToken(pick));
      text += trie->bytes(pick);
    }
    if (!m.IsAccepting()) continue;  // ran out of steps inside a long string
    ++complete;
    const ParsedAssistant p = ParseAssistantOutput(text, ToolFormat::kDeepSeekDsml, true, false);
    ASSERT_FALSE(p.tool_calls.empty()) << text;
    EXPECT_FALSE(p.content.has_value()) << text;
    for (const ParsedToolCall& c : p.tool_calls) {
      const auto args = nlohmann::json::parse(c.arguments, nullptr, false);
      ASSERT_TRUE(args.is_object()) << c.arguments << "\n" << text;
      if (c.name == "get_weather") {
        ASSERT_TRUE(args.contains("city") && args["city"].is_string()) << c.arguments;
        EXPECT_TRUE(args["unit"] == "celsius" || args["unit"] == "fahrenheit") << c.arguments;
        if (args.contains("days")) {
          EXPECT_TRUE(args["days"].is_number_integer()) << c.arguments;
        }
      } else if (c.name == "tag") {
        if (args.contains("id")) {
          EXPECT_TRUE(args["id"].is_string() && args["id"].get<std::string>().size() == 2) << c.arguments;
        }
        if (args.contains("labels")) {
          EXPECT_TRUE(args["labels"].is_array()) << c.arguments;
        }
      } else {
        EXPECT_EQ(c.name, "now");
        EXPECT_EQ(c.arguments, "{}");
      }
    }
  }
  EXPECT_GE(complete, 6);
}

#undef DSML_OPEN
#undef DSML_CLOSE
#undef DSML_INVOKE
#undef DSML_END_INVOKE
#undef DSML_PARAM

}  // namespace
}  // namespace deepinfer
