// The draft-model proposer: any model with the target's vocabulary, run over its own paged K/V cache, which
// shares the target's block tables (a block holds its positions in both caches, so prefix caching and preemption
// need nothing new). It keeps, per slot, how far the draft's cache is valid.
#pragma once
#include <memory>
#include <vector>

#include "engine/proposer.h"
#include "engine/speculative.h"
#include "engine/token_table.h"
#include "kv/paged_kv_cache.h"
#include "model/transformer.h"

namespace deepinfer {

class SpecVerifier;

class DraftModelProposer : public Proposer {
 public:
  // kv: the draft's cache, with the target's block count. max_batch_tokens, max_rows: the engine's step limits.
  DraftModelProposer(const Model& draft, std::unique_ptr<PagedKvCache> kv, TokenTable* table, SpecVerifier* verifier,
                     int max_batch_tokens, int max_rows);
  SpecMethod method() const override { return SpecMethod::kDraft; }
  // Catches the draft's cache up with every row, then proposes for the rows it owns (kmax single-token rounds).
  Status Propose(const SchedulerOutputs& so, std::vector<RowPlan>& plans) override;
  // Records how far the draft's cache is valid after verification, and bounds every run's kv_end by it.
  Status AfterVerify(const SchedulerOutputs& so, const std::vector<RowPlan>& plans, const float* hidden,
                     std::vector<VerifiedRun>* runs) override;

 private:
  TokenTable* table_;
  SpecVerifier* verifier_;
  Transformer tf_;
  std::unique_ptr<PagedKvCache> kv_;
  int vocab_;
  std::vector<int32_t> draft_len_;  // per slot: positions whose draft-model K/V is valid
  std::vector<float> logits_;
  std::vector<SeqForward> fwd_;
};

}  // namespace deepinfer
