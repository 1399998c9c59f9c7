// The proposal stage of the model executor's step (engine/speculative.h): one Proposer per method (n-gram, draft
// model, MTP), each owning what its method keeps between steps (a draft model and its cache, the MTP module's
// cache and per-slot drafts). The executor plans every row, then runs the stages in this order:
//
//   Propose       every proposer, before the target's forward: drafts for the rows it owns written into the
//                 token table at begin + 1 .. begin + k, their plans' k, n and (rejection) q set
//   forward       the target over every row (a verify row of 1 + k positions, logits at each)
//   verify        engine/spec_verifier.h: the accepted drafts plus the target's own token committed per row
//   AfterVerify   every proposer, with the committed lengths (RowPlan::committed) and the target's hidden states
//
// A proposer is called for the whole step, not per row: its own forwards batch the rows (and a proposer with a
// cache of its own keeps it up with every row, whatever the row's method). A row belongs to the proposer its
// spec_method names (Owns).
#pragma once
#include <vector>

#include "deepinfer/status.h"
#include "engine/request.h"
#include "engine/step.h"
#include "model/seq_forward.h"
#include "sample/sampler.h"

namespace deepinfer {

// The speculative parts of a step, per row (planned by the executor, drafts added by the proposers).
struct RowPlan {
  int begin = 0, n = 0;   // positions [begin, begin + n) run through the target
  int k = 0;              // drafts proposed (the row verifies k and samples k + 1 tokens)
  int kmax = 0;           // most drafts the row may take
  bool skip = false;      // a dynamic row whose sequence already reached its limit on the device
  int logit_row = -1;     // first logits row
  int hidden_row = -1;    // first row of the forward batch (its hidden states, for MTP)
  int committed = 0;      // sampling rows, after verification: tokens known in the row (the slot's new length)
  std::vector<FilteredDistribution> q;  // the draft's distribution at each draft (rejection verification)
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual SpecMethod method() const = 0;
  // Floats per forward position of the target's hidden state that AfterVerify reads (0: none, the forward
  // skips them).
  virtual int hidden_width() const { return 0; }
  // Before the target's forward. Dynamic rows come planned with k = 0, n = 1 (their input position) and kmax;
  // for the rows it owns the proposer writes up to kmax drafts into the token table after the input position
  // and sets k, n = 1 + k and, under rejection verification, q (one distribution per draft).
  virtual Status Propose(const SchedulerOutputs& so, std::vector<RowPlan>& plans) = 0;
  // After verification, every sampling row's RowPlan::committed set and, for dynamic rows, runs[i] filled (its
  // kv_end as far as the target's cache is verified; a proposer whose cache holds less lowers it). hidden: the
  // target's hidden states of the step (RowPlan::hidden_row), when hidden_width() > 0.
  virtual Status AfterVerify(const SchedulerOutputs& so, const std::vector<RowPlan>& plans, const float* hidden,
                             std::vector<VerifiedRun>* runs) = 0;
  // Whether the row takes its drafts from this proposer: a dynamic row that may take one, of this method.
  bool Owns(const SequenceMetadata& r, const RowPlan& plan) const {
    return r.dynamic && !plan.skip && plan.kmax > 0 && static_cast<SpecMethod>(r.spec_method) == method();
  }
};

// A forward row over positions [start, start + n) of row r's sequence (its block table), reading `tokens`.
inline SeqForward RowForward(const SchedulerOutputs& so, const SequenceMetadata& r, const int32_t* tokens, int start,
                             int n, bool want_logits) {
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

}  // namespace deepinfer
