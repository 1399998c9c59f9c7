// DeepSeek-V4 attention (model/models/deepseek_v4.cc; docs/design/deepseek_v4.md). One latent of head_dim per
// token is both K and V; queries come through a q-LoRA and are RMS-normed per head; RoPE turns only each head's
// last rope_dim elements (adjacent pairs), and the output is turned back before a grouped low-rank projection.
// Every layer attends to a raw window of its last W positions; a compressed layer adds rows that summarize
// blocks of `ratio` positions (softmax-weighted sums of per-token projections, scored per channel with a
// learned per-slot bias):
//   ratio 128 (HCA): every completed block's row;
//   ratio 4 (CSA): blocks that overlap (each row pools its own 4 tokens and the previous 4), of which a
//     lightning indexer picks the top-k per query (ReLU scores of a small multi-head query against compressed
//     indexer keys, weighted per head).
// A learned sink logit per head joins every softmax. The compressed rows of a block are written into the KV
// slot of the token that closes it (ModelConfig::Dsv4KvLayers), the tokens' compressor inputs into windowed
// cache layers, so prefix caching, preemption and chunked prefill work on them as on any K/V.
#pragma once
#include <vector>

#include "kernels/ops.h"
#include "kv/paged_kv_cache.h"
#include "model/config.h"
#include "model/layers/batch.h"
#include "tensor/tensor.h"

namespace deepinfer {

struct Dsv4AttnWeights {
  TensorView wq_a, wq_b;  // {q_lora, hidden}, {heads * head_dim, q_lora}
  TensorView wkv;         // {head_dim, hidden}: the K=V latent
  TensorView wo_a;        // {groups * o_lora, heads * head_dim / groups}: group g's rows [g o_lora, (g + 1) o_lora)
  TensorView wo_b;        // {hidden, groups * o_lora}
  std::vector<float> q_a_norm, kv_norm, sinks;
  // The compressor (ratio != 0): width c * head_dim, c = 2 for CSA's overlapping halves, else 1.
  TensorView comp_kv, comp_gate;         // {width, hidden}
  std::vector<float> comp_ape;           // {ratio, width}: the score bias of each slot of a block
  std::vector<float> comp_norm;          // {head_dim}
  // The lightning indexer (ratio 4).
  TensorView idx_proj;                   // {index_heads, hidden}: per-head weights
  TensorView idx_q_b;                    // {index_heads * index_head_dim, q_lora}
  TensorView idx_comp_kv, idx_comp_gate;  // {2 index_head_dim, hidden}
  std::vector<float> idx_comp_ape;       // {4, 2 index_head_dim}
  std::vector<float> idx_comp_norm;      // {index_head_dim}
};

class Dsv4Attention {
 public:
  Dsv4Attention(const Ops& ops, const ModelConfig& c, int max_tokens);
  // out (n rows of hidden) = attention of layer `layer` over xn (the normed sublayer input); the batch's raw
  // rows, compressor inputs and completed blocks' rows are written to kv first. layer n_layers + k is MTP block
  // k (window only), kv then the MTP cache.
  Status Forward(const Dsv4AttnWeights& w, const BatchView& b, int layer, PagedKvCache& kv, const float* xn, float* out);

 private:
  // Rotates the last rope_dim elements of each of `heads` heads of width `hd` (rows of heads * hd), row i at
  // pos[i]; inverse turns the other way.
  void TailRope(const RopeTable& t, float* x, int n, int heads, int hd, const int32_t* pos, bool inverse) const;
  // One block's compressed row (width `hd`): the per-channel softmax over the block's scored inputs (and, for
  // CSA, the previous block's) of sequence `seq` of the batch, RMSNorm, RoPE at the block's first position.
  // kv_off / score_off: where the block's kv and score vectors start in a packed ring row.
  void CompressBlock(const PagedKvCache& kv, const Dsv4KvLayer& kl, const BatchView& b, int seq, int ratio, int block,
                     int hd, int kv_off, int score_off, const std::vector<float>& norm, float* row);
  // A cache row of `layer` at `slot` as f32 (kept in row_ if the cache is not f32).
  const float* Row(const PagedKvCache& kv, int layer, int32_t slot, float* scratch) const;

  const Ops& ops_;
  const ModelConfig& c_;
  std::vector<Dsv4KvLayer> kv_layers_;
  // Cache layers of the decoder layers alone: MTP block k's K=V rows are cache layer k of a separate MTP cache
  // (Transformer::MtpKvLayout), or, where the cache holds the MTP planes too (ModelConfig::Dsv4Layout(true),
  // `--speculative mtp`), cache layer decoder_cache_layers_ + k of the main one.
  int decoder_cache_layers_ = 0;
  int heads_, hd_, rope_, q_lora_, groups_, o_lora_;
  int idx_heads_, idx_hd_, idx_topk_, window_;
  float eps_, scale_;
  RopeTable rope_plain_, rope_compress_;
  std::vector<float> ones_;
  // Scratch sized at construction (max_tokens rows): the projections, the packed compressor inputs (packed_,
  // tmp_), one compressed row (comp_), a block's candidates (cand_vals_ / cand_scores_: up to 128 positions).
  // Grown as a wave of query rows needs (kept between calls): their keys as f32 (keys_, nk rows of head_dim each)
  // and transposed (keys_t_), their heads' logits, the sequences' indexer keys, the rows' indexer dots and scores.
  std::vector<float> qr_, q_, kv_, ring_, packed_, tmp_, comp_, cand_vals_, cand_scores_, o_, z_, idx_q_, idx_w_,
      scores_, logits_, keys_, keys_t_, idx_keys_, idx_dots_;
  // One query row of the attention: batch row r at position p of sequence s, its window from w0, the blocks it
  // sees and whether the indexer picks among them, its key count; its offsets in the wave's scratch.
  struct QueryRow {
    int s = 0, p = 0, r = 0, w0 = 0, visible = 0, nk = 0;
    bool indexed = false;
    size_t keys = 0, logits = 0, dots = 0;
  };
  std::vector<QueryRow> wave_;
  std::vector<size_t> idx_seq_off_;  // per sequence: its indexer keys' offset in idx_keys_
  std::vector<TensorView> views_;    // the wave's key matrices (two per row: K, K^T), which jobs_ point at
  std::vector<MatMulJob> jobs_;
  std::vector<int32_t> picked_;
  mutable std::vector<float> row_a_, row_b_;
};

}  // namespace deepinfer
