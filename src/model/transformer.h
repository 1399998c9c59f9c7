// The decoder-only transformer forward pass every family shares: embeddings, then per layer
//   x += attention(RMSNorm(x))   (GQA or MLA, model/layers/attention_*.h)
//   x += mlp(RMSNorm(x))         (dense SwiGLU or routed experts, model/layers/mlp_*.h)
// then the final norm and the vocabulary projection. The transformer only composes the layers; each layer owns
// its weights view and scratch. DeepSeek-V3's MTP modules run through the same layers.
//
// One batched entry point serves the engine: several sequences, each contributing a run of consecutive
// positions (a prefill chunk or one decode token), over the paged K/V cache. Every operation is row-wise or
// per-sequence with a fixed reduction order, so a row's result does not depend on the batch it is in, on how a
// prompt was chunked, or on the thread count (the engine's determinism contract rests on this).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "base/host_buffer.h"
#include "deepinfer/status.h"
#include "kernels/cpu/gemm.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "model/layers/batch.h"
#include "model/layers/context_parallel.h"

namespace deepinfer {

// One sequence's share of a batched forward: tokens at positions [start, start + n), K/V slots from its block
// table (which must cover position start + n - 1). want_logits: produce logits for its last token.
struct SeqForward {
  const int32_t* tokens = nullptr;
  int n = 0;
  int start = 0;
  const int32_t* block_table = nullptr;
  int num_blocks = 0;
  bool want_logits = false;
  bool all_logits = false;  // logits for every token of the run (n rows), not only the last
};

// A single sequence's cache for tools that run one sequence (logprobs, the decode benchmark): a paged cache
// whose block table is simply 0, 1, 2, ...
class KvCache {
 public:
  KvCache(const KvLayout& layout, int capacity, DType dtype = DType::kF32);
  KvCache(const ModelConfig& c, int capacity, DType dtype = DType::kF32) : KvCache(c.kv_layout(), capacity, dtype) {}
  int capacity() const { return capacity_; }
  PagedKvCache& paged() { return *paged_; }
  const std::vector<int32_t>& block_table() const { return table_; }
  size_t bytes() const { return paged_->bytes(); }

 private:
  int capacity_;
  std::unique_ptr<PagedKvCache> paged_;
  std::vector<int32_t> table_;
};

class Transformer {
 public:
  // max_batch_tokens: tokens per forward call (bounds activation buffers; Forward chunks longer prompts).
  Transformer(const Model& model, int max_batch_tokens = 512);

  // Batched forward over the paged cache. logits receives vocab-size rows, one per sequence with want_logits,
  // in order. The caller guarantees block tables cover every position (the engine's scheduler does).
  // hidden (optional): receives the final-normed hidden state of every token (hidden-size rows, batch order),
  // the input of the MTP modules.
  Status ForwardBatch(const SeqForward* seqs, int num_seqs, PagedKvCache& kv, float* logits, float* hidden = nullptr);

  // MTP module k (model.mtp[k]) over the same batch layout: row r pairs the token seqs[..].tokens[i] (token
  // p + 1 of the sequence) with hidden[r], the main model's final-normed state at position p = start + i, and
  // predicts token p + 2. Positions, block tables and want_logits work as in ForwardBatch; the module's K/V
  // live in layer k of mtp_kv (a cache made from MtpKvLayout(), indexed by the same block tables). Rotary
  // positions are those of the hidden states (as vLLM and SGLang run it; a uniform shift would not change
  // attention, which only sees relative positions).
  // out_hidden (optional): the module's output of every row before its head norm, the `hidden` of a chained next
  // step (speculative decoding proposes k > 1 tokens by feeding the module its own output, as vLLM does).
  Status ForwardMtp(int k, const SeqForward* seqs, int num_seqs, const float* hidden, PagedKvCache& mtp_kv, float* logits,
                    float* out_hidden = nullptr);
  // The shape of this rank's MTP KV cache: one layer per MTP module.
  KvLayout MtpKvLayout() const;

