// The speculative half of the model executor (engine/speculative.h): row planning from the executor's own
// per-slot lengths, the proposers (n-gram, draft model, MTP) and verification.
#include <algorithm>
#include <cstring>

#include "engine/model_executor.h"
#include "grammar/matcher.h"
#include "sample/philox.h"

namespace deepinfer {
namespace {

// A forward row over positions [start, start + n) of row r's sequence (its block table), reading `tokens`.
SeqForward RowForward(const SchedulerOutputs& so, const SequenceMetadata& r, const int32_t* tokens, int start, int n,
                      bool want_logits) {
  SeqForward f;
  f.block_table = so.block_tables.data() + r.block_table_off;
  f.num_blocks = static_cast<int>(r.num_blocks);
  f.kv_cached_end = r.kv_cached_end;
  f.window_floor = r.window_floor;
  f.tokens = tokens;
  f.start = start;
  f.n = n;
  f.want_logits = want_logits;
  return f;
}

}  // namespace

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
    int32_t* hist = table_->row(r.slot);
    const SpecMethod method = static_cast<SpecMethod>(r.spec_method);
    if (plan.kmax > 0 && method == SpecMethod::kNgram) {
      plan.k = ProposeNgram(hist, len, opt_.ngram_min, opt_.ngram_max, plan.kmax, hist + len);
    } else if (plan.kmax > 0 && method == SpecMethod::kMtp && ss.mtp_for == len && !ss.mtp_drafts.empty()) {
      hist[len] = ss.mtp_drafts[0];
      plan.k = 1;
      if (opt_.spec_verify == SpecVerify::kRejection) plan.q.push_back(ss.mtp_q[0]);
    }
    plan.n = 1 + plan.k;
  }
  return Status::Ok();
}

int32_t ModelExecutor::DraftSample(const SequenceMetadata& r, float* logits, int pos, FilteredDistribution* q) {
  const int32_t* hist = table_->row(r.slot);
  const SamplingParams& sp = *r.sampling;
  ApplyPenalties(logits, vocab_, sp, hist, pos, r.prompt_len, &counts_);
  if (sp.greedy()) return ArgMax(logits, vocab_);
  if (opt_.spec_verify == SpecVerify::kRejection) {
    *q = Filter(logits, vocab_, sp);
    return DrawFrom(*q, UniformAt(sp.seed.value_or(0), static_cast<uint64_t>(pos), r.sample_index | kDraftSubstream));
  }
  // Exact verification: the draft draws with the target's own random number at this position, so a draft whose
  // distribution is close to the target's proposes the token the target will choose (a coupling).
  return SampleToken(logits, vocab_, sp, static_cast<uint64_t>(pos), r.sample_index);
}

bool ModelExecutor::AppendDraft(const SequenceMetadata& r, float* logits, RowPlan* plan) {
  const int pos = plan->begin + 1 + plan->k;
  FilteredDistribution q;
  table_->row(r.slot)[pos] = DraftSample(r, logits, pos, &q);
  if (opt_.spec_verify == SpecVerify::kRejection) plan->q.push_back(std::move(q));
  ++plan->k;
  plan->n = 1 + plan->k;
  return plan->k < plan->kmax;
}

