#include "engine/worker.h"

#include <cstring>

#include "base/logging.h"
#include "dist/parallel.h"

namespace deepinfer {

ModelExecutor::ModelExecutor(const Model& model, std::unique_ptr<PagedKvCache> kv, TokenTable* table,
                             int max_batch_tokens)
    : tf_(model, max_batch_tokens), kv_(std::move(kv)), table_(table), vocab_(model.config.vocab_size) {}

void ModelExecutor::MaybeRebalance(uint64_t step) {
  const dist::DistContext* d = dist::Context();
  if (!d || d->pc.eplb_interval <= 0 || !tf_.expert_parallel() || step % d->pc.eplb_interval != 0) return;
  // Every rank runs the same steps, so every rank rebalances here, before the same forward.
  auto rep = tf_.RebalanceExperts();
  if (!rep.ok()) dist::AbortJob("EPLB rebalance: " + rep.status().ToString());
  ++rebalances_;
  moved_slots_ += rep->moved_slots;
  if (d->pc.rank == 0)
    DI_LOG_INFO("EPLB: step %llu: %lld routed pairs counted, worst layer max/mean rank load %.3f -> %.3f, %d expert "
                "slots moved (%lld over %d rebalances)",
                static_cast<unsigned long long>(step), static_cast<long long>(rep->pairs), rep->imbalance_before,
                rep->imbalance_after, rep->moved_slots, static_cast<long long>(moved_slots_), rebalances_);
}

void ModelExecutor::Execute(WorkerStepState& st) {
  const SchedulerOutputs& so = st.sched;
  MaybeRebalance(so.step);
  fwd_.clear();
  int sampling_rows = 0;
  for (const SequenceMetadata& r : so.rows) {
    SeqForward f;
    f.tokens = table_->row(r.slot) + r.q_begin;
    f.n = r.q_len;
    f.start = r.q_begin;
    f.block_table = so.block_tables.data() + r.block_table_off;
    f.num_blocks = static_cast<int>(r.num_blocks);
    f.want_logits = r.samples;
    sampling_rows += r.samples;
    fwd_.push_back(f);
  }
  logits_.resize(static_cast<size_t>(sampling_rows) * vocab_);
  st.out.rows.assign(so.rows.size(), SampledToken{});
  st.status = tf_.ForwardBatch(fwd_.data(), static_cast<int>(fwd_.size()), *kv_, logits_.data());
  if (!st.status.ok()) return;
  int li = 0;
  for (size_t i = 0; i < so.rows.size(); ++i) {
    const SequenceMetadata& r = so.rows[i];
    if (!r.samples) continue;
    float* logits = logits_.data() + static_cast<size_t>(li++) * vocab_;
    const int pos = r.q_begin + r.q_len;  // the position the new token will occupy
    int32_t* hist = table_->row(r.slot);
    SampledToken& out = st.out.rows[i];
    // Log-probs are reported from the model's distribution (before penalties and temperature), as vLLM does.
    if (r.logprobs >= 0) raw_.assign(logits, logits + vocab_);
    ApplyPenalties(logits, vocab_, *r.sampling, hist, pos, r.prompt_len, &counts_);
    out.token = SampleToken(logits, vocab_, *r.sampling, static_cast<uint64_t>(pos), r.sample_index);
    if (r.logprobs >= 0) {
      TopLogprobs lp = ComputeLogprobs(raw_.data(), vocab_, out.token, r.logprobs);
      out.logprob = lp.logprob;
      out.top = std::move(lp.top);
    }
    hist[pos] = out.token;
  }
}

}  // namespace deepinfer
