// The CPU model executor: gathers a step's input tokens from the token table, runs the batched transformer
// over the paged K/V cache, then samples every sampling row (penalties read the device-view history in the
// token table) and writes the new token at (slot, position) for the next step to read.
//
// Speculative decoding runs as stages of the step (engine/proposer.h): the proposers write drafts into the
// token table before the forward, SpecVerifier commits each verify row's accepted run after it, and the
// proposers then see what was committed.
#pragma once
#include <memory>
#include <vector>

#include "engine/engine_options.h"
#include "engine/proposer.h"
#include "engine/spec_verifier.h"
#include "engine/speculative.h"
#include "engine/step.h"
#include "sample/sampler.h"
#include "engine/token_table.h"
#include "kv/paged_kv_cache.h"
#include "model/transformer.h"

namespace deepinfer {

// The executor's own record of each token-table slot (the "device" view of committed lengths): a dynamic row
// reads where its sequence really is from here, since the host may not have processed the previous step yet.
struct SlotState {
  int32_t len = 0;   // tokens known in the table row (the next sampled token lands at position len)
  uint32_t gen = 0;  // the slot generation that wrote len (a dynamic row of another occupant is a bug)
};

class ModelExecutor : public Executor {
 public:
  // opt: the engine's options (the speculative ones are read here); draft_kv / mtp_kv: speculative decoding
  // (draft_kv with the target's block count when opt.draft is set; mtp_kv from MtpKvLayout() for kMtp; none for
  // kMtp on DeepSeek-V4, whose kv then holds the MTP block's windowed plane, ModelConfig::Dsv4Layout(true)).
  ModelExecutor(const Model& model, std::unique_ptr<PagedKvCache> kv, TokenTable* table, int max_batch_tokens,
                const EngineOptions& opt, std::unique_ptr<PagedKvCache> draft_kv = nullptr,
                std::unique_ptr<PagedKvCache> mtp_kv = nullptr, int max_rows = 0,
                const dist::DistContext* dist = nullptr);
  void Execute(WorkerStepState& st) override;
  int vocab_size() const override { return vocab_; }
  PagedKvCache& kv() { return *kv_; }
  // Whether a proposer for `m` was built (Engine::Create refuses an engine asked for one it lacks).
  bool HasProposer(SpecMethod m) const;
  // Online EPLB (--eplb-interval): rebalances before the forward of every interval-th step.
  void MaybeRebalance(uint64_t step);

 private:
  // Sets plans_ for every row: a dynamic row's start from slots_ and the most drafts it may take (k = 0; the
  // proposers add theirs).
  Status PlanRows(const SchedulerOutputs& so);
  // A sampling thread's buffers: the raw logits (log-probs), the penalty counts, the grammar mask.
  struct SampleScratch {
    std::vector<float> raw;
    std::vector<int32_t> counts;
    std::vector<uint32_t> mask_bits;
  };
  // Samples a plain row's token at `pos`: penalties, its grammar mask (the matcher synced to the table first),
  // the draw, the matcher advanced; the token is written into the table.
  void SampleRow(const SequenceMetadata& r, float* logits, int pos, SampledToken* out, SampleScratch* scratch);
  // SampleRow for every plain sampling row of the step, the rows spread over the compute pool.
  void SampleRows(const SchedulerOutputs& so, WorkerStepState& st);
  const dist::DistContext* dist_;  // the job's communicators (nullptr: one process)
  Transformer tf_;
  std::unique_ptr<PagedKvCache> kv_;
  TokenTable* table_;
  int vocab_;
  std::vector<SeqForward> fwd_;
  std::vector<float> logits_;
  std::vector<SampleScratch> scratch_;  // per compute-pool thread (SampleRows)
  std::vector<size_t> sample_rows_;
  int rebalances_ = 0;
  int64_t moved_slots_ = 0, moved_bytes_ = 0;

  std::vector<SlotState> slots_;
  std::vector<RowPlan> plans_;
  SpecVerifier verifier_;
  std::vector<std::unique_ptr<Proposer>> proposers_;  // n-gram always; the draft model and MTP when configured
  int hidden_width_ = 0;       // floats per position of the target's hidden states the proposers read (0: none)
  std::vector<float> hidden_;  // those hidden states, this step
};

}  // namespace deepinfer
