// The inference engine: requests in, streamed outputs back, over continuous batching of every request in
// flight. Two ways to run it:
//   offline: Add requests, then RunUntilIdle() runs the loop on the calling thread until all have finished;
//   online:  Start() runs the loop on a background thread; Add and Abort from any thread; Shutdown() at the end.
// Outputs are deterministic: a request with a seed gives the same tokens whatever else is batched with it.
//
//   auto engine = deepinfer::api::Engine::Create(*model, {});
//   deepinfer::api::GenerationParams p;
//   p.max_tokens = 32;  // greedy: temperature 0 is the default
//   std::string text;
//   (*engine)->AddText("Once upon a time", p, [&](const deepinfer::api::Output& o) { text += o.text; });
//   (*engine)->RunUntilIdle();
//   deepinfer::Status leaks = (*engine)->Shutdown();  // every KV block and slot free again
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "deepinfer/model.h"
#include "deepinfer/sampling_params.h"
#include "deepinfer/status.h"

namespace deepinfer::api {

enum class KvCacheDtype { kF32, kBF16, kF16 };

// Speculative decoding: a cheap proposer guesses up to num_speculative_tokens tokens per step and the model
// verifies them in one forward pass. With exact verification (the default) outputs are token-identical to plain
// decoding, greedy and seeded sampling alike; only the speed changes.
enum class SpeculativeMethod {
  kNone,
  kNgram,  // prompt lookup: continue an earlier occurrence of the last n tokens (prompt and output)
  kDraft,  // a smaller model with the same vocabulary (draft_model), with its own paged KV cache
  kMtp,    // DeepSeek-V3's multi-token-prediction module, chained for k > 1
};
enum class SpeculativeVerify {
  kExact,      // accept a draft iff it is the token the model itself chooses: identical outputs
  kRejection,  // Leviathan et al.: the same output distribution, higher acceptance, not token-identical
};

struct EngineOptions {
  int max_num_seqs = 64;            // concurrent sequences (each of a request's n samples counts)
  int max_batched_tokens = 512;     // tokens per engine step (prefill chunks plus one per decoding sequence)
  int max_model_len = 0;            // tokens per sequence, prompt + generated; 0: the model's context length
  int block_size = 16;              // tokens per KV cache block (the prefix cache's granularity)
  // KV cache size: kv_cache_bytes when > 0, else kv_cache_fraction of available RAM; never more than
  // max_num_seqs sequences of max_model_len tokens need.
  size_t kv_cache_bytes = 0;
  double kv_cache_fraction = 0.25;
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kF32;
  bool prefix_caching = true;       // reuse the K/V of earlier prompts that share a prefix
  // Keep every layer's K/V for every position even where a layer attends only to a sliding window (llama.cpp's
  // --swa-full): one KV group, nothing released early. Off: a hybrid cache whose windowed layers keep their window.
  bool swa_full = false;
  // Bounded replay: a prefix hit whose sliding windows are no longer cached recomputes at most this many prompt
  // tokens for the windowed layers to rebuild them, reusing the full-attention layers' K/V. -1: four times the
  // largest window; 0: never (the hit stops where a window is).
  int swa_replay_max = -1;
  // Sparse window checkpoints: a windowed block that slides out of a running sequence's window stays in the prefix
  // cache only if the window ending at a multiple of this many tokens needs it. Windows then cost ~W / N of the
  // full-attention bytes in the cache, and a hit replays at most N tokens (N <= swa_replay_max). 0: every
  // windowed block stays cached.
  int swa_checkpoint_every = 0;
  // DeepSeek-V4 only (--swa-replay approx): V4.1's encoder-side scheme. Windowed state is never cached; a prefix hit
  // at H recomputes [H - W, H) plus the open compressor blocks. Not equal to a cold run (the receptive field of
  // stacked windows is cut); false: exact replay from cached windows, bitwise a cold run.
  bool swa_replay_approx = false;
  bool overlap = true;              // schedule step N+1 while step N computes (outputs are identical either way)
  // KV tiers behind the prefix cache: a host-RAM tier of this many bytes (0: none) and a disk tier in
  // kv_store_dir (empty: none) of at most kv_store_bytes, which a restarted engine of the same model reuses.
  size_t kv_offload_ram_bytes = 0;
  std::string kv_store_dir;
  size_t kv_store_bytes = 0;
  // Inter-token latency target in milliseconds: each step's prefill chunk is sized from the measured cost of recent
  // steps so that a step with decoding streams is predicted to finish within it (prompts still get at least one
  // KV block per step). 0: off (--max-batched-tokens alone). Outputs are identical either way.
  double target_itl_ms = 0;
  int threads = 0;                  // > 0: resize the process-wide compute pool (see SetComputeThreads)
  SpeculativeMethod speculative = SpeculativeMethod::kNone;
  int num_speculative_tokens = 3;   // drafts per step, 1..16
  int ngram_min = 2, ngram_max = 4; // n-gram proposer: match lengths tried, longest first
  SpeculativeVerify spec_verify = SpeculativeVerify::kExact;
  const Model* draft_model = nullptr;  // kDraft: must share the vocabulary and outlive the engine
};

// What to generate for one request: the sampling parameters plus its length, samples, stops and constraints.
// The defaults are greedy decoding of up to 16 tokens. This is the engine's own request type (no internal copy).
struct GenerationParams : SamplingParams {
  int max_tokens = 16;       // generated tokens per sample (the context length caps it)
  int n = 1;                 // independent samples of the same prompt
  std::vector<std::string> stop;          // stop strings: matched across token boundaries, cut from the text
  std::vector<int32_t> stop_token_ids;    // extra ids that end a sample (kept in token_ids, not in the text)
  bool include_stop_str_in_output = false;
  bool ignore_eos = false;                // keep generating past end-of-generation tokens
  int logprobs = -1;                      // < 0: none; k >= 0: the chosen token's log-prob plus the k most likely
  // Structured output: a GBNF grammar (llama.cpp syntax, root rule `root`) every sample's text must match;
  // empty: none. RequestFromOpenAiJson fills it from response_format / structured_outputs / guided_*.
  std::string grammar;
  // Speculative decoding for this request: -1 uses the engine's num_speculative_tokens, 0 turns it off.
  int num_speculative_tokens = -1;
  // Scheduling priority (vLLM's): lower values are admitted and prefilled first and may preempt running
  // requests of a higher value; equal values run in arrival order. Outputs do not depend on it.
  int priority = 0;
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.f;
  std::vector<std::pair<int32_t, float>> top;  // the most likely alternatives, most likely first
};

// One streamed event for one sample of a request: what is new since its previous event. A sample's last
// event has finished = true and finish_reason "stop" (end of generation or a stop string), "length"
// (max_tokens or the context) or "abort".
struct Output {
  uint64_t request_id = 0;
  int index = 0;                       // which of the n samples
  std::vector<int32_t> token_ids;      // new token ids
  std::string text;                    // new text: whole UTF-8 characters; text that may start a stop string is held back
  std::vector<TokenLogprob> logprobs;  // one per new token when requested
  bool finished = false;
  std::string finish_reason;           // set when finished
  std::string stop_reason;             // the stop string that matched, if any
  int prompt_tokens = 0;
  int cached_tokens = 0;               // prompt tokens served from the prefix cache
  int replayed_tokens = 0;             // prompt tokens recomputed to rebuild sliding windows for a prefix hit
  int completion_tokens = 0;           // generated so far for this sample
  int64_t spec_proposed = 0;           // speculative decoding so far for this sample: drafts proposed
  int64_t spec_accepted = 0;           // and accepted by verification
};

// Runs on the engine's thread: keep it short (copy what you need out).
using OutputCallback = std::function<void(const Output&)>;

// Pull-style outputs of one request. Next blocks until the next event and returns false after the last
// sample's final event. Needs the loop running elsewhere (Start, or RunUntilIdle on another thread).
// Destroying an unfinished stream aborts its request. The engine must outlive the stream.
class OutputStream {
 public:
  virtual ~OutputStream() = default;
  virtual uint64_t request_id() const = 0;
  virtual bool Next(Output* out) = 0;
};

// Counters since the engine was created.
struct EngineStats {
  int64_t steps = 0, prompt_tokens_computed = 0, cached_prompt_tokens = 0, generated_tokens = 0;
  int64_t replayed_prompt_tokens = 0;  // prompt tokens recomputed to rebuild sliding windows for prefix hits
  int64_t preemptions = 0, requests_finished = 0, requests_aborted = 0;
  int waiting = 0, running = 0;
  int kv_blocks_total = 0, kv_blocks_free = 0;
  // Speculative decoding: verify rows that carried drafts, drafts proposed, drafts accepted.
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
};

class Engine {
 public:
  // An engine over `model`, which must outlive it. Fails on options the model or the memory cannot meet.
  static StatusOr<std::unique_ptr<Engine>> Create(const Model& model, const EngineOptions& options = {});

