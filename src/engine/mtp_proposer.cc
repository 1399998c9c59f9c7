#include "engine/mtp_proposer.h"

#include <algorithm>

#include "engine/spec_verifier.h"

namespace deepinfer {

MtpProposer::MtpProposer(Transformer* target, std::unique_ptr<PagedKvCache> kv, TokenTable* table,
                         SpecVerifier* verifier, PagedKvCache* main_kv)
    : tf_(target), own_kv_(std::move(kv)), kv_(own_kv_ ? own_kv_.get() : main_kv), table_(table), verifier_(verifier),
      vocab_(target->model().config.vocab_size), hidden_(target->model().config.mtp_hidden()),
      slots_(table->num_slots()) {}

Status MtpProposer::Propose(const SchedulerOutputs& so, std::vector<RowPlan>& plans) {
  for (size_t i = 0; i < so.rows.size(); ++i) {
    const SequenceMetadata& r = so.rows[i];
    RowPlan& plan = plans[i];
    const int len = plan.begin + 1;
    const SlotDrafts& s = slots_[r.slot];
    // Only drafts proposed for the length the row starts at (by the step that committed it).
    if (!Owns(r, plan) || s.for_len != len || s.drafts.empty()) continue;
    table_->row(r.slot)[len] = s.drafts[0];
    plan.k = 1;
    if (verifier_->rejection()) plan.q.push_back(s.q[0]);
    plan.n = 1 + plan.k;
  }
  return Chain(so, plans);
}

Status MtpProposer::Chain(const SchedulerOutputs& so, std::vector<RowPlan>& plans) {
  const int H = hidden_;
  std::vector<int> chaining;
  std::vector<std::vector<float>> prev(so.rows.size());
  for (size_t i = 0; i < so.rows.size(); ++i) {
    const RowPlan& plan = plans[i];
    if (Owns(so.rows[i], plan) && plan.k == 1 && plan.kmax > 1) {
      chaining.push_back(static_cast<int>(i));
      prev[i] = slots_[so.rows[i].slot].hidden;
    }
  }
  std::vector<SeqForward> rows;
  while (!chaining.empty()) {
    rows.clear();
    in_hidden_.clear();
    for (int i : chaining) {
      const SequenceMetadata& r = so.rows[i];
      const RowPlan& plan = plans[i];
      // Pair (the module's previous output, the newest draft at position begin + k) at position begin + k - 1.
      rows.push_back(RowForward(so, r, table_->row(r.slot) + plan.begin + plan.k, plan.begin + plan.k - 1, 1, true));
      in_hidden_.insert(in_hidden_.end(), prev[i].begin(), prev[i].end());
    }
    logits_.resize(rows.size() * static_cast<size_t>(vocab_));
    out_hidden_.resize(rows.size() * static_cast<size_t>(H));
    DI_RETURN_IF_ERROR(tf_->ForwardMtp(0, rows.data(), static_cast<int>(rows.size()), in_hidden_.data(), *kv_,
                                       logits_.data(), out_hidden_.data()));
    std::vector<int> next;
    for (size_t j = 0; j < chaining.size(); ++j) {
      const int i = chaining[j];
      const bool more = verifier_->AppendDraft(so.rows[i], logits_.data() + j * static_cast<size_t>(vocab_), &plans[i]);
      prev[i].assign(out_hidden_.data() + j * static_cast<size_t>(H), out_hidden_.data() + (j + 1) * static_cast<size_t>(H));
      if (more) next.push_back(i);
    }
    chaining.swap(next);
  }
  return Status::Ok();
}

Status MtpProposer::AfterVerify(const SchedulerOutputs& so, const std::vector<RowPlan>& plans, const float* hidden,
                                std::vector<VerifiedRun>*) {
  // Each row's newly known pairs (h_p, token p + 1) go through the module, keeping its cache complete, whatever
  // the row's method (a block the prefix cache hands on holds the module's K/V too); for a speculating row the
  // last pair's logits give the first draft of its next step.
  const int H = hidden_;
  std::vector<SeqForward> rows;
  std::vector<int> owner, proposing;
  in_hidden_.clear();
  for (size_t i = 0; i < so.rows.size(); ++i) {
    const SequenceMetadata& r = so.rows[i];
    const RowPlan& plan = plans[i];
    if (plan.skip || plan.hidden_row < 0) continue;
    SlotDrafts& s = slots_[r.slot];
    // A sampling row knows its committed tokens; a prefill chunk the prompt token after its last position.
    const int known_end = r.samples ? plan.committed : plan.begin + plan.n + 1;
    const int p0 = plan.begin, p1 = std::min(plan.begin + plan.n, known_end - 1);
    if (p1 <= p0) continue;
    // Every sampling row of an MTP sequence proposes (whatever k the scheduler left this step: the next may
    // differ), and so does a recompute's hand-over chunk, for the verify row that continues it.
    const SeqForward f = RowForward(so, r, table_->row(r.slot) + p0 + 1, p0, p1 - p0,
                                    (r.samples || r.hands_over) &&
                                        static_cast<SpecMethod>(r.spec_method) == SpecMethod::kMtp);
    const float* h = hidden + static_cast<size_t>(plan.hidden_row) * H;
    in_hidden_.insert(in_hidden_.end(), h, h + static_cast<size_t>(f.n) * H);
    s.for_len = -1;
    if (f.want_logits) proposing.push_back(static_cast<int>(i));
    owner.push_back(static_cast<int>(i));
    rows.push_back(f);
  }
  if (rows.empty()) return Status::Ok();
  int total = 0;
  for (const SeqForward& f : rows) total += f.n;
  logits_.resize(static_cast<size_t>(std::max<size_t>(proposing.size(), 1)) * vocab_);
  out_hidden_.resize(static_cast<size_t>(total) * H);
  DI_RETURN_IF_ERROR(tf_->ForwardMtp(0, rows.data(), static_cast<int>(rows.size()), in_hidden_.data(), *kv_,
                                     logits_.data(), out_hidden_.data()));
  int hrow = 0;
  size_t li = 0;
  for (size_t j = 0; j < rows.size(); ++j) {
    hrow += rows[j].n;
    if (!rows[j].want_logits) continue;
    const SequenceMetadata& r = so.rows[owner[j]];
    const int len = plans[owner[j]].committed;
    SlotDrafts& s = slots_[r.slot];
    FilteredDistribution q;
    const int32_t d = verifier_->DraftSample(r, logits_.data() + li++ * static_cast<size_t>(vocab_), len, &q);
    s.drafts.assign(1, d);
    s.q.clear();
    if (verifier_->rejection()) s.q.push_back(std::move(q));
    const float* last = out_hidden_.data() + static_cast<size_t>(hrow - 1) * H;
    s.hidden.assign(last, last + H);
    s.for_len = len;
  }
  return Status::Ok();
}

}  // namespace deepinfer
