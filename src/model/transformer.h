// The model's forward as the engine and the tools call it: one batched entry point (several sequences, each a run
// of consecutive positions: a prefill chunk or one decode token, over the paged K/V cache), the single-sequence
// form, DeepSeek's MTP modules, and online expert rebalancing. The architecture's own forward is its family's
// (model/models/, named by its ArchSpec), composed from the shared builders of ForwardPass; this class plans the
// batch, runs that forward, and finishes with the final norm and the vocabulary projection.
//
// Every operation is row-wise or per-sequence with a fixed reduction order, so a row's result does not depend on
// the batch it is in, on how a prompt was chunked, or on the thread count (the engine's determinism contract).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "deepinfer/status.h"
#include "dist/parallel.h"
#include "kv/paged_kv_cache.h"
#include "kv/sequence_kv_cache.h"
#include "model/forward_pass.h"
#include "model/model.h"
#include "model/models/forwards.h"
#include "model/seq_forward.h"

namespace deepinfer {

class Transformer {
 public:
  // max_batch_tokens: tokens per forward call (bounds activation buffers; Forward chunks longer prompts).
  // dist: the job's communicators (nullptr: one process), passed in by the process's top level; the model must
  // have been loaded (sharded) for the same split.
  Transformer(const Model& model, int max_batch_tokens, const dist::DistContext* dist);

  // Batched forward over the paged cache. logits receives vocab-size rows, one per sequence with want_logits,
  // in order. The caller guarantees block tables cover every position (the engine's scheduler does).
  // hidden (optional): receives what the MTP modules read of every token (ModelConfig::mtp_hidden() floats per
  // row, batch order: the final-normed hidden state; V4's residual streams). A failed collective (multi-process)
  // is returned; the caller ends the job.
  Status ForwardBatch(const SeqForward* seqs, int num_seqs, PagedKvCache& kv, float* logits, float* hidden = nullptr);

  // MTP module k (model.mtp[k]) over the same batch layout: row r pairs the token seqs[..].tokens[i] (token
  // p + 1 of the sequence) with hidden[r], the main model's state at position p = start + i (ForwardBatch's
  // `hidden`, ModelConfig::mtp_hidden() floats per row), and
  // predicts token p + 2. Positions, block tables and want_logits work as in ForwardBatch; the module's K/V
  // live in layer k of mtp_kv (a cache made from MtpKvLayout(), indexed by the same block tables). Rotary
  // positions are those of the hidden states (as vLLM and SGLang run it; a uniform shift would not change
  // attention, which only sees relative positions).
  // out_hidden (optional): the module's output of every row before its head (norm), the `hidden` of a chained
  // next step (speculative decoding proposes k > 1 tokens by feeding the module its own output, as vLLM does).
  Status ForwardMtp(int k, const SeqForward* seqs, int num_seqs, const float* hidden, PagedKvCache& mtp_kv, float* logits,
                    float* out_hidden = nullptr);
  // The shape of this rank's MTP KV cache: one layer per MTP module.
  KvLayout MtpKvLayout() const;

  // Single sequence: tokens at positions [start, start + n). Writes vocab-size logits for every token when
  // all_logits (n rows), else for the last token only (1 row); hidden (optional) as in ForwardBatch (n rows).
  Status Forward(const int32_t* tokens, int n, int start, SequenceKvCache& kv, float* logits, bool all_logits,
                 float* hidden = nullptr);

  // Microbenchmark hooks (deepinfer bench layers). BenchAttention: layer l's attention block alone for a batch
  // laid out as in ForwardBatch (its K/V rows are written). BenchMoe: n rows of normed hidden states through
  // layer l's routed and shared experts; returns how many distinct experts the batch touched.
  Status BenchAttention(int l, const SeqForward* seqs, int num_seqs, PagedKvCache& kv);
  StatusOr<int> BenchMoe(int l, const float* xn, int n);

  // Expert parallelism, online EPLB (MoeLayer::Rebalance): collective over every rank, between forwards.
  using EplbReport = ExpertRebalanceReport;
  StatusOr<EplbReport> RebalanceExperts();
  bool expert_parallel() const;

  const Model& model() const { return model_; }
  int max_batch_tokens() const { return max_tokens_; }

  // MLA only: false runs attention "decompressed" (K/V up-projected per head from the cached latent, as a
  // prefill kernel would); true (default) folds W_UK into the query and W_UV after attention. Same math; the
  // engine uses the absorbed form everywhere. Exposed so the two can be checked against each other.
  void set_mla_absorb(bool absorb) { pass_.set_mla_absorb(absorb); }

 private:
  const Model& model_;
  const ModelConfig& c_;
  const ModelConfig lc_;  // this rank's shapes (RankConfig): local heads, KV heads, FFN widths
  int max_tokens_;
  FamilyForward forward_;
  FamilyMtpForward mtp_forward_;
  ForwardPass pass_;
};

}  // namespace deepinfer
