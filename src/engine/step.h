// The per-step records that cross from the host scheduler to the executor ("device") and back. A step's
// SchedulerOutputs is an immutable snapshot owned by its WorkerStepState until the step has been processed:
// block tables are copied into it, never aliased from live sequence state that the host keeps changing.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "deepinfer/status.h"
#include "engine/stream.h"
#include "sample/sampler.h"

namespace deepinfer {
namespace grammar {
class GrammarMatcher;
}
class GrammarGateState;

// One row of one step: a run of consecutive positions of one sequence.
struct SequenceMetadata {
  uint64_t seq_id = 0;
  int32_t slot = -1;
  uint32_t slot_gen = 0;          // generation of the slot at launch (guards against a recycled slot)
  int32_t q_begin = 0, q_len = 0; // query positions [q_begin, q_begin + q_len); inputs come from the token table
  bool samples = false;           // false for intermediate prefill chunks
  // The last chunk of a speculating sequence's recompute (Sequence::admit_end): it samples nothing, but the
  // executor takes the slot's committed length from it and the proposers propose for the verify row that follows.
  bool hands_over = false;
  int32_t prompt_len = 0;         // tokens before this index are prompt (penalties count only what follows)
  // Slice of SchedulerOutputs::block_tables: num_blocks entries per KV group, group 0 (the anchor) first; a
  // sliding-window group's entries below its window are -1 (seq_forward.h).
  uint32_t block_table_off = 0, num_blocks = 0;
  // Bounded replay: the full-attention groups already hold positions [0, kv_cached_end) (a prefix hit): this
  // row recomputes them for the windowed groups only and writes no full-group K/V below it. 0: none.
  int32_t kv_cached_end = 0;
  int32_t window_floor = 0;       // windowed groups read nothing below it (SeqForward::window_floor)
  const SamplingParams* sampling = nullptr;      // owned by the request, alive while the row is in flight
  uint32_t sample_index = 0;      // RNG sub-stream (which of the request's n samples)
  int32_t logprobs = -1;          // < 0: none, else top-k alternatives to report
  grammar::GrammarMatcher* matcher = nullptr;  // structured output: owned by the request, like sampling
  GrammarGateState* gate = nullptr;            // a gated grammar's phase (engine/grammar_gate.h), with matcher
  // Speculative decoding (engine/speculative.h). A decode row of a speculating sequence is "dynamic": a step
  // still in flight may commit a run of any length, so the host cannot know q_begin; the executor takes it from
  // its own per-slot length (what the previous step committed) and runs 1 + (up to spec_k drafts) positions.
  // q_len is then the row's reservation (token budget and KV blocks), q_begin an upper bound.
  bool dynamic = false;
  uint8_t spec_method = 0;        // SpecMethod; kNone with dynamic = a plain decode row at a dynamic position
  int32_t spec_k = 0;             // drafts to propose and verify (the executor may propose fewer)
  int32_t end_limit = 0;          // dynamic rows: tokens may be committed only at positions < end_limit
};

struct SchedulerOutputs {
  uint64_t step = 0;
  std::vector<SequenceMetadata> rows;
  std::vector<int32_t> block_tables;  // copies of each row's block table
  int num_tokens = 0;
  bool empty() const { return rows.empty(); }
};

struct SampledToken {
  int32_t token = -1;
  float logprob = 0.f;
  std::vector<std::pair<int32_t, float>> top;
};

// What a dynamic row committed: the executor's q_begin and the run of tokens at positions begin + 1, ...
// (accepted drafts, then the target's own token; empty when the sequence had already reached end_limit on the
// device, a row the host then knows to be a ghost).
struct VerifiedRun {
  int32_t begin = -1;
  int32_t kv_end = 0;                  // positions [0, kv_end) hold verified K/V in every cache (target, draft, MTP)
  int32_t proposed = 0, accepted = 0;  // drafts proposed and accepted by verification
  std::vector<SampledToken> tokens;
};

struct SamplerOutput {
  std::vector<SampledToken> rows;  // parallel to SchedulerOutputs::rows (meaningful where samples, not dynamic)
  std::vector<VerifiedRun> runs;     // parallel to rows (meaningful where dynamic)
};

struct WorkerStepState {
  enum class Phase { kFree, kLaunched };
  SchedulerOutputs sched;
  SamplerOutput out;
  Status status;         // the executor's verdict (an error fails the step's requests, not the engine)
  Fence done = 0;        // step_done: everything the step reads or writes is finished
  Phase phase = Phase::kFree;
};

// What runs a step on the "device": forward + sampling, writing sampled tokens into the token table.
// Execute runs on the stream thread, strictly in step order.
class Executor {
 public:
  virtual ~Executor() = default;
  virtual void Execute(WorkerStepState& st) = 0;
  virtual int vocab_size() const = 0;
};

}  // namespace deepinfer
