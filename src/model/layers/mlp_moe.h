// The routed MLP (Qwen3-MoE, Qwen2-MoE, Mixtral, DeepSeekMoE): a router picks each token's top-k experts
// (router.h), each expert is a SwiGLU run as one GEMM over the tokens routed to it, the k results are summed
// with their weights in routing order; shared experts (a dense SwiGLU every token takes, optionally scaled by a
// per-token sigmoid gate) are added after.
#pragma once
#include <vector>

#include "dist/communicator.h"

#include "kernels/ops.h"
#include "model/config.h"
#include "model/layers/mlp_dense.h"
#include "model/layers/router.h"
#include "tensor/tensor.h"

namespace deepinfer {

// Expert parallelism: where each expert lives. Physical slot p holds logical expert phy2log[p]; expert-parallel
// rank r owns slots [r * per_rank, (r + 1) * per_rank). A logical expert with several slots (a redundant expert,
// EPLB) has identical weights in each, so which replica serves a token changes no result. Empty: no EP.
struct ExpertPlacement {
  std::vector<int32_t> phy2log;
  std::vector<std::vector<int32_t>> log2phy;  // per logical expert: its slots, ascending
  int per_rank = 0;
  bool empty() const { return phy2log.empty(); }
  int owner(int slot) const { return slot / per_rank; }
  // The default placement: experts in order, n_experts / ranks consecutive ones per rank.
  static ExpertPlacement Contiguous(int n_experts, int ranks);
  static ExpertPlacement FromPhy2Log(std::vector<int32_t> phy2log, int n_experts, int ranks);
  // Whether expert-parallel rank `rank` holds a slot of logical expert e.
  bool Holds(int e, int rank) const {
    for (int32_t s : log2phy[e])
      if (owner(s) == rank) return true;
    return false;
  }
};

struct MoeWeights {
  TensorView router;                   // {n_experts, hidden} (replicated)
  std::vector<float> exp_probs_bias;   // deepseek-v3 e_score_correction_bias: added for selection only
  std::vector<float> router_bias;      // gpt-oss: the router linear's bias {n_experts} (part of the logits)
  // gpt-oss: per logical expert e, biases of its gate/up ({moe_ff} at e * moe_ff) and down ({hidden} at e * hidden)
  // projections, added to each product before the activation and before the routing weight.
  std::vector<float> gate_bias, up_bias, down_bias;
  // DeepSeek-V4: hash layers route by token id (tid2eid: vocab x top_k expert ids, empty elsewhere), and the
  // experts' SwiGLU is clamped (silu(min(gate, L)) * clamp(up, -L, L); 0: no clamp), the shared expert's by its own L.
  std::vector<int32_t> tid2eid;
  float swiglu_limit = 0.f, shared_swiglu_limit = 0.f;
  // Routed experts, one view each (so a placement over expert-parallel ranks is a choice of views).
  std::vector<TensorView> gate, up;    // {moe_ff, hidden}
  std::vector<TensorView> down;        // {hidden, moe_ff}
  DenseMlpWeights shared;              // shared expert(s) as one SwiGLU of shared_ffn (empty: none)
  TensorView shared_gate;              // qwen2_moe: {1, hidden}, out += sigmoid(x . shared_gate) * shared(x)
  // Expert parallelism (empty: every expert is local). Under EP only the experts of this rank's slots have
  // weights (gate/up/down views of the others are empty).
  ExpertPlacement placement;
};

class MoeMlp {
 public:
  // rank_capacity: how many ranks' tokens one expert may receive (expert parallelism sizes the buffers for
  // every rank routing every token to one expert).
  MoeMlp(const Ops& ops, const ModelConfig& c, int max_tokens, int rank_capacity = 1);
  // out (n rows of hidden) = the routed (and shared) experts over xn.
  // tokens: the rows' token ids (hash-routed layers need them; may be null otherwise).
  void Forward(const MoeWeights& w, const float* xn, int n, float* out, const int32_t* tokens = nullptr);
  // Expert parallel (w.placement set): collective over comm (every rank of the job, each with its own n, which
  // may be 0). Rows t with t % tp_size == tp_rank are this rank's to route (the other ranks of its attention
  // tensor-parallel group hold the same rows and route the rest); their (token, slot) pairs go to the ranks
  // owning the chosen experts' slots (all-to-all-v), come back as expert outputs, and are summed exactly as
  // Forward sums them (slot order, then the shared experts), so a row's result is bitwise the one-process
  // result. Rows of the other tp ranks are left 0 in out (the caller's tp all-reduce adds them, exactly).
  // pl: where the experts live now (the layer's placement over comm.size() / group_size groups, changed by
  // online rebalancing); group_size > 1: each group's ranks hold a 1/group_size slice of its experts' width
  // (comm rank = group * group_size + j), a pair goes to all of them and their partial outputs are summed in j
  // order (no longer bitwise the one-process sum: the down projection's sum is split, as under tensor
  // parallelism). load (optional, n_experts entries): each pair this rank routes adds 1 to its logical expert.
  // row0: the index of row 0 in the whole batch when xn is a part of it (two-batch overlap): which rows this
  // rank routes and which replica a pair takes follow the whole batch's row numbers.
  // The forward runs in stages, so two-batch overlap (model/transformer_tbo.cc) can run the other micro-batch's
  // work between them (without overlap they run back to back). EpBegin (compute thread) routes and packs the
  // pairs by destination (ranks: comm.size()); EpDispatch and EpCombine are the two exchanges and touch only this object's buffers, so they may run on a
  // communication thread; EpExperts (compute thread) runs the received rows through this rank's experts; EpEnd
  // sums the returned outputs into out (n rows). xn, w and pl must stay valid until EpEnd.
  // tokens: the rows' token ids (hash-routed layers need them).
  void EpBegin(const MoeWeights& w, const ExpertPlacement& pl, const float* xn, int n, int row0, int ranks, int tp_rank,
               int tp_size, int group_size, int64_t* load, const int32_t* tokens = nullptr);
  Status EpDispatch(dist::Communicator& comm);
  Status EpExperts(int comm_rank);
  Status EpCombine(dist::Communicator& comm);
  void EpEnd(float* out);
  // Expert-parallel traffic of the last EpBegin..EpEnd: (token, slot) pairs this rank sent and expert rows it computed.
  int64_t ep_pairs_sent() const { return ep_pairs_sent_; }
  int64_t ep_rows_computed() const { return ep_rows_computed_; }
  int ep_rows() const { return ep_n_; }  // rows of the call in progress (EpBegin's n)
  // How many distinct experts the last Forward's n tokens touched (bench layers).
  int DistinctExperts(int n) const;

