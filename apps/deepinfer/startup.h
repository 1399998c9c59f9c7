// The start-up path every CLI command shares: command-line parsing with --help, the log level, compute
// threads, engine options from the engine flags, the multi-process layout, and model loading with the CLI's
// error boundary (a clear message and a non-zero exit). This file and startup.cc build on the public API
// (include/deepinfer/) only, as generate and serve do (tests/layering/seams.mjs, "cli seam"); the tools over
// internals (logprobs, tokenize, bench prefill/layers/serve) use the internal-Model variants in engine_flags.h,
// which load through the same path.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "args.h"
#include "deepinfer/engine.h"
#include "deepinfer/model.h"
#include "deepinfer/status.h"

namespace deepinfer::cli {

// "4GiB", "512MiB", "1.5G", "1000000" -> bytes; "0.25" (< 1) -> a fraction, returned through *fraction.
Status ParseSize(const std::string& s, size_t* bytes, double* fraction);
// --kv-cache-dtype's value: f32, bf16 or f16 (every command that takes the flag checks it here, one message).
Status CheckKvCacheDtype(const std::string& name);


#define DI_ENGINE_FLAGS                                                                                                 \
  {"ctx-size", "c", "N", "model's", "max tokens per sequence, prompt + generated (capped at the model's context)"},    \
      {"kv-cache", "", "SIZE", "0.25", "KV cache size: bytes with a unit (4GiB, 512MiB) or a fraction of available RAM (0.25); never more than --max-num-seqs full-length sequences need"}, \
      {"kv-cache-dtype", "", "T", "f32", "KV cache element type: f32, bf16 or f16"},                                    \
      {"block-size", "", "N", "16", "tokens per KV cache block (prefix-cache granularity)"},                             \
      {"max-num-seqs", "", "N", "64", "concurrent sequences (rows per step; each of n samples counts)"},                \
      {"max-batched-tokens", "", "N", "512", "tokens per engine step (prefill chunk budget plus decode rows)"},          \
      {"no-prefix-cache", "", "", "", "do not reuse K/V of earlier prompts with the same prefix"},                      \
      {"swa-replay", "", "MODE", "exact", "DeepSeek-V4 prefix hits: exact rebuilds the sliding windows and compressor rings from cached blocks (outputs bitwise a cold run's); approx is DeepSeek-V4.1's encoder-side replay: windows are never cached, a hit at H recomputes [H-W, H) plus the open compressor block, reading nothing below (less memory, not equal to a cold run)"}, \
      {"swa-full", "", "", "", "keep every layer's K/V for every position, sliding-window layers too (llama.cpp's flag): more memory; by default a windowed layer's blocks are released once they leave its window"}, \
      {"swa-replay-max", "", "N", "4 x window", "prefix hits on sliding-window models: recompute at most N prompt tokens to rebuild evicted windows (reusing the full-attention layers' K/V); 0: reuse only up to the last cached window"}, \
      {"swa-checkpoint-every", "", "N", "0", "sliding-window models: keep a finished window in the prefix cache only every N tokens (whole blocks; N <= --swa-replay-max), so cached windows cost ~W/N of the full layers' bytes and a hit replays at most N tokens; 0: every window block stays cached"}, \
      {"no-overlap", "", "", "", "schedule the next step only after the current one finished (overlap depth 0)"},      \
      {"kv-offload-ram", "", "SIZE", "off", "host-RAM tier behind the prefix cache (4GiB, 512MiB): prefix blocks the KV pool evicts are kept here (least recently used out first) and loaded back on a later hit; full-attention models (sliding-window ones with --swa-full), one process"}, \
      {"kv-store", "", "DIR", "off", "disk tier behind the prefix cache: prefix blocks are written through to files in DIR (checksummed; written temp, fsync, rename) and served on later hits, after a restart too; only by the same model, KV dtype and block size; needs --kv-store-size"}, \
      {"kv-store-size", "", "SIZE", "", "--kv-store: the most bytes its files may hold (least recently used removed first)"}, \
      {"target-itl-ms", "", "MS", "off", "inter-token latency target: size each step's prefill chunk from the measured cost of recent steps so that steps with decoding streams stay within MS milliseconds (prompts still get one KV block per step; never above --max-batched-tokens; outputs unchanged; under --tp/--cp every rank of a group uses its leader's step times)"}, \
      {"threads", "t", "N", "all cores", "compute threads"},                                                             \
      {"speculative", "", "ngram|draft|mtp", "off", "speculative decoding: a proposer guesses tokens the model verifies in one pass (n-gram prompt lookup, a --draft-model, or DeepSeek-V3's or V4's MTP module); outputs stay those of plain decoding"}, \
      {"draft-model", "", "MODEL", "", "--speculative draft: the draft model (GGUF, HF directory or hub reference) sharing the target's vocabulary"}, \
      {"num-speculative-tokens", "", "K", "3", "drafts proposed and verified per step (1..16)"},                         \
      {"ngram-min", "", "N", "2", "--speculative ngram: shortest suffix matched against the prompt and output"},       \
      {"ngram-max", "", "M", "4", "--speculative ngram: longest suffix matched (tried first)"},                        \
      {"spec-verify", "", "exact|rejection", "exact", "exact: accept a draft iff it is the model's own choice (identical outputs); rejection: Leviathan et al. rejection sampling (same distribution, higher acceptance, not token-identical)"}
// The --mmap / --no-mmap flags every model-loading command shares.
#define DI_WEIGHT_FLAGS                                                                                              \
  {"mmap", "", "", "", "keep weights in the mmapped files (no copy, less RAM; slower decode on 4 KiB pages)"},      \
      {"no-mmap", "", "", "", "always copy weights into huge-page memory (default: copy when they fit in RAM)"},   \
      {"mtp-model", "", "FILE", "", "a DeepSeek-V4 GGUF's MTP block from its own GGUF (llama.cpp's and deepinfer convert's mtp-*.gguf), for --speculative mtp and logprobs --mtp"}

// Multi-process layout (under mpirun; docs/configuration.md "Multi-process").
#define DI_PARALLEL_FLAGS                                                                                            \
  {"dp", "", "D", "1", "attention data-parallel groups (each its own scheduler and KV cache)"},                     \
      {"dp-policy", "", "cache_aware|least_load|round_robin", "cache_aware", "how rank 0 picks a --dp group per request: the router's policies (cache_aware: by the KV blocks each group's events say it holds; least_load by default with --no-prefix-cache)"}, \
      {"tp", "", "T", "N/(D*C)", "tensor-parallel ranks per attention group (heads, FFN and vocabulary split)"},    \
      {"cp", "", "C", "1", "context-parallel ranks per attention group (each computes a share of every batch's rows)"}, \
      {"cp-split", "", "balanced|contiguous", "balanced", "context parallel: prefill chunks cut head-tail into 2C pieces (equal attention work) or into C consecutive ones"}, \
      {"ep", "", "E", "1 if T=N, else N", "expert-parallel ranks for MoE layers (N: whole experts per rank; 1: experts tensor-split)"}, \
      {"ep-redundant-experts", "", "R", "0", "extra expert slots per MoE layer for replicas of hot experts (EPLB; E + R divisible by --ep)"}, \
      {"eplb-interval", "", "STEPS", "0", "engine steps between online expert rebalances from counted loads (0: never)"}, \
      {"enable-two-batch-overlap", "", "", "", "run each step's batch as two micro-batches, one's MoE dispatch/combine on a communication thread while the other computes (expert parallelism; bitwise the same outputs)"}, \
      {"dist-timeout", "", "S", "30", "seconds a rank waits for a peer before ending the job (a dead or hung rank)"}

// Prints "error: ..." and returns the exit status 1.
int Fail(const Status& s);

// Parses argv into args. Returns the exit status when the command ends here: 2 after a bad command line, 0
// after printing --help; nullopt to go on.
std::optional<int> ParseCommandLine(Args& args, int argc, char** argv);
// --quiet / -q: only errors on stderr.
void ApplyLogFlags(const Args& args);

// The engine flags (DI_ENGINE_FLAGS) over EngineOptions' defaults; errors name the flag. --threads resizes the
// compute pool right away, so model loading runs on the same threads as the forward pass.
Status EngineOptionsFromArgs(const Args& args, api::EngineOptions* options);
// --draft-model: loads the draft (exits on failure like OpenModelOrDie) and points options->draft_model at it;
// null without the flag.
std::unique_ptr<api::Model> OpenDraftModelOrDie(const Args& args, api::EngineOptions* options);
// --mmap / --no-mmap (DI_WEIGHT_FLAGS).
api::ModelOptions ModelOptionsFromArgs(const Args& args);
// DI_PARALLEL_FLAGS -> api::SetupParallel (deepinfer/parallel.h): resolves the rank layout of this job (one
// process: everything 1) and installs the process's communicators before any model is loaded. Every rank checks
// the same flags, so a bad combination fails on every rank with the same message.
Status SetupParallel(const Args& args);

// No -m MODEL given: prints what MODEL may be and exits with status 2.
void ExitIfNoModel(const std::string& model_arg);
// Loads MODEL (path or hub reference) through the public API; on failure prints the error and exits.
std::unique_ptr<api::Model> OpenModelOrDie(const std::string& model_arg, const api::ModelOptions& options);

}  // namespace deepinfer::cli