Status ModelExecutor::RunDraft(const SchedulerOutputs& so) {
  // Round 0: every row brings the draft's cache up to the target's (prefill chunks, committed tokens the draft
  // has not seen); rows that propose ask for the last position's logits.
  draft_fwd_.clear();
  std::vector<int> proposing;
  for (size_t i = 0; i < so.rows.size(); ++i) {
    const SequenceMetadata& r = so.rows[i];
    RowPlan& plan = plans_[i];
    if (plan.skip) continue;
    SlotState& ss = slots_[r.slot];
    int32_t* hist = table_->row(r.slot);
    SeqForward f;
    f.block_table = so.block_tables.data() + r.block_table_off;
    f.num_blocks = static_cast<int>(r.num_blocks);
    f.kv_cached_end = r.kv_cached_end;
    f.window_floor = r.window_floor;
    if (!r.dynamic) {
      f.start = plan.begin;
      f.n = plan.n;
      ss.draft_len = plan.begin + plan.n;
    } else {
      f.start = std::clamp(ss.draft_len, 0, plan.begin);
      f.n = plan.begin + 1 - f.start;
      f.want_logits = static_cast<SpecMethod>(r.spec_method) == SpecMethod::kDraft && plan.kmax > 0;
      ss.draft_len = plan.begin + 1;
      if (f.want_logits) proposing.push_back(static_cast<int>(i));
    }
    f.tokens = hist + f.start;
    draft_fwd_.push_back(f);
  }
  const int V = vocab_;
  draft_logits_.resize(static_cast<size_t>(std::max<size_t>(proposing.size(), 1)) * V);
  if (!draft_fwd_.empty())
    DI_RETURN_IF_ERROR(draft_tf_->ForwardBatch(draft_fwd_.data(), static_cast<int>(draft_fwd_.size()), *draft_kv_,
                                               draft_logits_.data()));
  // Rounds 1..: each proposing row feeds its newest draft until it has kmax of them.
  for (size_t round = 0; !proposing.empty(); ++round) {
    if (round > 0) {
      draft_fwd_.clear();
      for (int i : proposing) {
        const SequenceMetadata& r = so.rows[i];
        const RowPlan& plan = plans_[i];
        const int start = plan.begin + plan.k;
        draft_fwd_.push_back(RowForward(so, r, table_->row(r.slot) + start, start, 1, true));
      }
      DI_RETURN_IF_ERROR(draft_tf_->ForwardBatch(draft_fwd_.data(), static_cast<int>(draft_fwd_.size()), *draft_kv_,
                                                 draft_logits_.data()));
    }
    std::vector<int> next;
    for (size_t j = 0; j < proposing.size(); ++j) {
      const int i = proposing[j];
      const SequenceMetadata& r = so.rows[i];
      RowPlan& plan = plans_[i];
      if (AppendDraft(r, draft_logits_.data() + j * static_cast<size_t>(V), &plan)) next.push_back(i);
    }
    proposing.swap(next);
  }
  return Status::Ok();
}

