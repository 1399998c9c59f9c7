// The routed MLP (Qwen3-MoE, Qwen2-MoE, Mixtral, DeepSeekMoE): a router picks each token's top-k experts
// (router.h), each expert is a SwiGLU run as one GEMM over the tokens routed to it, the k results are summed
// with their weights in routing order; shared experts (a dense SwiGLU every token takes, optionally scaled by a
// per-token sigmoid gate) are added after.
#pragma once
#include <vector>

#include "kernels/cpu/gemm.h"
#include "model/config.h"
#include "model/layers/mlp_dense.h"
#include "model/layers/router.h"
#include "tensor/tensor.h"

namespace deepinfer {

struct MoeWeights {
  TensorView router;                   // {n_experts, hidden} (replicated)
  std::vector<float> exp_probs_bias;   // deepseek-v3 e_score_correction_bias: added for selection only
  // Routed experts, one view each (so a placement over expert-parallel ranks is a choice of views).
  std::vector<TensorView> gate, up;    // {moe_ff, hidden}
  std::vector<TensorView> down;        // {hidden, moe_ff}
  DenseMlpWeights shared;              // shared expert(s) as one SwiGLU of shared_ffn (empty: none)
  TensorView shared_gate;              // qwen2_moe: {1, hidden}, out += sigmoid(x . shared_gate) * shared(x)
};

class MoeMlp {
 public:
  MoeMlp(const ModelConfig& c, int max_tokens);
  // out (n rows of hidden) = the routed (and shared) experts over xn.
  void Forward(const MoeWeights& w, const float* xn, int n, float* out);
  // How many distinct experts the last Forward's n tokens touched (bench layers).
  int DistinctExperts(int n) const;

 private:
  struct WaveExpert {
    int expert, first, count;  // the expert's gathered rows are [first, first + count) of in_
  };
  int hidden_, ff_, n_experts_, top_k_, shared_ff_, max_tokens_;
  RouterConfig router_;
  std::vector<float> router_logits_, route_w_, in_, gate_, up_, out_k_;
  std::vector<int32_t> route_e_, rows_;
  std::vector<WaveExpert> wave_;
  std::vector<int> expert_first_, sort_next_;  // pairs sorted by expert: offsets into rows_, fill cursors
  std::vector<MatMulJob> jobs_;
  std::vector<float> sh_gate_, sh_up_, sh_out_, sh_scale_;
};

}  // namespace deepinfer
