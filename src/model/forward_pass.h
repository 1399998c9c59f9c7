// The shared builders a family's forward is composed from (llama.cpp's llama-graph.cpp plays this part for its
// src/models/*.cpp): one batched forward's token layout and residual stream, and the blocks that act on them.
//
//   x   the residual stream, one row of `hidden` per token of the batch
//   xn  a block's input (Norm writes it; a family that feeds x itself copies it with Input)
//   y   a block's output (Attention and Mlp write it; AddResidual adds it to x)
//
// Parallelism lives inside the blocks, as in nano-vllm's layers: Embed is vocabulary-parallel, Attention and Mlp
// end with their tensor-parallel reduction (row-parallel output projections), the MoE layer dispatches to and
// combines from the expert-parallel ranks itself, Logits gathers the vocabulary slices, and under context
// parallelism the batch holds this rank's rows while attention writes everyone's K/V. The communicators come in
// through the constructor (nullptr: one process); a failed collective comes back as a Status.
//
// Every operation is row-wise or per sequence with a fixed reduction order, so a row's result does not depend on
// the batch it is in, on how a prompt was chunked, or on the thread count (the engine's determinism contract).
#pragma once
#include <memory>
#include <vector>

#include "deepinfer/status.h"
#include "dist/parallel.h"
#include "kernels/ops.h"
#include "kv/paged_kv_cache.h"
#include "model/layers/attention_gqa.h"
#include "model/layers/attention_mla.h"
#include "model/layers/batch.h"
#include "model/layers/context_parallel.h"
#include "model/layers/mlp_dense.h"
#include "model/layers/moe_layer.h"
#include "model/model.h"
#include "model/seq_forward.h"

namespace deepinfer {

// A block's rows: the whole batch (ForwardPass::all()) or a micro-batch of it (two-batch overlap).
struct Rows {
  const BatchView* b = nullptr;
  int row0 = 0;  // the first row of x/xn/y it covers
};

class ForwardPass {
 public:
  // lc: this rank's shapes (RankConfig: local heads, KV heads, FFN widths). max_tokens bounds the rows.
  ForwardPass(const Model& model, const ModelConfig& lc, int max_tokens, const dist::DistContext* dist);

  // Validates the batch and lays it out: token ids, positions, K/V slots, attention rows, logit rows. Under
  // context parallelism the batch holds this rank's share of the rows; *total is the whole batch's.
  // kv: the cache the batch's block tables index (its block size, and its KV groups for a hybrid cache).
  Status Plan(const SeqForward* seqs, int num_seqs, const PagedKvCache& kv, int* total);

  // x = the embedding rows of the batch's tokens (tensor parallel: each rank fills the rows of its vocabulary
  // slice and the all-reduce completes them exactly).
  Status Embed(const TensorView& embd);
  // x *= s over `rows` (Gemma scales its embeddings by sqrt(hidden)).
  void Scale(float s, Rows rows);
  // xn = RMSNorm(x) with weight w, over `rows`.
  void Norm(const std::vector<float>& w, Rows rows);
  // xn = x over `rows` (a block fed the residual stream itself: OLMo 2's post-norm layer).
  void Input(Rows rows);
  // y = RMSNorm(y) with weight w, over `rows` (a block's output normed before it joins the residual).
  void NormOutput(const std::vector<float>& w, Rows rows);
  // y = attention(xn) of layer kv_layer (GQA or MLA, by the model), its K/V written to kv; tensor-parallel reduced.
  // rope false: a NoPE layer (GQA only; MLA's rope key is part of its cache).
  Status Attention(const LayerWeights& L, int kv_layer, PagedKvCache& kv, Rows rows, bool rope = true);
  // y = DeepSeek-V4's attention (layers/attention_dsv4.h) of `layer` over xn, the whole batch (n_layers + k: MTP
  // block k, kv then the MTP cache); tensor-parallel reduced (each rank holds whole output groups of heads).
  Status AttentionDsv4(const LayerWeights& L, int layer, PagedKvCache& kv) { return AttentionDsv4(L, layer, kv, all()); }
  // The same over `rows` (a micro-batch under two-batch overlap).
  Status AttentionDsv4(const LayerWeights& L, int layer, PagedKvCache& kv, Rows rows);
  // y = the layer's MLP of xn over the whole batch: dense SwiGLU or routed experts (moe_layer: the main layer's
  // index, for its live expert placement; -1 for an MTP module); tensor/expert-parallel as the model is split.
  Status Mlp(const LayerWeights& L, int moe_layer);
  // x += y over `rows`.
  void AddResidual(Rows rows);

  // The final norm of the logit rows and the vocabulary projection into `logits` (vocab rows, one per logit row
  // in order); vocabulary parallel: each rank projects its slice and the slices are gathered.
  Status Logits(const std::vector<float>& norm, const TensorView& head, float* logits);
  // hidden = what an MTP module reads of every row of the batch (total rows of ModelConfig::mtp_hidden(), batch
  // order; gathered under CP): the final-normed state, or DeepSeek-V4's residual streams before the head.
  Status FinalHidden(int total, float* hidden);

