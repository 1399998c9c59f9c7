// The n-gram proposer (prompt lookup, ProposeNgram): drafts read from the row's own history in the token table.
// It keeps nothing between steps.
#pragma once
#include "engine/proposer.h"
#include "engine/speculative.h"
#include "engine/token_table.h"

namespace deepinfer {

class NgramProposer : public Proposer {
 public:
  // Match lengths tried, longest first: n_max down to n_min (--ngram-max / --ngram-min).
  NgramProposer(TokenTable* table, int n_min, int n_max) : table_(table), n_min_(n_min), n_max_(n_max) {}
  SpecMethod method() const override { return SpecMethod::kNgram; }
  Status Propose(const SchedulerOutputs& so, std::vector<RowPlan>& plans) override;
  Status AfterVerify(const SchedulerOutputs&, const std::vector<RowPlan>&, const float*,
                     std::vector<VerifiedRun>*) override {
    return Status::Ok();
  }

 private:
  TokenTable* table_;
  int n_min_, n_max_;
};

}  // namespace deepinfer
