// Engine flags shared by generate, serve and bench: KV cache size and dtype, batching limits, overlap.
#pragma once
#include "args.h"
#include "deepinfer/status.h"
#include "engine/engine.h"

namespace deepinfer::cli {

#define DI_ENGINE_FLAGS                                                                                                 \
  {"ctx-size", "c", "N", "model's", "max tokens per sequence, prompt + generated (capped at the model's context)"},    \
      {"kv-cache", "", "SIZE", "0.25", "KV cache size: bytes with a unit (4GiB, 512MiB) or a fraction of available RAM (0.25); never more than --max-num-seqs full-length sequences need"}, \
      {"kv-cache-dtype", "", "T", "f32", "KV cache element type: f32, bf16 or f16"},                                    \
      {"block-size", "", "N", "16", "tokens per KV cache block (prefix-cache granularity)"},                             \
      {"max-num-seqs", "", "N", "64", "concurrent sequences (rows per step; each of n samples counts)"},                \
      {"max-batched-tokens", "", "N", "512", "tokens per engine step (prefill chunk budget plus decode rows)"},          \
      {"no-prefix-cache", "", "", "", "do not reuse K/V of earlier prompts with the same prefix"},                      \
      {"no-overlap", "", "", "", "schedule the next step only after the current one finished (overlap depth 0)"},      \
      {"threads", "t", "N", "all cores", "compute threads"}

// Fills engine options from the flags above; errors name the flag.
Status EngineOptionsFromArgs(const Args& args, EngineOptions* opt);

}  // namespace deepinfer::cli