  // Single sequence: tokens at positions [start, start + n). Writes vocab-size logits for every token when
  // all_logits (n rows), else for the last token only (1 row); hidden (optional) as in ForwardBatch (n rows).
  Status Forward(const int32_t* tokens, int n, int start, KvCache& kv, float* logits, bool all_logits,
                 float* hidden = nullptr);

  // Microbenchmark hooks (deepinfer bench layers). BenchAttention: layer l's attention block alone for a batch
  // laid out as in ForwardBatch (its K/V rows are written). BenchMoe: n rows of normed hidden states through
  // layer l's routed and shared experts; returns how many distinct experts the batch touched.
  Status BenchAttention(int l, const SeqForward* seqs, int num_seqs, PagedKvCache& kv);
  StatusOr<int> BenchMoe(int l, const float* xn, int n);

  // Expert parallelism, online EPLB: collective over every rank (call at the same step everywhere, between
  // forwards). The expert loads counted since the last call (pairs routed per logical expert, summed over the
  // ranks in rank order) go through DeepSeek's EPLB; the layers' placements change to its result, identically on
  // every rank. A rank's newly held experts arrive over MPI from a rank that held them (transformer_eplb.cc);
  // outputs do not change, since a replica is the same weights wherever it runs.
  struct EplbReport {
    int moved_slots = 0;                   // physical slots (over all MoE layers) now holding another expert
    double imbalance_before = 1, imbalance_after = 1;  // worst layer's max/mean rank load under the counted loads
    int64_t pairs = 0;                     // (token, expert) pairs counted
    int experts_sent = 0;                  // experts copied between ranks over MPI (every rank's, all layers)
    int64_t bytes_sent = 0;                // their bytes
  };
  StatusOr<EplbReport> RebalanceExperts();
  bool expert_parallel() const { return !placement_.empty(); }

  const Model& model() const { return model_; }
  int max_batch_tokens() const { return max_tokens_; }

 public:
  // MLA only: false runs attention "decompressed" (K/V up-projected per head from the cached latent, as a
  // prefill kernel would); true (default) folds W_UK into the query and W_UV after attention. Same math; the
  // engine uses the absorbed form everywhere. Exposed so the two can be checked against each other.
  void set_mla_absorb(bool absorb) {
    if (mla_) mla_->set_absorb(absorb);
  }

 private:
  // Validates the batch and lays it out: token ids, positions, K/V slots, attention rows, logit rows. Under
  // context parallelism batch_ (and tokens_, pos_) hold this rank's share of the rows; *total is the whole batch.
  Status PlanBatch(const SeqForward* seqs, int num_seqs, int block_size, int* total);
  // The final norm of the logit rows and the vocabulary projection; under tensor parallelism each rank
  // projects its vocabulary rows and the slices are all-gathered, so every rank returns the full logits (under
  // context parallelism the logit rows' hidden states are gathered first, and every rank projects them all).
  void Logits(const std::vector<float>& norm, const TensorView& head, float* logits);
  // The final-normed hidden state of every row of the batch, in batch order (ForwardBatch's `hidden`).
  void FinalHidden(int total, float* hidden);
  // x_ = the embeddings of the batch's tokens (tensor parallel: each rank fills the rows of its vocabulary
  // slice, zeros elsewhere, and the all-reduce completes them exactly).
  void Embed(const TensorView& embd, int total);
  // One decoder layer over x_ (batch_.n rows); its K/V go to layer kv_layer of kv. The two residual blocks:
  // moe_layer: index into placement_ for the main layers (expert parallelism), -1 for MTP modules.
  void Layer(const LayerWeights& L, int kv_layer, PagedKvCache& kv, int moe_layer = -1);
  // The two residual blocks over the rows [row0, row0 + b.n) of x_ (the whole batch: batch_, 0).
  void AttentionBlock(const LayerWeights& L, int kv_layer, PagedKvCache& kv, const BatchView& b, int row0);
  void MlpBlock(const LayerWeights& L, int moe_layer);
  // Two-batch overlap (transformer_tbo.cc): the main layers over batch_ as two micro-batches, each one's MoE
  // dispatch and combine on the communication stream while the other computes.
  struct Micro {
    BatchView b;
    int row0 = 0;
    MoeMlp* moe = nullptr;
    uint64_t ticket = 0;  // its exchange in flight on the stream
    std::vector<AttnSeq> seqs;
  };
  void LayersTbo(PagedKvCache& kv);
  void SplitMicroBatches();
  void MoeBegin(const LayerWeights& L, int moe_layer, Micro& m);
  void MoeExperts(Micro& m);
  void MoeEnd(Micro& m);
  // Sums rows x hidden floats over the attention group's tensor-parallel ranks (a no-op with one).
  void TpAllReduce(float* data, int rows);

