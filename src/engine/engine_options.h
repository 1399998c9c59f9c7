// What an engine is configured with (EngineOptions: the public options plus internal handles and test hooks)
// and what it reports (EngineStats).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "deepinfer/engine.h"
#include "dist/parallel.h"
#include "engine/speculative.h"
#include "engine/step_cost_model.h"
#include "kv/kv_tier_stats.h"
#include "tensor/dtype.h"

namespace deepinfer {

struct Model;

// The element type of the KV cache for the public choice.
inline DType KvDType(api::KvCacheDtype d) {
  switch (d) {
    case api::KvCacheDtype::kBF16: return DType::kBF16;
    case api::KvCacheDtype::kF16: return DType::kF16;
    case api::KvCacheDtype::kF32: break;
  }
  return DType::kF32;
}

// The public options (include/deepinfer/engine.h) are the engine's own; this adds only what the public API does
// not expose: handles the API layer resolves (the draft model, the process's communicators) and test hooks.
struct EngineOptions : api::EngineOptions {
  // kDraft: the internal model behind draft_model (the API layer resolves it; internal callers set it directly).
  // Same vocabulary as the target; must outlive the engine.
  const Model* draft = nullptr;
  // The process's communicators and parallel plan under mpirun, from the top level (apps, the public API);
  // nullptr: one process. The engine reads no global.
  dist::DistContext* dist = nullptr;
  int num_kv_blocks = 0;            // explicit pool size (tests, bench); 0: from kv_cache_bytes / kv_cache_fraction
  // Tests: run on the tiers' loader thread before each prefix load (holds loads in flight while steps run).
  std::function<void()> kv_tier_before_load;
  double host_overhead_us = 0;      // benchmarks only: busy-work added to every host step (bench sim)
  // Tests only: the step's duration in seconds from its shape, instead of the wall clock around the executor, so
  // that a test of the latency target does not depend on the machine's speed. Called on the executor's stream
  // right after the step ran. Unset: the wall clock.
  std::function<double(const StepShape&)> step_clock;
  // Tests only: every measured step time (step_clock's too) is multiplied by this. The public API sets it on one
  // rank from DEEPINFER_TEST_SKEW_STEP_TIME=RANK:FACTOR (src/api/engine.cc), so that a test can give the ranks of
  // a --tp / --cp group clocks that disagree (tests/dist/itl_tp.mjs). 1: the clock as measured.
  double step_time_scale = 1;
  // Tests only: DeepSeek-V4 under --speculative mtp keeps the MTP block's K=V rows in a separate cache indexed by
  // the anchor's table (a row per position, main's behaviour before the windowed MTP plane), not in a windowed
  // plane of the main layout (ModelConfig::Dsv4Layout(true)); the two must draft alike.
  bool mtp_separate_cache = false;

  DType kv_dtype() const { return KvDType(kv_cache_dtype); }
};

struct EngineStats {
  int64_t steps = 0, rows = 0, prompt_tokens_computed = 0, generated_tokens = 0, ghost_rows = 0;
  int64_t cached_prompt_tokens = 0, preemptions = 0, requests_finished = 0, requests_aborted = 0;
  int64_t replayed_prompt_tokens = 0;  // prompt tokens recomputed to rebuild sliding windows for prefix hits
  int64_t priority_preemptions = 0;  // preemptions that made room for a more urgent (lower priority value) request
  int waiting = 0, running = 0;
  int loading = 0;       // of the waiting: sequences waiting on a KV tier load (not admissible until it is done)
  KvTierStats kv_tiers;  // the KV tiers' counters (enabled == false without tiers)
  int kv_blocks_total = 0, kv_blocks_free = 0;
  int kv_blocks_cached = 0;  // blocks the prefix cache can match (every KV group; referenced or not)
  double host_seconds = 0;          // engine thread busy (scheduling, processing), excluding waits on the stream
  double device_busy_seconds = 0, device_idle_seconds = 0;  // the executor stream
  // Latency target: the prefill budget it gave the last step (-1: none, only --max-batched-tokens), and the steps
  // whose prefill it held below what --max-batched-tokens left.
  int prefill_budget = -1;
  int64_t target_limited_steps = 0;
  // Speculative decoding (vLLM's spec_decode metrics): verify rows with drafts, drafts proposed and accepted,
  // rows by accepted length (0..kMaxSpecTokens), and how often the i-th draft of a row was accepted.
  int64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  std::array<int64_t, kMaxSpecTokens + 1> spec_accepted_len{};
  std::array<int64_t, kMaxSpecTokens> spec_accepted_per_pos{};
};

}  // namespace deepinfer