 private:
  const Ops& ops_;
  // The expert GEMMs over gathered rows: in_ holds `rows` inputs sorted by expert (expert_first_ offsets); the
  // outputs replace them in in_. shared: also run the shared experts over xn (n rows) into sh_out_.
  void RunExperts(const MoeWeights& w, const float* in_base, size_t in_stride, int in_div, float* out_base, const float* xn,
                  int n, bool shared);
  void Route(const MoeWeights& w, const float* xn, int n, const int32_t* tokens = nullptr);
  void Combine(const MoeWeights& w, const float* sh_x, int sh_n, int n, float* out, const std::vector<uint8_t>* mine,
               bool shared_compact);
  struct WaveExpert {
    int expert, first, count;  // the expert's gathered rows are [first, first + count) of in_
  };
  int hidden_, ff_, n_experts_, top_k_, shared_ff_, max_tokens_;
  FfnAct act_ = FfnAct::kSilu;  // the experts' gated activation (SwiGLU, or gpt-oss's clamped form)
  RouterConfig router_;
  std::vector<float> router_logits_, route_w_, in_, gate_, up_, out_k_;
  std::vector<int32_t> route_e_, rows_;
  std::vector<WaveExpert> wave_;
  std::vector<int> expert_first_, sort_next_;  // pairs sorted by expert: offsets into rows_, fill cursors
  std::vector<MatMulJob> jobs_;
  std::vector<float> sh_gate_, sh_up_, sh_out_, sh_scale_;
  // Expert parallel: outgoing/incoming rows ([expert id as int32 bits, hidden floats] each) and counts.
  std::vector<float> ep_send_, ep_recv_, ep_back_, ep_ret_;
  std::vector<int32_t> ep_dest_, ep_order_, ep_slot_, ep_pos_, ep_expert_of_;
  std::vector<int64_t> ep_fill_, ep_recv_counts_;
  std::vector<size_t> ep_send_bytes_, ep_recv_bytes_;
  std::vector<int64_t> ep_counts_;
  std::vector<uint8_t> ep_mine_;
  std::vector<float> ep_shared_in_;  // the rows this rank routes, compacted for the shared experts (tp > 1)
  // The call in progress between EpBegin and EpEnd.
  const MoeWeights* ep_w_ = nullptr;
  const ExpertPlacement* ep_pl_ = nullptr;
  const float* ep_sh_x_ = nullptr;  // the shared experts' input rows (xn, or ep_shared_in_ when compact)
  int ep_n_ = 0, ep_sh_n_ = 0, ep_ranks_ = 1, ep_group_ = 1, ep_received_ = 0;
  bool ep_compact_ = false;
  int64_t ep_pairs_sent_ = 0, ep_rows_computed_ = 0;
};

}  // namespace deepinfer