int32_t ModelExecutor::DrawResidual(const FilteredDistribution& p, const FilteredDistribution* q, int32_t draft,
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

void ModelExecutor::VerifyRow(const SequenceMetadata& r, RowPlan& plan, const float* logits_in, VerifiedRun* run) {
  int32_t* hist = table_->row(r.slot);
  const SamplingParams& sp = *r.sampling;
  const bool rejection = opt_.spec_verify == SpecVerify::kRejection && !sp.greedy();
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
    if (drafted && rejection) {
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
  // The draft's cache holds the drafts it was fed (positions begin + 1 .. begin + k - 1): valid while accepted.
  if (draft_tf_ && static_cast<SpecMethod>(r.spec_method) == SpecMethod::kDraft && plan.k > 0)
    slots_[r.slot].draft_len = plan.begin + 1 + std::min(run->accepted, plan.k - 1);
}

Status ModelExecutor::RunMtp(const SchedulerOutputs& so) {
  // Each row's newly known pairs (h_p, token p + 1) go through the module, keeping its cache complete; for a
  // speculating row the last pair's logits give the first draft of its next step.
  const int H = tf_.model().config.mtp_hidden();  // per row: what the module reads and chains
  std::vector<SeqForward> rows;
  std::vector<int> owner, proposing;
  mtp_in_hidden_.clear();
  for (size_t i = 0; i < so.rows.size(); ++i) {
    const SequenceMetadata& r = so.rows[i];
    const RowPlan& plan = plans_[i];
    if (plan.skip || plan.hidden_row < 0) continue;
    SlotState& ss = slots_[r.slot];
    const int known_end = r.samples ? ss.len : plan.begin + plan.n + 1;
    const int p0 = plan.begin, p1 = std::min(plan.begin + plan.n, known_end - 1);
    if (p1 <= p0) continue;
    // Every sampling row of an MTP sequence proposes (whatever k the scheduler left this step: the next may differ).
    const SeqForward f = RowForward(so, r, table_->row(r.slot) + p0 + 1, p0, p1 - p0,
                                    r.samples && static_cast<SpecMethod>(r.spec_method) == SpecMethod::kMtp);
    const float* h = hidden_.data() + static_cast<size_t>(plan.hidden_row) * H;
    mtp_in_hidden_.insert(mtp_in_hidden_.end(), h, h + static_cast<size_t>(f.n) * H);
    ss.mtp_for = -1;
    if (f.want_logits) proposing.push_back(static_cast<int>(i));
    owner.push_back(static_cast<int>(i));
    rows.push_back(f);
  }
  if (rows.empty()) return Status::Ok();
  int total = 0;
  for (const SeqForward& f : rows) total += f.n;
  mtp_logits_.resize(static_cast<size_t>(std::max<size_t>(proposing.size(), 1)) * vocab_);
  mtp_hidden_.resize(static_cast<size_t>(total) * H);
  DI_RETURN_IF_ERROR(tf_.ForwardMtp(0, rows.data(), static_cast<int>(rows.size()), mtp_in_hidden_.data(), *mtp_kv_,
                                    mtp_logits_.data(), mtp_hidden_.data()));
  int hrow = 0;
  size_t li = 0;
  for (size_t j = 0; j < rows.size(); ++j) {
    hrow += rows[j].n;
    if (!rows[j].want_logits) continue;
    const SequenceMetadata& r = so.rows[owner[j]];
    SlotState& ss = slots_[r.slot];
    FilteredDistribution q;
    const int32_t d = DraftSample(r, mtp_logits_.data() + li++ * static_cast<size_t>(vocab_), ss.len, &q);
    ss.mtp_drafts.assign(1, d);
    ss.mtp_q.clear();
    if (opt_.spec_verify == SpecVerify::kRejection) ss.mtp_q.push_back(std::move(q));
    const float* last = mtp_hidden_.data() + static_cast<size_t>(hrow - 1) * H;
    ss.mtp_hidden.assign(last, last + H);
    ss.mtp_for = ss.len;
  }
  return Status::Ok();
}

Status ModelExecutor::MtpChain(const SchedulerOutputs& so) {
  const int H = tf_.model().config.mtp_hidden();  // per row: what the module reads and chains
  std::vector<int> chaining;
  std::vector<std::vector<float>> prev(so.rows.size());
  for (size_t i = 0; i < so.rows.size(); ++i) {
    const RowPlan& plan = plans_[i];
    if (so.rows[i].dynamic && static_cast<SpecMethod>(so.rows[i].spec_method) == SpecMethod::kMtp && !plan.skip &&
        plan.k == 1 && plan.kmax > 1) {
      chaining.push_back(static_cast<int>(i));
      prev[i] = slots_[so.rows[i].slot].mtp_hidden;
    }
  }
  std::vector<SeqForward> rows;
  while (!chaining.empty()) {
    rows.clear();
    mtp_in_hidden_.clear();
    for (int i : chaining) {
      const SequenceMetadata& r = so.rows[i];
      const RowPlan& plan = plans_[i];
      // Pair (the module's previous output, the newest draft at position begin + k) at position begin + k - 1.
      rows.push_back(RowForward(so, r, table_->row(r.slot) + plan.begin + plan.k, plan.begin + plan.k - 1, 1, true));
      mtp_in_hidden_.insert(mtp_in_hidden_.end(), prev[i].begin(), prev[i].end());
    }
    mtp_logits_.resize(rows.size() * static_cast<size_t>(vocab_));
    mtp_hidden_.resize(rows.size() * static_cast<size_t>(H));
    DI_RETURN_IF_ERROR(tf_.ForwardMtp(0, rows.data(), static_cast<int>(rows.size()), mtp_in_hidden_.data(), *mtp_kv_,
                                      mtp_logits_.data(), mtp_hidden_.data()));
    std::vector<int> next;
    for (size_t j = 0; j < chaining.size(); ++j) {
      const int i = chaining[j];
      const SequenceMetadata& r = so.rows[i];
      RowPlan& plan = plans_[i];
      const bool more = AppendDraft(r, mtp_logits_.data() + j * static_cast<size_t>(vocab_), &plan);
      prev[i].assign(mtp_hidden_.data() + j * static_cast<size_t>(H), mtp_hidden_.data() + (j + 1) * static_cast<size_t>(H));
      if (more) next.push_back(i);
    }
    chaining.swap(next);
  }
  return Status::Ok();
}

}  // namespace deepinfer
