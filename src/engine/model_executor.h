// The CPU model executor: gathers a step's input tokens from the token table, runs the batched transformer
// over the paged K/V cache, then samples every sampling row (penalties read the device-view history in the
// token table) and writes the new token at (slot, position) for the next step to read.
#pragma once
#include <memory>
#include <vector>

#include "engine/grammar_mask.h"
#include "engine/engine_options.h"
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
  int32_t len = 0;        // tokens known in the table row (the next sampled token lands at position len)
  uint32_t gen = 0;       // the slot generation that wrote len (a dynamic row of another occupant is a bug)
  int32_t draft_len = 0;  // positions whose draft-model K/V is valid
  int32_t mtp_for = -1;   // mtp_drafts were proposed for a row starting at this length (-1: none)
  std::vector<int32_t> mtp_drafts;
  std::vector<float> mtp_hidden;  // the module's output at the pair that proposed mtp_drafts[0] (chaining)
  std::vector<FilteredDistribution> mtp_q;  // their distributions (rejection verification)
};

// The speculative parts of a step, per row (planned before the forward).
struct RowPlan {
  int begin = 0, n = 0;   // positions [begin, begin + n) run through the target
  int k = 0;              // drafts proposed (the row verifies k and samples k + 1 tokens)
  int kmax = 0;           // most drafts the row may take
  bool skip = false;      // a dynamic row whose sequence already reached its limit on the device
  int logit_row = -1;     // first logits row
  int hidden_row = -1;    // first row of the forward batch (its hidden states, for MTP)
  std::vector<FilteredDistribution> q;  // the draft's distribution at each draft (rejection verification)
};

class ModelExecutor : public Executor {
 public:
  // opt: the engine's options (the speculative ones are read here); draft_kv / mtp_kv: speculative decoding
  // (draft_kv with the target's block count when opt.draft is set; mtp_kv from MtpKvLayout() for kMtp).
  ModelExecutor(const Model& model, std::unique_ptr<PagedKvCache> kv, TokenTable* table, int max_batch_tokens,
                const EngineOptions& opt, std::unique_ptr<PagedKvCache> draft_kv = nullptr,
                std::unique_ptr<PagedKvCache> mtp_kv = nullptr, int max_rows = 0,
                const dist::DistContext* dist = nullptr);
  void Execute(WorkerStepState& st) override;
  int vocab_size() const override { return vocab_; }
  PagedKvCache& kv() { return *kv_; }
  // Online EPLB (--eplb-interval): rebalances before the forward of every interval-th step.
  void MaybeRebalance(uint64_t step);

 private:
  // Sets plans_ for every row: dynamic rows' start from slots_, n-gram and MTP drafts written into the table.
  Status PlanRows(const SchedulerOutputs& so);
  // The draft model: catches its cache up with every row, then proposes for kDraft rows (k rounds).
  Status RunDraft(const SchedulerOutputs& so);
  // Samples a dynamic row's 1 + k positions from its logits, accepting drafts (exact or rejection).
  void VerifyRow(const SequenceMetadata& r, RowPlan& plan, const float* logits, VerifiedRun* run);
  // Proposes the row's next draft from the proposer's logits (into the token table, n updated); true while the
  // row wants more.
  bool AppendDraft(const SequenceMetadata& r, float* logits, RowPlan* plan);
  // Samples the draft's token at `pos` from its logits (penalties applied; rejection keeps q).
  int32_t DraftSample(const SequenceMetadata& r, float* logits, int pos, FilteredDistribution* q);
  // MTP: feeds the newly committed pairs of every row through the module and proposes the next step's drafts.
  Status RunMtp(const SchedulerOutputs& so);
  // MTP rows with k > 1: chains the module on its own output from the first draft (k - 1 rounds).
  Status MtpChain(const SchedulerOutputs& so);
  // A rejected draft's replacement: the target's distribution minus the draft's, positive part (q null: the
  // n-gram proposer's point mass at `draft`).
  int32_t DrawResidual(const FilteredDistribution& p, const FilteredDistribution* q, int32_t draft, float u);
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
  std::vector<float> logits_, raw_;
  std::vector<int32_t> counts_;
  std::vector<uint32_t> mask_bits_;  // speculative rows (sampled serially)
  std::vector<SampleScratch> scratch_;  // per compute-pool thread (SampleRows)
  std::vector<size_t> sample_rows_;
  int rebalances_ = 0;
  int64_t moved_slots_ = 0, moved_bytes_ = 0;

  EngineOptions opt_;  // the engine's; the speculative fields (proposer, k, n-gram lengths, verification, draft) are read here
  std::vector<SlotState> slots_;
  std::vector<RowPlan> plans_;
  std::unique_ptr<Transformer> draft_tf_;
  std::unique_ptr<PagedKvCache> draft_kv_, mtp_kv_;
  std::vector<float> draft_logits_, hidden_, mtp_hidden_, mtp_logits_;
  std::vector<SeqForward> draft_fwd_;
  std::vector<double> q_dense_;
  std::vector<float> mtp_in_hidden_;
};

}  // namespace deepinfer
