// The CPU model executor: gathers a step's input tokens from the token table, runs the batched transformer
// over the paged K/V cache, then samples every sampling row (penalties read the device-view history in the
// token table) and writes the new token at (slot, position) for the next step to read.
#pragma once
#include <memory>
#include <vector>

#include "engine/step.h"
#include "engine/token_table.h"
#include "kv/kv_cache.h"
#include "model/transformer.h"

namespace deepinfer {

namespace grammar {
class GrammarMatcher;
}
// Sets the logits of every token the matcher does not allow to -inf (a no-op when it allows none).
void ApplyGrammarMask(grammar::GrammarMatcher* m, float* logits, int vocab, std::vector<uint32_t>* bits);

class ModelExecutor : public Executor {
 public:
  ModelExecutor(const Model& model, std::unique_ptr<PagedKvCache> kv, TokenTable* table, int max_batch_tokens);
  void Execute(WorkerStepState& st) override;
  int vocab_size() const override { return vocab_; }
  PagedKvCache& kv() { return *kv_; }
  // Online EPLB (--eplb-interval): rebalances before the forward of every interval-th step.
  void MaybeRebalance(uint64_t step);

 private:
  Transformer tf_;
  std::unique_ptr<PagedKvCache> kv_;
  TokenTable* table_;
  int vocab_;
  std::vector<SeqForward> fwd_;
  std::vector<float> logits_, raw_;
  std::vector<int32_t> counts_;
  std::vector<uint32_t> mask_bits_;
  int rebalances_ = 0;
  int64_t moved_slots_ = 0;
};

}  // namespace deepinfer
