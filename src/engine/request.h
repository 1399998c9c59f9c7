// What a caller asks the engine for, and what it gets back. Shared by offline generation and the server.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "deepinfer/engine.h"
#include "deepinfer/status.h"
#include "grammar/grammar.h"
#include "sample/sampler.h"

namespace deepinfer {

// Speculative decoding (engine/speculative.h): a proposer guesses tokens, the target verifies them in one pass.
enum class SpecMethod : uint8_t { kNone = 0, kNgram = 1, kDraft = 2, kMtp = 3 };
const char* SpecMethodName(SpecMethod m);

// Per request: which proposer and how many drafts per step. Unset fields take the engine's configuration
// (--speculative, --num-speculative-tokens); num_tokens = 0 turns speculation off for this request.
struct SpecParams {
  int num_tokens = -1;
  bool has_method = false;
  SpecMethod method = SpecMethod::kNone;
};

// A gated grammar, for chat formats whose answer is a run of headed messages (Harmony, gpt-oss: analysis, then
// final or a tool call). A header starts at a `header_begin` token (or where the output starts when the prompt
// has none) and is complete when its text equals one of the listed headers: after an open header the grammar
// constrains the message's body; after a free header the body is unconstrained. While the header is being
// written, only tokens that continue some listed header are allowed (a marker as its one token, text as any
// tokens that spell it), and until the grammar has started, end-of-generation ids are refused, so the answer
// cannot end before the constrained message. The grammar itself is llama.cpp's lazy grammar with the header as
// the trigger, matched on token ids because the markers are control tokens the grammar cannot see.
struct GrammarGate {
  std::vector<int32_t> header_begin;                      // Harmony: <|start|>
  std::vector<std::pair<int32_t, std::string>> markers;   // ids a header holds as one token each, and their text
  std::vector<std::string> open_headers, free_headers;    // full header texts, markers written as their text
  bool feed_header = false;  // the grammar's sentences begin with the open header's text (it picks the body rule)
  // Or a lazy grammar behind a text trigger (no headers with it): reasoning models whose generation prompt opens
  // <think>. The answer runs free (end-of-generation ids refused) until its text holds `open_after` ("</think>")
  // or one of `open_after_tokens` (the trigger as one control token, which has no text the grammar sees) comes;
  // the grammar then constrains the rest, beginning with the triggering token's bytes after the trigger.
  std::string open_after;
  std::vector<int32_t> open_after_tokens;
  bool enabled() const { return !open_headers.empty() || !open_after.empty(); }
};

struct RequestParams {
  SamplingParams sampling;       // sampling.seed is used only when has_seed
  bool has_seed = false;         // otherwise the engine draws a seed for the request
  int max_tokens = 16;           // generated tokens per sample (capped by the context length)
  int n = 1;                     // independent samples sharing the prompt
  std::vector<std::string> stop;          // stop strings: matched across token boundaries, cut from the text
  std::vector<int32_t> stop_token_ids;    // extra ids that end a sample (kept in token_ids, not in the text)
  bool ignore_eos = false;
  int logprobs = -1;             // < 0: none; k >= 0: the chosen token's log-prob plus the k most likely
  bool include_stop_str_in_output = false;
  // Structured output: every sample's text is a sentence of this grammar (compiled by the caller, off the
  // engine thread). grammar_source is its GBNF text, which multi-process runs send to the other ranks.
  std::shared_ptr<const grammar::Grammar> grammar;
  std::string grammar_source;
  // Gated structured output (engine/grammar_gate.h): when set, the grammar constrains only the body of a message
  // whose header is one of gate.open_headers, so a reasoning channel before it runs free.
  GrammarGate gate;
  SpecParams speculative;
  // Scheduling priority, vLLM's semantics: lower values are admitted and prefilled first, and a waiting request
  // may preempt a running one of a strictly higher value; equal values keep arrival order. Outputs never depend
  // on it (scheduling does not change a bit).
  int priority = 0;
};

// One streamed event for one sample of a request: what is new since the previous event. The last event of a
// sample has finished = true and a finish_reason ("stop", "length", "abort"); an error event carries a status.
// The engine's outputs are the public API's own types (include/deepinfer/engine.h, LevelDB's rule: no mirror
// and no field-by-field copy at the boundary).
using TokenLogprob = api::TokenLogprob;
using RequestOutput = api::Output;

using OutputCallback = std::function<void(const RequestOutput&)>;

}  // namespace deepinfer
