#include "engine/draft_model_proposer.h"

#include <algorithm>

#include "engine/spec_verifier.h"

namespace deepinfer {

// The draft also catches up, per decoding row, the committed tokens it has not seen (up to 1 + k).
DraftModelProposer::DraftModelProposer(const Model& draft, std::unique_ptr<PagedKvCache> kv, TokenTable* table,
                                       SpecVerifier* verifier, int max_batch_tokens, int max_rows)
    : table_(table), verifier_(verifier), tf_(draft, max_batch_tokens + max_rows * (1 + kMaxSpecTokens), nullptr),
      kv_(std::move(kv)), vocab_(draft.config.vocab_size), draft_len_(table->num_slots()) {}

Status DraftModelProposer::Propose(const SchedulerOutputs& so, std::vector<RowPlan>& plans) {
  // Round 0: every row brings the draft's cache up to the target's (prefill chunks, committed tokens the draft
  // has not seen), whatever its method, so a block the prefix cache hands to a drafting sequence later holds the
  // draft's K/V too; rows that propose ask for the last position's logits.
  fwd_.clear();
  std::vector<int> proposing;
  for (size_t i = 0; i < so.rows.size(); ++i) {
    const SequenceMetadata& r = so.rows[i];
    const RowPlan& plan = plans[i];
    if (plan.skip) continue;
    int32_t& draft_len = draft_len_[r.slot];
    // A dynamic row's input position is its last committed token: the draft needs everything up to it.
    const int start = r.dynamic ? std::clamp(draft_len, 0, plan.begin) : plan.begin;
    const int end = r.dynamic ? plan.begin + 1 : plan.begin + plan.n;
    const bool propose = Owns(r, plan);
    fwd_.push_back(RowForward(so, r, table_->row(r.slot) + start, start, end - start, propose));
    draft_len = end;
    if (propose) proposing.push_back(static_cast<int>(i));
  }
  logits_.resize(static_cast<size_t>(std::max<size_t>(proposing.size(), 1)) * vocab_);
  if (!fwd_.empty())
    DI_RETURN_IF_ERROR(tf_.ForwardBatch(fwd_.data(), static_cast<int>(fwd_.size()), *kv_, logits_.data()));
  // Rounds 1..: each proposing row feeds its newest draft until it has kmax of them.
  for (size_t round = 0; !proposing.empty(); ++round) {
    if (round > 0) {
      fwd_.clear();
      for (int i : proposing) {
        const SequenceMetadata& r = so.rows[i];
        const int start = plans[i].begin + plans[i].k;
        fwd_.push_back(RowForward(so, r, table_->row(r.slot) + start, start, 1, true));
      }
      DI_RETURN_IF_ERROR(tf_.ForwardBatch(fwd_.data(), static_cast<int>(fwd_.size()), *kv_, logits_.data()));
    }
    std::vector<int> next;
    for (size_t j = 0; j < proposing.size(); ++j) {
      const int i = proposing[j];
      if (verifier_->AppendDraft(so.rows[i], logits_.data() + j * static_cast<size_t>(vocab_), &plans[i]))
        next.push_back(i);
    }
    proposing.swap(next);
  }
  return Status::Ok();
}

Status DraftModelProposer::AfterVerify(const SchedulerOutputs& so, const std::vector<RowPlan>& plans, const float*,
                                       std::vector<VerifiedRun>* runs) {
  for (size_t i = 0; i < so.rows.size(); ++i) {
    const SequenceMetadata& r = so.rows[i];
    const RowPlan& plan = plans[i];
    if (!r.samples || plan.skip || !r.dynamic) continue;
    VerifiedRun& run = (*runs)[i];
    // The draft's cache holds the drafts it was fed (positions begin + 1 .. begin + k - 1): valid while accepted.
    if (Owns(r, plan) && plan.k > 0) draft_len_[r.slot] = plan.begin + 1 + std::min(run.accepted, plan.k - 1);
    // kv_end is what every cache holds verified (prefix caching publishes it): the draft's may hold less.
    run.kv_end = std::min(run.kv_end, draft_len_[r.slot]);
  }
  return Status::Ok();
}

}  // namespace deepinfer
