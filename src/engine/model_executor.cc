#include "engine/model_executor.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "base/logging.h"
#include "base/thread_pool.h"
#include "dist/parallel.h"
#include "engine/draft_model_proposer.h"
#include "engine/grammar_mask.h"
#include "engine/mtp_proposer.h"
#include "engine/ngram_proposer.h"
#include "grammar/matcher.h"

namespace deepinfer {

ModelExecutor::ModelExecutor(const Model& model, std::unique_ptr<PagedKvCache> kv, TokenTable* table,
                             int max_batch_tokens, const EngineOptions& opt,
                             std::unique_ptr<PagedKvCache> draft_kv, std::unique_ptr<PagedKvCache> mtp_kv, int max_rows,
                             const dist::DistContext* dist)
    : dist_(dist), tf_(model, max_batch_tokens, dist), kv_(std::move(kv)), table_(table), vocab_(model.config.vocab_size),
      slots_(table->num_slots()), verifier_(table, vocab_, opt.spec_verify) {
  // Proposers are made once, for what the engine was started with; a request picks its method (spec_method)
  // among them. The n-gram proposer needs nothing, so any request may ask for it.
  proposers_.push_back(std::make_unique<NgramProposer>(table, opt.ngram_min, opt.ngram_max));
  if (opt.draft)
    proposers_.push_back(std::make_unique<DraftModelProposer>(*opt.draft, std::move(draft_kv), table, &verifier_,
                                                              max_batch_tokens, max_rows));
  if (mtp_kv) {
    proposers_.push_back(std::make_unique<MtpProposer>(&tf_, std::move(mtp_kv), table, &verifier_));
  } else if (opt.speculative == SpecMethod::kMtp && kv_->layout().mtp_first_layer >= 0) {
    // DeepSeek-V4: the module's K=V rows are the main cache's windowed MTP plane (ModelConfig::Dsv4Layout(true)).
    proposers_.push_back(std::make_unique<MtpProposer>(&tf_, nullptr, table, &verifier_, kv_.get()));
  }
  for (const auto& p : proposers_) hidden_width_ = std::max(hidden_width_, p->hidden_width());
}

bool ModelExecutor::HasProposer(SpecMethod m) const {
  for (const auto& p : proposers_)
    if (p->method() == m) return true;
  return false;
}

Status ModelExecutor::PlanRows(const SchedulerOutputs& so) {
  plans_.assign(so.rows.size(), RowPlan{});
  const int bs = kv_->block_size();
  for (size_t i = 0; i < so.rows.size(); ++i) {
    const SequenceMetadata& r = so.rows[i];
    RowPlan& plan = plans_[i];
    if (!r.dynamic) {
      plan.begin = r.q_begin;
      plan.n = r.q_len;
      continue;
    }
    SlotState& ss = slots_[r.slot];
    if (ss.gen != r.slot_gen || ss.len <= 0)
      return Internal("executor: dynamic row for slot " + std::to_string(r.slot) + " with no committed length");
    const int len = ss.len, b = len - 1;
    if (len >= r.end_limit) {  // reached max_tokens / the context on the device: the host will see a ghost
      plan.skip = true;
      continue;
    }
    plan.begin = b;
    plan.kmax = std::max(0, std::min({r.spec_k, r.end_limit - len - 1, static_cast<int>(r.num_blocks) * bs - 1 - b,
                                      r.q_len - 1}));
    plan.n = 1;  // the input position; the proposers add their drafts (Proposer::Propose)
  }
  return Status::Ok();
}

void ModelExecutor::MaybeRebalance(uint64_t step) {
  const dist::DistContext* d = dist_;
  if (!d || d->pc.eplb_interval <= 0 || !tf_.expert_parallel() || step % d->pc.eplb_interval != 0) return;
  // Every rank runs the same steps, so every rank rebalances here, before the same forward.
  auto rep = tf_.RebalanceExperts();
  if (!rep.ok()) d->FailJob("EPLB rebalance: " + rep.status().ToString());
  ++rebalances_;
  moved_slots_ += rep->moved_slots;
  moved_bytes_ += rep->bytes_sent;
  if (d->pc.rank == 0)
    DI_LOG_INFO("EPLB: step %llu: %lld routed pairs counted, worst layer max/mean rank load %.3f -> %.3f, %d expert "
                "slots moved (%lld over %d rebalances); %d experts sent between ranks over MPI (%.3f MB, %.3f MB in all)",
                static_cast<unsigned long long>(step), static_cast<long long>(rep->pairs), rep->imbalance_before,
                rep->imbalance_after, rep->moved_slots, static_cast<long long>(moved_slots_), rebalances_,
                rep->experts_sent, rep->bytes_sent / 1e6, moved_bytes_ / 1e6);
}

void ModelExecutor::SampleRows(const SchedulerOutputs& so, WorkerStepState& st) {
  sample_rows_.clear();
  for (size_t i = 0; i < so.rows.size(); ++i) {
    const SequenceMetadata& r = so.rows[i];
    if (r.samples && !plans_[i].skip && !r.dynamic) sample_rows_.push_back(i);
  }
  // Each row depends only on its own logits, history, sampling state and matcher, so the rows spread over the
  // compute pool (one scratch per thread); a row's token is the same whichever thread samples it.
  auto sample = [&](size_t i, SampleScratch* scratch) {
    const SequenceMetadata& r = so.rows[i];
    float* logits = logits_.data() + static_cast<size_t>(plans_[i].logit_row) * vocab_;
    SampleRow(r, logits, r.q_begin + r.q_len, &st.out.rows[i], scratch);
  };
  const int threads = sample_rows_.size() < 2 ? 1 : ComputePool().size();
  if (scratch_.size() < static_cast<size_t>(threads)) scratch_.resize(threads);
  if (threads == 1) {
    for (size_t i : sample_rows_) sample(i, &scratch_[0]);
    return;
  }
  ComputePool().Run([&](int tid, int nthreads) {
    for (size_t j = static_cast<size_t>(tid); j < sample_rows_.size(); j += static_cast<size_t>(nthreads))
      sample(sample_rows_[j], &scratch_[tid]);
  });
}

void ModelExecutor::SampleRow(const SequenceMetadata& r, float* logits, int pos, SampledToken* out,
                              SampleScratch* scratch) {
  int32_t* hist = table_->row(r.slot);
  // Log-probs are reported from the model's distribution (before penalties and temperature), as vLLM does.
  if (r.logprobs >= 0) scratch->raw.assign(logits, logits + vocab_);
  ApplyPenalties(logits, vocab_, *r.sampling, hist, pos, r.prompt_len, &scratch->counts);
  // The grammar mask for this position depends on the token sampled at the previous one, which this
  // executor wrote into the token table itself: the overlap loop never waits on the host for it.
  const bool constrained =
      r.matcher && ConstrainRow(r.matcher, r.gate, hist, r.prompt_len, pos, logits, vocab_, &scratch->mask_bits);
  out->token = SampleToken(logits, vocab_, *r.sampling, static_cast<uint64_t>(pos), r.sample_index);
  if (constrained) r.matcher->AcceptToken(out->token);
  if (r.logprobs >= 0) {
    TopLogprobs lp = ComputeLogprobs(scratch->raw.data(), vocab_, out->token, r.logprobs);
    out->logprob = lp.logprob;
    out->top = std::move(lp.top);
  }
  hist[pos] = out->token;
}

void ModelExecutor::Execute(WorkerStepState& st) {
  const SchedulerOutputs& so = st.sched;
  MaybeRebalance(so.step);
  st.out.rows.assign(so.rows.size(), SampledToken{});
  st.out.runs.assign(so.rows.size(), VerifiedRun{});
  st.status = PlanRows(so);
  if (!st.status.ok()) return;
  // Stage 1, proposal: drafts into the token table after each dynamic row's input position.
  for (const auto& p : proposers_) {
    st.status = p->Propose(so, plans_);
    if (!st.status.ok()) return;
  }
  fwd_.clear();
  int logit_rows = 0, hidden_rows = 0;
  for (size_t i = 0; i < so.rows.size(); ++i) {
    const SequenceMetadata& r = so.rows[i];
    RowPlan& plan = plans_[i];
    if (plan.skip) continue;
    SeqForward f = RowForward(so, r, table_->row(r.slot) + plan.begin, plan.begin, plan.n, r.samples);
    f.all_logits = r.dynamic && plan.k > 0;  // verify rows: the target's distribution at every draft
    plan.hidden_row = hidden_rows;
    hidden_rows += f.n;
    if (f.want_logits) {
      plan.logit_row = logit_rows;
      logit_rows += f.all_logits ? f.n : 1;
    }
    fwd_.push_back(f);
  }
  logits_.resize(static_cast<size_t>(logit_rows) * vocab_);
  if (hidden_width_ > 0) hidden_.resize(static_cast<size_t>(so.num_tokens + 1) * hidden_width_);
  // Even with no rows: multi-process steps are collective (an empty batch still takes part in the MoE exchange).
  st.status = tf_.ForwardBatch(fwd_.data(), static_cast<int>(fwd_.size()), *kv_, logits_.data(),
                               hidden_width_ > 0 ? hidden_.data() : nullptr);
  // A failed collective leaves the ranks out of step: the job cannot go on (the engine would only abort rows).
  if (!st.status.ok() && dist_) dist_->FailJob("forward: " + st.status.ToString());
  if (!st.status.ok()) return;
  SampleRows(so, st);
  // Stage 2, verification: each verify row commits its accepted drafts and the target's own next token.
  for (size_t i = 0; i < so.rows.size(); ++i) {
    const SequenceMetadata& r = so.rows[i];
    RowPlan& plan = plans_[i];
    if (!(r.samples || r.hands_over) || plan.skip) continue;
    SlotState& ss = slots_[r.slot];
    if (r.dynamic) {
      VerifiedRun& run = st.out.runs[i];
      verifier_.VerifyRow(r, plan, logits_.data() + static_cast<size_t>(plan.logit_row) * vocab_, &run);
      ss.len = plan.begin + 1 + static_cast<int>(run.tokens.size());
      run.kv_end = ss.len - 1;  // the input position and the accepted drafts (a proposer's cache may lower it)
    } else {
      // Sampled above (SampleRows) at position q_begin + q_len, or known to the host (a hand-over chunk).
      ss.len = r.q_begin + r.q_len + 1;
    }
    ss.gen = r.slot_gen;
    plan.committed = ss.len;
  }
  // Stage 3: the proposers see what was committed (their caches' valid extents, MTP's next first drafts).
  for (const auto& p : proposers_) {
    st.status = p->AfterVerify(so, plans_, hidden_.data(), &st.out.runs);
    if (!st.status.ok()) return;
  }
}

}  // namespace deepinfer
