#include "engine/spec_verifier.h"

#include <algorithm>

#include "engine/grammar_mask.h"
#include "grammar/matcher.h"
#include "sample/philox.h"

namespace deepinfer {

int32_t SpecVerifier::DraftSample(const SequenceMetadata& r, float* logits, int pos, FilteredDistribution* q) {
  const int32_t* hist = table_->row(r.slot);
  const SamplingParams& sp = *r.sampling;
  ApplyPenalties(logits, vocab_, sp, hist, pos, r.prompt_len, &counts_);
  if (sp.greedy()) return ArgMax(logits, vocab_);
  if (rejection()) {
    *q = Filter(logits, vocab_, sp);
    return DrawFrom(*q, UniformAt(sp.seed.value_or(0), static_cast<uint64_t>(pos), r.sample_index | kDraftSubstream));
  }
  // Exact verification: the draft draws with the target's own random number at this position, so a draft whose
  // distribution is close to the target's proposes the token the target will choose (a coupling).
  return SampleToken(logits, vocab_, sp, static_cast<uint64_t>(pos), r.sample_index);
}

bool SpecVerifier::AppendDraft(const SequenceMetadata& r, float* logits, RowPlan* plan) {
  const int pos = plan->begin + 1 + plan->k;
  FilteredDistribution q;
  table_->row(r.slot)[pos] = DraftSample(r, logits, pos, &q);
  if (rejection()) plan->q.push_back(std::move(q));
  ++plan->k;
  plan->n = 1 + plan->k;
  return plan->k < plan->kmax;
}

int32_t SpecVerifier::DrawResidual(const FilteredDistribution& p, const FilteredDistribution* q, int32_t draft,
                                   float u) {
  q_dense_.resize(vocab_, 0.0);
  if (q) {
    for (size_t i = 0; i < q->ids.size(); ++i) q_dense_[q->ids[i]] = q->prob[i] / q->total;
  } else {
    q_dense_[draft] = 1.0;
  }
  FilteredDistribution res;
  res.ids = p.ids;
  res.prob.resize(p.ids.size());
  for (size_t i = 0; i < p.ids.size(); ++i) {
    res.prob[i] = std::max(0.0, p.prob[i] / p.total - q_dense_[p.ids[i]]);
    res.total += res.prob[i];
  }
  if (q) {
    for (int32_t id : q->ids) q_dense_[id] = 0.0;
  } else {
    q_dense_[draft] = 0.0;
  }
  return res.total > 0 ? DrawFrom(res, u) : DrawFrom(p, u);
}

void SpecVerifier::VerifyRow(const SequenceMetadata& r, const RowPlan& plan, const float* logits_in, VerifiedRun* run) {
  int32_t* hist = table_->row(r.slot);
  const SamplingParams& sp = *r.sampling;
  const bool by_rejection = rejection() && !sp.greedy();
  run->begin = plan.begin;
  run->proposed = plan.k;
  float* logits = const_cast<float*>(logits_in);
  for (int j = 0; j <= plan.k; ++j) {
    const int pos = plan.begin + 1 + j;
    float* lg = logits + static_cast<size_t>(j) * vocab_;
    SampledToken out;
    if (r.logprobs >= 0) raw_.assign(lg, lg + vocab_);
    // Penalties and the grammar see the drafts before `pos` as history: they are the committed tokens
    // whenever this position's result is used (every draft before it was accepted).
    ApplyPenalties(lg, vocab_, sp, hist, pos, r.prompt_len, &counts_);
    const bool constrained =
        r.matcher && ConstrainRow(r.matcher, r.gate, hist, r.prompt_len, pos, lg, vocab_, &mask_bits_);
    const bool drafted = j < plan.k;
    bool accept = false;
    if (drafted && by_rejection) {
      const int32_t d = hist[pos];
      const FilteredDistribution P = Filter(lg, vocab_, sp);
      const FilteredDistribution* q = static_cast<int>(plan.q.size()) > j ? &plan.q[j] : nullptr;
      const double p_d = P.Prob(d), q_d = q ? q->Prob(d) : 1.0;
      const float u = UniformAt(sp.seed.value_or(0), static_cast<uint64_t>(pos), r.sample_index | kAcceptSubstream);
      if (q_d > 0 && static_cast<double>(u) * q_d < p_d) {
        out.token = d;
        accept = true;
      } else {
        out.token = DrawResidual(P, q, d, UniformAt(sp.seed.value_or(0), static_cast<uint64_t>(pos), r.sample_index));
      }
    } else {
      out.token = SampleToken(lg, vocab_, sp, static_cast<uint64_t>(pos), r.sample_index);
      accept = drafted && out.token == hist[pos];
    }
    if (constrained) r.matcher->AcceptToken(out.token);
    if (r.logprobs >= 0) {
      TopLogprobs lp = ComputeLogprobs(raw_.data(), vocab_, out.token, r.logprobs);
      out.logprob = lp.logprob;
      out.top = std::move(lp.top);
    }
    hist[pos] = out.token;
    run->tokens.push_back(std::move(out));
    if (!accept) break;
    ++run->accepted;
  }
}

}  // namespace deepinfer
