#include "engine/ngram_proposer.h"

namespace deepinfer {

Status NgramProposer::Propose(const SchedulerOutputs& so, std::vector<RowPlan>& plans) {
  for (size_t i = 0; i < so.rows.size(); ++i) {
    const SequenceMetadata& r = so.rows[i];
    RowPlan& plan = plans[i];
    if (!Owns(r, plan)) continue;
    // The history ends at the row's input position; the drafts go right after it. No draft distribution: under
    // rejection verification an n-gram draft is a point mass (SpecVerifier::DrawResidual).
    int32_t* hist = table_->row(r.slot);
    const int len = plan.begin + 1;
    plan.k = ProposeNgram(hist, len, n_min_, n_max_, plan.kmax, hist + len);
    plan.n = 1 + plan.k;
  }
  return Status::Ok();
}

}  // namespace deepinfer
