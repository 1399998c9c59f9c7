// The verification stage of the model executor's step (engine/speculative.h): a verify row's 1 + k positions
// sampled from the target's logits, drafts accepted exactly (equal to the target's own choice) or by rejection
// sampling; and the draft draws the proposers make from their own logits, which verification is built around
// (the coupling of exact verification, the draft's distribution q for rejection).
#pragma once
#include <cstdint>
#include <vector>

#include "engine/proposer.h"
#include "engine/speculative.h"
#include "engine/step.h"
#include "engine/token_table.h"
#include "sample/sampler.h"

namespace deepinfer {

class SpecVerifier {
 public:
  SpecVerifier(TokenTable* table, int vocab, SpecVerify mode) : table_(table), vocab_(vocab), mode_(mode) {}
  bool rejection() const { return mode_ == SpecVerify::kRejection; }
  // Samples a dynamic row's 1 + k positions from its logits (k + 1 rows), accepting drafts (exact or rejection);
  // the committed tokens are written into the token table and into run.
  void VerifyRow(const SequenceMetadata& r, const RowPlan& plan, const float* logits, VerifiedRun* run);
  // Samples the draft's token at `pos` from a proposer's logits (penalties applied; rejection keeps q).
  int32_t DraftSample(const SequenceMetadata& r, float* logits, int pos, FilteredDistribution* q);
  // Proposes the row's next draft from a proposer's logits (into the token table, k and n updated); true while
  // the row wants more.
  bool AppendDraft(const SequenceMetadata& r, float* logits, RowPlan* plan);

 private:
  // A rejected draft's replacement: the target's distribution minus the draft's, positive part (q null: the
  // n-gram proposer's point mass at `draft`).
  int32_t DrawResidual(const FilteredDistribution& p, const FilteredDistribution* q, int32_t draft, float u);
  TokenTable* table_;
  int vocab_;
  SpecVerify mode_;
  // Scratch (speculative rows are sampled serially): the raw logits (log-probs), the penalty counts, the grammar
  // mask, the draft's distribution over the whole vocabulary (DrawResidual).
  std::vector<float> raw_;
  std::vector<int32_t> counts_;
  std::vector<uint32_t> mask_bits_;
  std::vector<double> q_dense_;
};

}  // namespace deepinfer
