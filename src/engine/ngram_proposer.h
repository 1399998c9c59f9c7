// The n-gram proposer (prompt lookup, ProposeNgram): drafts read from the row's own history in the token table.
// It keeps nothing between steps.
#pragma once
#include "engine/proposer.h"
#include "engine/speculative.h"
#include "engine/token_table.h"

namespace deepinfer {

class NgramProposer : public Proposer {
 public:
  NgramProposer(TokenTable* table, const SpeculativeOptions& opt) : table_(table), opt_(opt) {}
  SpecMethod method() const override { return SpecMethod::kNgram; }
  Status Propose(const SchedulerOutputs& so, std::vector<RowPlan>& plans) override;
  Status AfterVerify(const SchedulerOutputs&, const std::vector<RowPlan>&, const float*,
                     std::vector<VerifiedRun>*) override {
    return Status::Ok();
  }

 private:
  TokenTable* table_;
  SpeculativeOptions opt_;
};

}  // namespace deepinfer
