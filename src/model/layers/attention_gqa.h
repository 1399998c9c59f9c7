// Grouped-query attention (llama, mistral, qwen2/3 and their MoE variants): q/k/v projections (optional biases),
// optional RMSNorm of q and k (per head or whole), RoPE (skipped on NoPE layers), K/V appended to the paged cache, causal attention over each
// sequence's cached rows (or, on a sliding-window layer, its last `window` of them), output projection.
#pragma once
#include <vector>

#include "dist/communicator.h"
#include "kernels/ops.h"
#include "kv/paged_kv_cache.h"
#include "model/config.h"
#include "model/layers/batch.h"
#include "tensor/tensor.h"

namespace deepinfer {

struct GqaWeights {
  TensorView wq, wk, wv;              // {heads * head_dim | kv_heads * head_dim, hidden}, column-parallel by head
  TensorView wo;                      // {hidden, heads * head_dim}, row-parallel
  std::vector<float> bq, bk, bv;      // qwen2: projection biases (split with their rows)
  std::vector<float> q_norm, k_norm;  // q/k RMSNorm weights: {head_dim} per head (qwen3), or whole (OLMo 2)
  std::vector<float> bo;              // gpt-oss: the output projection's bias {hidden}
  std::vector<float> sinks;           // gpt-oss: a softmax sink logit per query head {heads}
};

// Whole-projection q/k norms (QkNorm::kWhole) under tensor parallelism: a rank's rows hold its heads only, so
// the rows' sums of squares are completed across the tensor-parallel group before normalizing. tp null: one
// rank holds every head. q_width / k_width: the whole projections' widths; k_replicas: ranks holding each KV
// head (tp > kv heads replicates them: their squares are counted that many times by the group's sum).
struct WholeNormSplit {
  dist::Communicator* tp = nullptr;
  int q_width = 0, k_width = 0, k_replicas = 1;
};

class GqaAttention {
 public:
  // ops: the device's ops (kernels/ops.h) the layer runs on. c: this rank's shapes.
  GqaAttention(const Ops& ops, const ModelConfig& c, int max_tokens, WholeNormSplit split = {});
  // out (n rows of hidden) = wo(attention(xn)); the batch's K/V rows go to layer kv_layer of kv. rope false:
  // q and k keep no position (SmolLM3's NoPE layers). A failed K/V exchange (context parallelism) is returned.
  Status Forward(const GqaWeights& w, const BatchView& b, int kv_layer, PagedKvCache& kv, bool rope, const float* xn,
                 float* out);

 private:
  const Ops& ops_;
  int n_heads_, n_kv_, head_dim_;
  // The split whole-projection norms: each row's sum of squares completed across the group, then the rows
  // scaled (ss_: q's then k's sums, 2 per row).
  Status SplitWholeNorm(const GqaWeights& w, int n);
  QkNorm qk_norm_;
  WholeNormSplit split_;
  std::vector<double> ss_;
  std::vector<float> partial_;  // ss_ rounded to f32 for the all-reduce (kept: no allocation per call)
  float eps_;
  float scale_;  // the softmax scale
  // Per layer: its window (0: full attention). Windowed layers rotate with rope_swa_, the others with rope_.
  std::vector<int> window_;
  RopeTable rope_, rope_swa_;
  std::vector<float> q_, k_, v_, attn_;
};

}  // namespace deepinfer