  // Two-batch overlap: the batch as two micro-batches, A = the first ceil(n / 2) rows and B = the rest (a
  // sequence across the boundary is cut into two runs: B's rows attend to A's K/V, written earlier in the same
  // layer, as chunked prefill does). micro(i) is micro-batch i's rows after SplitMicroBatches.
  void SplitMicroBatches();
  Rows micro(int i) const { return {&micro_[i].b, micro_[i].row0}; }
  // Micro-batch i's MoE stages over its xn rows (MoeLayer::Begin / Experts / End, with its rows' token ids for
  // hash-routed layers), End writing its y rows.
  void MoeBegin(int layer, int i);
  Status MoeExperts(int i);
  Status MoeEnd(int i);

  Rows all() const { return {&batch_, 0}; }
  const BatchView& batch() const { return batch_; }
  bool has_logits() const { return !logit_rows_.empty(); }
  // The global row of local row r (context parallelism: this rank's rows are a subset).
  int global_row(int r) const { return cp_ ? cp_->mine()[r] : r; }
  const Model& model() const { return model_; }
  const Ops& ops() const { return ops_; }
  const ModelConfig& config() const { return c_; }
  float* x() { return x_.data(); }
  float* xn() { return xn_.data(); }
  float* y() { return y_.data(); }
  MoeLayer* moe() { return moe_.get(); }
  // DeepSeek-V4's attention and hyper-connections (null for other families).
  Dsv4Attention* dsv4() { return dsv4_.get(); }
  HyperConnection* hc() { return hc_.get(); }
  // DeepSeek-V4's residual streams: one row of hc x hidden per token.
  float* streams() { return streams_.data(); }
  // An MTP module's input rows before eh_proj: 2 x mtp_hidden() floats per token (models with MTP modules).
  float* mtp_in() { return mtp_in_.data(); }
  const MoeLayer* moe() const { return moe_.get(); }
  bool context_parallel() const { return cp_ != nullptr; }
  // Two-batch overlap is on: an expert-parallel MoE layer with a communication stream.
  bool overlapped() const { return moe_ && moe_->overlappable(); }
  // MLA only: absorbed (default) or decompressed attention (checked against each other in tests).
  void set_mla_absorb(bool absorb) {
    if (mla_) mla_->set_absorb(absorb);
  }

 private:
  Status TpAllReduce(float* data, int rows);
  // What a GQA layer needs to complete whole-projection q/k norms across the tensor-parallel group.
  WholeNormSplit WholeNormSplitFor() const;

  const Ops& ops_;  // the device the weights live on
  const Model& model_;
  const ModelConfig& c_;
  const ModelShard& shard_;
  const dist::DistContext* dist_;
  int max_tokens_;
  // The layers (one instance per kind: scratch is per call, weights are passed per layer).
  std::unique_ptr<GqaAttention> gqa_;
  std::unique_ptr<MlaAttention> mla_;
  std::unique_ptr<DenseMlp> mlp_;
  std::unique_ptr<MoeLayer> moe_;
  std::unique_ptr<Dsv4Attention> dsv4_;
  std::unique_ptr<HyperConnection> hc_;
  std::vector<float> x_, xn_, y_, streams_, mtp_in_;
  std::vector<int32_t> tokens_, pos_;
  std::vector<int32_t> logit_rows_;
  // Per KV group: the K/V rows each sequence reads (rows, from rows_begin[s]), the slot each token writes, the
  // attention view; under context parallelism also the whole batch's slots and this rank's attention view.
  struct GroupRows {
    std::vector<int32_t> rows, slots, cp_slots;
    std::vector<size_t> rows_begin;
    std::vector<int> rows_first;  // per sequence: the position of its first entry in rows
    std::vector<AttnSeq> seqs, cp_seqs;
    BatchView view;
  };
  std::vector<GroupRows> grp_;
  std::vector<BatchView> grp_views_;  // grp_[g].view, contiguous (BatchView::groups)
  std::vector<float> vocab_local_, vocab_gather_;  // tensor parallel: this rank's logits, every rank's
  // Context parallelism (--cp > 1): the row split of each forward; the whole batch's KV slots, the gathered
  // rows of the logits or hidden states, this rank's attention view.
  std::unique_ptr<ContextParallel> cp_;
  std::vector<int32_t> cp_all_rows_;
  std::vector<float> cp_rows_;
  BatchView batch_;
  struct Micro {
    BatchView b;
    int row0 = 0;
    std::vector<std::vector<AttnSeq>> seqs;  // per KV group
    std::vector<BatchView> views;            // per KV group
  };
  Micro micro_[2];
};

}  // namespace deepinfer