  const Model& model_;
  const ModelConfig& c_;
  const ModelConfig lc_;  // this rank's shapes (RankConfig): local heads, KV heads, FFN widths
  const ModelShard& shard_;
  const dist::DistContext* dist_ = nullptr;
  // Expert parallelism: each main layer's live placement (starts as the model's) and its expert loads since the
  // last rebalance. Empty without EP.
  std::vector<ExpertPlacement> placement_;
  std::vector<std::vector<int64_t>> expert_load_;
  // This rank's routed experts per main layer (a copy of the layer's views, changed by rebalancing): views into the
  // model for the experts held since load, into ep_moved_[l][e] for an expert received from another rank.
  std::vector<MoeWeights> ep_weights_;
  std::vector<std::vector<std::unique_ptr<HostBuffer>>> ep_moved_;
  std::vector<std::unique_ptr<HostBuffer>> ep_free_;  // buffers of experts handed on, reused by the next arrival
  // Online EPLB: sends the experts layer l's next placement gives a group that does not hold them yet, each from a
  // rank of a group that does (same slice of the expert under expert TP), and repoints ep_weights_[l].
  Status MoveExperts(int l, const ExpertPlacement& next, EplbReport* rep);  // multi-process (dist::Context()); nullptr: one process
  int max_tokens_;
  // The layers (one instance per kind: scratch is per call, weights are passed per layer).
  std::unique_ptr<GqaAttention> gqa_;
  std::unique_ptr<MlaAttention> mla_;
  std::unique_ptr<DenseMlp> mlp_;
  std::unique_ptr<MoeMlp> moe_;
  // Two-batch overlap (--enable-two-batch-overlap under expert parallelism): the second micro-batch's MoE layer
  // state (its exchanges are in flight while the first's run), and the two micro-batches of the current forward.
  bool tbo_ = false;
  std::unique_ptr<MoeMlp> moe2_;
  Micro micro_[2];
  std::vector<float> x_, xn_, y_;  // residual stream, normed input of a block, a block's output
  std::vector<int32_t> tokens_, pos_, slot_of_token_, rows_;
  std::vector<float> mtp_in_;  // MTP: [enorm(embedding), hnorm(h)] per row
  std::vector<AttnSeq> attn_seqs_;
  std::vector<int32_t> logit_rows_;
  std::vector<float> vocab_local_, vocab_gather_;  // tensor parallel: this rank's logits, every rank's
  // Context parallelism (--cp > 1): the row split of each forward; the whole batch's KV slots, the gathered
  // rows of the logits or hidden states, this rank's attention view.
  std::unique_ptr<ContextParallel> cp_;
  std::vector<int32_t> cp_slots_, cp_all_rows_;
  std::vector<float> cp_rows_;
  std::vector<AttnSeq> cp_seqs_;
  BatchView batch_;
};

}  // namespace deepinfer
