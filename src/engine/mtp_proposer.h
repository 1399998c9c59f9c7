// The MTP proposer (DeepSeek-V3's next-n module, V4's MTP block), run by the target's own Transformer over the
// module's K/V cache: after each step the module consumes the newly committed pairs (h_p, token p + 1) of every
// row, keeping its cache complete, and the last pair's logits give the first draft of the row's next step (kept
// per slot with the module's output state); at the start of that step the module is chained on its own output
// for drafts 2..k (as vLLM does).
#pragma once
#include <memory>
#include <vector>

#include "engine/proposer.h"
#include "engine/token_table.h"
#include "kv/paged_kv_cache.h"
#include "model/transformer.h"
#include "sample/sampler.h"

namespace deepinfer {

class SpecVerifier;

class MtpProposer : public Proposer {
 public:
  // target: the executor's model (the module is part of it); kv: the module's cache, from MtpKvLayout()
  // (DeepSeek-V3: indexed by the anchor's table, a row per position). DeepSeek-V4 passes no cache of its own but
  // the main one (`main_kv`, its layout from ModelConfig::Dsv4Layout(true)): the module's K=V rows are one more
  // windowed plane there, read and written through every group's table like the target's rows, and released as
  // the window slides.
  MtpProposer(Transformer* target, std::unique_ptr<PagedKvCache> kv, TokenTable* table, SpecVerifier* verifier,
              PagedKvCache* main_kv = nullptr);
  SpecMethod method() const override { return SpecMethod::kMtp; }
  int hidden_width() const override { return hidden_; }
  // The first draft the previous step proposed for the row's length, then the chain for drafts 2..kmax.
  Status Propose(const SchedulerOutputs& so, std::vector<RowPlan>& plans) override;
  // Feeds the newly committed pairs of every row through the module and proposes the next step's first drafts.
  Status AfterVerify(const SchedulerOutputs& so, const std::vector<RowPlan>& plans, const float* hidden,
                     std::vector<VerifiedRun>* runs) override;

 private:
  // Rows with k = 1 that may take more: chains the module on its own output from the first draft (k - 1 rounds).
  Status Chain(const SchedulerOutputs& so, std::vector<RowPlan>& plans);
  // What a slot keeps between steps.
  struct SlotDrafts {
    int32_t for_len = -1;  // drafts were proposed for a row starting at this length (-1: none)
    std::vector<int32_t> drafts;
    std::vector<float> hidden;  // the module's output at the pair that proposed drafts[0] (chaining)
    std::vector<FilteredDistribution> q;  // their distributions (rejection verification)
  };
  Transformer* tf_;
  std::unique_ptr<PagedKvCache> own_kv_;
  PagedKvCache* kv_;  // own_kv_, or the main cache (V4's windowed MTP plane)
  TokenTable* table_;
  SpecVerifier* verifier_;
  int vocab_, hidden_;  // hidden_: floats per row the module reads and chains
  std::vector<SlotDrafts> slots_;
  std::vector<float> in_hidden_, out_hidden_, logits_;
};

}  // namespace deepinfer