  Engine() = default;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  // Shuts down if Shutdown was not called (its leak check is then lost).
  virtual ~Engine() = default;

  // Thread-safe. Validates the request (errors for bad parameters, prompts over the context, requests larger
  // than the whole KV cache) and queues it; returns its id. `callback` then receives its outputs.
  virtual StatusOr<uint64_t> Add(std::vector<int32_t> prompt, const GenerationParams& params, OutputCallback callback) = 0;
  // The same with the prompt tokenized by Model::EncodePrompt.
  virtual StatusOr<uint64_t> AddText(const std::string& prompt, const GenerationParams& params, OutputCallback callback) = 0;
  // The same with outputs pulled from the returned stream.
  virtual StatusOr<std::unique_ptr<OutputStream>> AddStream(std::vector<int32_t> prompt, const GenerationParams& params) = 0;
  // The checks Add makes, without queueing anything.
  virtual Status Validate(const std::vector<int32_t>& prompt, const GenerationParams& params) const = 0;
  // Thread-safe. Ends the request with finish_reason "abort"; unknown and finished ids are ignored.
  virtual void Abort(uint64_t request_id) = 0;

  // Offline: runs the loop on this thread until every request has finished.
  virtual Status RunUntilIdle() = 0;
  // Online: runs the loop on a background thread until Shutdown.
  virtual void Start() = 0;
  // Aborts what is left, drains the pipeline, and checks that every KV block and sequence slot is free again
  // (an error names what leaked). Call once, at the end.
  virtual Status Shutdown() = 0;

  virtual EngineStats Stats() const = 0;
  // The per-sequence token limit in effect (EngineOptions::max_model_len or the model's context).
  virtual int max_model_len() const = 0;
};

}  // namespace deepinfer::api
