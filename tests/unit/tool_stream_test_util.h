// A tool-call stream as a client assembles it (OpenAI's delta shape), for the streaming parser's tests.
#pragma once
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/tool_stream.h"

namespace deepinfer::testing {

struct AssembledToolStream {
  std::string content;
  std::vector<ParsedToolCall> calls;
  int arg_deltas = 0;    // argument fragments received
  bool shape_ok = true;  // every call's first delta carried its name, later ones none
};

// `text` fed to a streamer in the pieces `cuts` marks (ascending offsets), then Finish; every delta assembled.
inline AssembledToolStream StreamToolCalls(ToolFormat f, const std::string& text, const std::vector<size_t>& cuts,
                                           int max_calls = 1 << 30) {
  ToolCallStreamer s(f, max_calls);
  AssembledToolStream a;
  auto take = [&](const ToolStreamDelta& d) {
    a.content += d.content;
    for (const ToolCallDelta& c : d.calls) {
      if (c.first != (c.index == static_cast<int>(a.calls.size()))) a.shape_ok = false;
      if (c.first) a.calls.push_back({c.name, ""});
      if (c.index >= static_cast<int>(a.calls.size())) {
        a.shape_ok = false;
        continue;
      }
      a.calls[c.index].arguments += c.arguments;
      a.arg_deltas += !c.arguments.empty();
    }
  };
  size_t at = 0;
  for (size_t cut : cuts) {
    ToolStreamDelta d;
    s.Feed(std::string_view(text).substr(at, cut - at), &d);
    take(d);
    at = cut;
  }
  ToolStreamDelta d;
  s.Feed(std::string_view(text).substr(at), &d);
  take(d);
  ToolStreamDelta last;
  s.Finish(&last);
  take(last);
  return a;
}

// Ways to cut a text of `size` bytes into pieces (ascending cut offsets): fixed pieces of 1..9 bytes (1: every
// marker, escape and multi-byte character cut everywhere), then `random_trials` random cuttings with pieces of
// 1..max_piece bytes drawn from `rng`.
inline std::vector<std::vector<size_t>> ToolStreamCuttings(size_t size, std::mt19937* rng, int random_trials = 50,
                                                           size_t max_piece = 12) {
  std::vector<std::vector<size_t>> out;
  for (size_t piece = 1; piece <= 9; ++piece) {
    out.emplace_back();
    for (size_t at = piece; at < size; at += piece) out.back().push_back(at);
  }
  for (int trial = 0; trial < random_trials; ++trial) {
    out.emplace_back();
    for (size_t at = 0; at < size; at += 1 + (*rng)() % max_piece) out.back().push_back(at);
  }
  return out;
}

}  // namespace deepinfer::testing
