// What an engine is configured with (EngineOptions) and what it reports (EngineStats).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "dist/parallel.h"
#include "engine/speculative.h"
#include "engine/step_cost_model.h"
#include "kv/kv_tier_stats.h"
#include "tensor/dtype.h"

namespace deepinfer {

struct EngineOptions {
  int max_num_seqs = 64;            // concurrent sequences (token-table slots, rows per step)
  int max_batched_tokens = 512;     // tokens per step
  int max_model_len = 0;            // 0: the model's context length
  int block_size = 16;              // tokens per KV block
  int num_kv_blocks = 0;            // explicit pool size; 0: from kv_cache_bytes / kv_cache_fraction
  size_t kv_cache_bytes = 0;        // 0: kv_cache_fraction of available RAM
  double kv_cache_fraction = 0.25;  // of MemAvailable, capped by what max_num_seqs x max_model_len need
  DType kv_dtype = DType::kF32;
  bool prefix_caching = true;
  // Keep every layer's K/V for every position even where a layer attends only to a sliding window (llama.cpp's
  // --swa-full): one KV group, nothing released early. Off: a hybrid cache (kv/kv_layout.h).
  bool swa_full = false;
  // Bounded replay (docs/architecture.md, "Hybrid KV cache"): a prefix hit whose sliding windows are no longer
  // cached recomputes at most this many prompt tokens for the windowed layers to rebuild them, reusing the
  // full-attention layers' K/V. -1: four times the largest window; 0: never (the hit stops where a window is).
  int swa_replay_max = -1;
  // Sparse window checkpoints: a windowed block that slides out of a running sequence's window stays in the prefix
  // cache only if the window ending at a multiple of this many tokens (rounded up to whole blocks) needs it; the
  // others are freed at once. Windows then cost ~W / N of the full-attention bytes in the cache, and a hit replays
  // at most N tokens from the checkpoint before it (N <= swa_replay_max). 0: every windowed block stays cached.
  int swa_checkpoint_every = 0;
  // --swa-replay approx (DeepSeek-V4 only; docs/design/deepseek_v4.md "Bounded replay, approximate"): DeepSeek-V4.1's
  // encoder-side scheme. Windowed state is never cached; a prefix hit at H recomputes [H - W, H) plus the open
  // compressor blocks, whose window attention reads nothing below that start. Not equal to a cold run (the
  // receptive field of stacked windows is cut); false: exact replay from cached windows (bitwise a cold run).
  bool swa_replay_approx = false;
  bool overlap = true;              // depth 1 (true) or 0
  // KV tiers behind the prefix cache (kv/kv_tiers.h; docs/architecture.md "KV tiers and persistence"): a host-RAM
  // tier of this many bytes (--kv-offload-ram; 0: none), and a disk tier in this directory (--kv-store; empty:
  // none) of at most kv_store_bytes (--kv-store-size). Full-attention KV layouts in one process only.
  size_t kv_offload_ram_bytes = 0;
  std::string kv_store_dir;
  size_t kv_store_bytes = 0;
  // Tests: run on the tiers' loader thread before each prefix load (holds loads in flight while steps run).
  std::function<void()> kv_tier_before_load;
  double host_overhead_us = 0;      // benchmarks only: busy-work added to every host step (bench sim)
  SpeculativeOptions speculative;   // speculative decoding (engine/speculative.h); off by default
  // Latency target (--target-itl-ms; docs/architecture.md "Latency target"): each step's prefill is sized so that
  // the step, decode rows included, is predicted to run within this many milliseconds. 0: off.
  double target_itl_ms = 0;
  // Tests only: the step's duration in seconds from its shape, instead of the wall clock around the executor, so
  // that a test of the latency target does not depend on the machine's speed. Called on the executor's stream
  // right after the step ran. Unset: the wall clock.
  std::function<double(const StepShape&)> step_clock;
  // Tests only: every measured step time (step_clock's too) is multiplied by this. The public API sets it on one
  // rank from DEEPINFER_TEST_SKEW_STEP_TIME=RANK:FACTOR (src/api/engine.cc), so that a test can give the ranks of
  // a --tp / --cp group clocks that disagree (tests/dist/itl_tp.mjs). 1: the clock as measured.
  double step_time_scale = 1;
  // The process's communicators and parallel plan under mpirun, from the top level (apps, the public API);
  // nullptr: one process. The engine reads no global.
  dist::DistContext* dist = nullptr;
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
