// The streaming tool-call parser: what a stream sends, piece by piece, assembles into the non-streamed parse of
// the same answer for every way of cutting the answer into pieces, and arguments go out before a call ends.
// The expected calls are literal strings written out by hand.
#include "protocol/tool_stream.h"

#include <random>

#include <gtest/gtest.h>

#include "tool_stream_test_util.h"

namespace deepinfer {
namespace {

using Assembled = testing::AssembledToolStream;

Assembled Stream(ToolFormat f, const std::string& text, const std::vector<size_t>& cuts, int max_calls = 1 << 30) {
  return testing::StreamToolCalls(f, text, cuts, max_calls);
}

struct Case {
  ToolFormat format;
  std::string text;
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
};

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {ToolFormat::kHermes,
       "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris \\\"15e\\\"\", \"days\": [3, {\"a\": \"}\"}]}}\n</tool_call>\n"
       "<tool_call>\n{\"arguments\": {\"tz\": \"CET\"}, \"name\": \"get_time\"}\n</tool_call>",
       "Let me check.",
       {{"get_weather", "{\"city\": \"Paris \\\"15e\\\"\", \"days\": [3, {\"a\": \"}\"}]}"}, {"get_time", "{\"tz\": \"CET\"}"}}},
      {ToolFormat::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>", "", {{"f", "{\"x\": 1}"}}},
      {ToolFormat::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": null}</tool_call> trailing", "", {{"f", "{}"}}},
      {ToolFormat::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 12", "", {{"f", "{\"x\": 12"}}},  // cut off
      {ToolFormat::kHermes, "  plain answer, <tool and all  ", "plain answer, <tool and all  ", {}},
      {ToolFormat::kHermes, "x <tool_call>not json</tool_call>", "x <tool_call>not json</tool_call>", {}},
      {ToolFormat::kDeepSeekV3,
       "Sure.  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\", \"code\": 123}\n```"
       "<｜tool▁call▁end｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "Sure.",
       {{"get_weather", "{\"city\": \"Paris\", \"code\": 123}"}, {"get_time", "{}"}}},
      {ToolFormat::kDeepSeekV3,
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"s\": \"a`b``c\"}\n```<｜tool▁call▁end｜>", "",
       {{"f", "{\"s\": \"a`b``c\"}"}}},
      {ToolFormat::kLlama3Json, "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"arguments\": {\"k\": [1, 2]}}", "",
       {{"a", "{}"}, {"b", "{\"k\": [1, 2]}"}}},
      {ToolFormat::kLlama3Json, "{\"name\": \"c\", \"parameters\": {\"n\": -1.5e3, \"t\": true}}", "", {{"c", "{\"n\": -1.5e3, \"t\": true}"}}},
      {ToolFormat::kLlama3Json, "The weather is {nice}.", "The weather is {nice}.", {}},
      {ToolFormat::kLlama3Json, "{nice}", "{nice}", {}},
  };
  return cases;
}

void ExpectCase(const Case& c, const Assembled& a, const std::string& how) {
  EXPECT_TRUE(a.shape_ok) << how;
  EXPECT_EQ(a.content, c.content) << how;
  ASSERT_EQ(a.calls.size(), c.calls.size()) << how;
  for (size_t i = 0; i < c.calls.size(); ++i) {
    EXPECT_EQ(a.calls[i].name, c.calls[i].first) << how << " call " << i;
    EXPECT_EQ(a.calls[i].arguments, c.calls[i].second) << how << " call " << i;
  }
}

TEST(ToolStreamTest, WholeAnswerParses) {
  for (const Case& c : Cases()) ExpectCase(c, Stream(c.format, c.text, {}), "whole: " + c.text);
}

TEST(ToolStreamTest, EveryCuttingGivesTheSameAnswer) {
  std::mt19937 rng(5);
  for (const Case& c : Cases()) {
    int n = 0;
    for (const std::vector<size_t>& cuts : testing::ToolStreamCuttings(c.text.size(), &rng))
      ExpectCase(c, Stream(c.format, c.text, cuts), "cutting " + std::to_string(n++) + ": " + c.text);
  }
}

TEST(ToolStreamTest, ArgumentsGoOutBeforeTheCallEnds) {
  // Fed a byte at a time, the arguments of a Hermes and a DeepSeek call arrive in many fragments, and the first
  // fragment is out while the call is still open.
  for (const Case* c : {&Cases()[0], &Cases()[6]}) {
    std::vector<size_t> cuts;
    for (size_t at = 1; at < c->text.size(); ++at) cuts.push_back(at);
    EXPECT_GT(Stream(c->format, c->text, cuts).arg_deltas, 10) << c->text;
  }
  ToolCallStreamer s(ToolFormat::kHermes);
  ToolStreamDelta d;
  s.Feed("<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par", &d);
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_TRUE(d.calls[0].first);
  EXPECT_EQ(d.calls[0].name, "get_weather");
  EXPECT_EQ(d.calls[0].arguments, "{\"city\": \"Par");
}

TEST(ToolStreamTest, OneCallWhenParallelCallsAreOff) {
  const Case& c = Cases()[0];
  const Assembled a = Stream(c.format, c.text, {5, 40, 90}, 1);
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].name, "get_weather");
}

TEST(ToolStreamTest, NonStreamedParseIsTheStreamersResult) {
  for (const Case& c : Cases()) {
    const ParsedAssistant p = ParseAssistantOutput(c.text, c.format, true, false);
    ASSERT_EQ(p.tool_calls.size(), c.calls.size()) << c.text;
    for (size_t i = 0; i < c.calls.size(); ++i) EXPECT_EQ(p.tool_calls[i].arguments, c.calls[i].second);
    if (c.calls.empty()) {
      EXPECT_EQ(p.content.value_or("<null>"), c.content) << c.text;
    } else {
      EXPECT_EQ(p.content.value_or(""), c.content) << c.text;
    }
  }
}

}  // namespace
}  // namespace deepinfer
