#include "model/layers/mlp_moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/logging.h"

namespace deepinfer {

MoeMlp::MoeMlp(const Ops& ops, const ModelConfig& c, int max_tokens, int rank_capacity)
    : ops_(ops), hidden_(c.hidden), ff_(c.moe_intermediate), n_experts_(c.n_experts), top_k_(c.n_experts_used),
      shared_ff_(c.shared_ffn), max_tokens_(max_tokens) {
  router_.n_experts = c.n_experts;
  router_.top_k = c.n_experts_used;
  router_.scoring = c.is_dsv4()              ? RouterConfig::Scoring::kSqrtSoftplus
                    : c.router_softmax_topk ? RouterConfig::Scoring::kSoftmaxTopK
                    : c.router_sigmoid      ? RouterConfig::Scoring::kSigmoid
                                            : RouterConfig::Scoring::kSoftmax;
  act_ = c.ffn_act;
  router_.norm_topk_prob = c.norm_topk_prob;
  router_.routed_scaling_factor = c.routed_scaling_factor;
  router_.n_group = c.n_group;
  router_.topk_group = c.topk_group;
  // DeepSeek-V3 (sigmoid) ranks groups by the sum of their top two scores, V2 (softmax) by their best one.
  router_.group_score = c.router_sigmoid ? RouterConfig::GroupScore::kTop2Sum : RouterConfig::GroupScore::kMax;
  const size_t m = static_cast<size_t>(max_tokens), k = static_cast<size_t>(top_k_);
  if (shared_ff_ > 0) {
    sh_gate_.resize(m * shared_ff_);
    sh_up_.resize(sh_gate_.size());
    sh_out_.resize(m * hidden_);
    if (c.shared_expert_gate) sh_scale_.resize(m);
  }
  router_logits_.resize(m * n_experts_);
  route_e_.resize(m * k);
  route_w_.resize(m * k);
  const size_t cap = m * static_cast<size_t>(std::max(1, rank_capacity));
  in_.resize(cap * hidden_);
  gate_.resize(cap * ff_);
  up_.resize(cap * ff_);
  out_k_.resize(m * k * hidden_);
  rows_.resize(m * k);
  expert_first_.resize(n_experts_ + 1);
}

int MoeMlp::DistinctExperts(int n) const {
  std::vector<bool> hit(n_experts_, false);
  for (int i = 0; i < n * top_k_; ++i) hit[route_e_[i]] = true;
  return static_cast<int>(std::count(hit.begin(), hit.end(), true));
}

ExpertPlacement ExpertPlacement::Contiguous(int n_experts, int ranks) {
  std::vector<int32_t> phy2log(n_experts);
  for (int e = 0; e < n_experts; ++e) phy2log[e] = e;
  return FromPhy2Log(std::move(phy2log), n_experts, ranks);
}

ExpertPlacement ExpertPlacement::FromPhy2Log(std::vector<int32_t> phy2log, int n_experts, int ranks) {
  ExpertPlacement p;
  p.per_rank = static_cast<int>(phy2log.size()) / ranks;
  p.log2phy.assign(n_experts, {});
  for (size_t s = 0; s < phy2log.size(); ++s) p.log2phy[phy2log[s]].push_back(static_cast<int32_t>(s));
  p.phy2log = std::move(phy2log);
  return p;
}

namespace {

void AddBias(float* y, const float* b, int n) {
  for (int i = 0; i < n; ++i) y[i] += b[i];
}

// Counting sort of `count` rows by expert, stable (each expert's rows keep their order): rows lists them expert
// by expert, expert e's at [first[e], first[e + 1]).
void SortByExpert(const int32_t* expert_of, int count, int n_experts, std::vector<int>& first, std::vector<int>& next,
                  std::vector<int32_t>& rows) {
  first.assign(n_experts + 1, 0);
  for (int i = 0; i < count; ++i) ++first[expert_of[i] + 1];
  for (int e = 0; e < n_experts; ++e) first[e + 1] += first[e];
  next.assign(first.begin(), first.end() - 1);
  if (static_cast<int>(rows.size()) < count) rows.resize(count);
  for (int i = 0; i < count; ++i) rows[next[expert_of[i]]++] = i;
}

}  // namespace

namespace {

// gate = min(gate, limit), up = clamp(up, -limit, limit) (limit <= 1e-6: no clamp, as llama.cpp reads it).
void ClampSwiGlu(float limit, float* gate, float* up, int64_t n) {
  if (!(limit > 1e-6f)) return;
  for (int64_t i = 0; i < n; ++i) {
    gate[i] = std::min(gate[i], limit);
    up[i] = std::clamp(up[i], -limit, limit);
  }
}

}  // namespace

// Rows sorted by expert (rows_, expert_first_) through their experts: row i's input is in_base + (i / in_div) *
// in_stride, its output goes to out_base + i * hidden. One GEMM per expert over its rows, rows are independent,
// so a row's result does not depend on which other rows share its expert. Experts run in waves of at most
// capacity gathered rows (the buffers' size); a wave's gate/up products (and the shared experts', in the first
// wave) go to the pool as one dispatch, its down products as another: at decode a wave holds every expert the
// batch touched, so the layer streams its expert weights in two passes rather than three per expert.
void MoeMlp::RunExperts(const MoeWeights& w, const float* in_base, size_t in_stride, int in_div, float* out_base,
                        const float* xn, int n, bool shared_pending) {
  const int h = hidden_, ff = ff_;
  const int capacity = static_cast<int>(in_.size() / h);
  shared_pending = shared_pending && n > 0;
  int e = 0;
  while (e < n_experts_ || shared_pending) {
    // The wave: the next experts whose rows fit in in_, gathered there in sorted order (wave row r is row
    // rows_[wave0 + r]).
    const int wave0 = expert_first_[e];
    wave_.clear();
    for (; e < n_experts_; ++e) {
      const int first = expert_first_[e] - wave0, cnt = expert_first_[e + 1] - expert_first_[e];
      if (cnt == 0) continue;
      if (first + cnt > capacity) break;
      wave_.push_back({e, first, cnt});
    }
    const int rows = expert_first_[e] - wave0;
    for (int r = 0; r < rows; ++r)
      std::memcpy(in_.data() + static_cast<size_t>(r) * h, in_base + static_cast<size_t>(rows_[wave0 + r] / in_div) * in_stride,
                  sizeof(float) * h);
    jobs_.clear();
    for (const WaveExpert& we : wave_) {
      const float* in = in_.data() + static_cast<size_t>(we.first) * h;
      jobs_.push_back({&w.gate[we.expert], in, we.count, gate_.data() + static_cast<size_t>(we.first) * ff});
      jobs_.push_back({&w.up[we.expert], in, we.count, up_.data() + static_cast<size_t>(we.first) * ff});
    }
    const bool shared = shared_pending;
    if (shared) {
      jobs_.push_back({&w.shared.gate, xn, n, sh_gate_.data()});
      jobs_.push_back({&w.shared.up, xn, n, sh_up_.data()});
    }
    ops_.MatMulMany(jobs_.data(), static_cast<int>(jobs_.size()));
    if (!w.gate_bias.empty())  // gpt-oss: each product plus its expert's bias, before the activation
      for (const WaveExpert& we : wave_)
        for (int r = we.first; r < we.first + we.count; ++r) {
          AddBias(gate_.data() + static_cast<size_t>(r) * ff, w.gate_bias.data() + static_cast<size_t>(we.expert) * ff, ff);
          AddBias(up_.data() + static_cast<size_t>(r) * ff, w.up_bias.data() + static_cast<size_t>(we.expert) * ff, ff);
        }
    // DeepSeek-V4 clamps its SwiGLU per layer: silu(min(gate, L)) * clamp(up, -L, L) (ggml's swiglu_clamp).
    ClampSwiGlu(w.swiglu_limit, gate_.data(), up_.data(), static_cast<int64_t>(rows) * ff);
    if (act_ == FfnAct::kSwigluOai) ops_.SwiGluOai(gate_.data(), up_.data(), gate_.data(), static_cast<int64_t>(rows) * ff);
    else ops_.SwiGLU(gate_.data(), up_.data(), gate_.data(), static_cast<int64_t>(rows) * ff);
    if (shared) {
      ClampSwiGlu(w.shared_swiglu_limit, sh_gate_.data(), sh_up_.data(), static_cast<int64_t>(n) * shared_ff_);
      ops_.SwiGLU(sh_gate_.data(), sh_up_.data(), sh_gate_.data(), static_cast<int64_t>(n) * shared_ff_);
    }
    // Down projections: routed rows land in in_ (its inputs are consumed), the shared ones in sh_out_.
    jobs_.clear();
    for (const WaveExpert& we : wave_)
      jobs_.push_back({&w.down[we.expert], gate_.data() + static_cast<size_t>(we.first) * ff, we.count,
                       in_.data() + static_cast<size_t>(we.first) * h});
    if (shared) jobs_.push_back({&w.shared.down, sh_gate_.data(), n, sh_out_.data()});
    ops_.MatMulMany(jobs_.data(), static_cast<int>(jobs_.size()));
    if (!w.down_bias.empty())  // before the routing weight multiplies it (Combine), as llama.cpp adds it
      for (const WaveExpert& we : wave_)
        for (int r = we.first; r < we.first + we.count; ++r)
          AddBias(in_.data() + static_cast<size_t>(r) * h, w.down_bias.data() + static_cast<size_t>(we.expert) * h, h);
    for (int r = 0; r < rows; ++r)
      std::memcpy(out_base + static_cast<size_t>(rows_[wave0 + r]) * h, in_.data() + static_cast<size_t>(r) * h, sizeof(float) * h);
    shared_pending = false;
    if (rows == 0 && !shared && e < n_experts_) {
      DI_LOG_ERROR("moe: an expert has more rows than the buffers hold");
      std::abort();
    }
  }
}

// out = the weighted sum of each token's expert outputs (out_k_) in routing order (best expert first, as
// llama.cpp adds them), then the shared experts (sh_out_). mine (optional): rows not marked stay 0.
// sh_x / sh_n: the shared experts' input rows (xn, or with shared_compact the marked rows only, in order;
// sh_out_ row i then belongs to the i-th marked row).
void MoeMlp::Combine(const MoeWeights& w, const float* sh_x, int sh_n, int n, float* out, const std::vector<uint8_t>* mine,
                     bool shared_compact) {
  const int h = hidden_, K = top_k_;
  for (int t = 0; t < n; ++t) {
    float* o = out + static_cast<size_t>(t) * h;
    if (mine && !(*mine)[t]) {
      std::memset(o, 0, sizeof(float) * h);
      continue;
    }
    for (int k = 0; k < K; ++k) {
      const float wk = route_w_[t * K + k];
      const float* y = out_k_.data() + static_cast<size_t>(t * K + k) * h;
      if (k == 0)
        for (int d = 0; d < h; ++d) o[d] = y[d] * wk;
      else
        for (int d = 0; d < h; ++d) o[d] += y[d] * wk;
    }
  }
  if (w.shared.empty() || n == 0 || sh_n == 0) return;
  // Shared experts, added after the routed sum; Qwen2-MoE scales them per token by sigmoid(x . shared_gate).
  if (w.shared_gate.data) ops_.MatMul(w.shared_gate, sh_x, sh_n, sh_scale_.data());
  for (int t = 0, i = 0; t < n; ++t) {
    if (mine && !(*mine)[t]) continue;
    const int srow = shared_compact ? i++ : t;
    float* o = out + static_cast<size_t>(t) * h;
    const float* y = sh_out_.data() + static_cast<size_t>(srow) * h;
    if (w.shared_gate.data) {
      const float g = 1.f / (1.f + std::exp(-sh_scale_[srow]));
      for (int d = 0; d < h; ++d) o[d] += y[d] * g;
    } else {
      for (int d = 0; d < h; ++d) o[d] += y[d];
    }
  }
}

void MoeMlp::Route(const MoeWeights& w, const float* xn, int n, const int32_t* tokens) {
  if (n == 0) return;
  ops_.MatMul(w.router, xn, n, router_logits_.data(), w.router_bias.empty() ? nullptr : w.router_bias.data());
  router_.correction_bias = w.exp_probs_bias;  // per layer (empty when the model has none)
  if (!w.tid2eid.empty()) {  // DeepSeek-V4's hash layers: the experts by token id, weighted by their scores
    if (!tokens) {
      DI_LOG_ERROR("moe: a hash-routed layer was given no token ids");
      std::abort();
    }
    RouteByToken(router_, router_logits_.data(), n, tokens, w.tid2eid.data(), route_e_.data(), route_w_.data());
    return;
  }
  RouteTokens(router_, router_logits_.data(), n, route_e_.data(), route_w_.data());
}

void MoeMlp::Forward(const MoeWeights& w, const float* xn, int n, float* out, const int32_t* tokens) {
  Route(w, xn, n, tokens);
  const int pairs = n * top_k_;
  SortByExpert(route_e_.data(), pairs, n_experts_, expert_first_, sort_next_, rows_);
  RunExperts(w, xn, static_cast<size_t>(hidden_), top_k_, out_k_.data(), xn, n, !w.shared.empty());
  Combine(w, xn, n, n, out, nullptr, false);
}

void MoeMlp::EpBegin(const MoeWeights& w, const ExpertPlacement& pl, const float* xn, int n, int row0, int ranks,
                     int tp_rank, int tp_size, int group_size, int64_t* load, const int32_t* tokens) {
  const int h = hidden_, K = top_k_, P = ranks, G = group_size;
  const size_t row = static_cast<size_t>(h) + 1;  // [physical slot (int32 bits), hidden floats]
  ep_w_ = &w;
  ep_pl_ = &pl;
  ep_n_ = n;
  ep_ranks_ = P;
  ep_group_ = G;
  Route(w, xn, n, tokens);
  // 1. This rank's pairs, each to the group owning one slot of its expert (replicas spread by the pair's index in
  //    the whole batch, row0 + t, so a micro-batch picks the replicas the whole batch would): to each of the
  //    group's G ranks (G > 1: each holds a 1/G slice of every expert it serves), packed by destination rank in
  //    pair order. Rows are this rank's to route by their index in the whole batch too.
  ep_mine_.assign(n, 0);
  ep_dest_.clear();
  ep_order_.clear();
  ep_slot_.clear();
  ep_counts_.assign(P, 0);
  for (int t = 0; t < n; ++t) {
    const int bt = row0 + t;
    if (bt % tp_size != tp_rank) continue;
    ep_mine_[t] = 1;
    for (int k = 0; k < K; ++k) {
      const auto& slots = pl.log2phy[route_e_[t * K + k]];
      const int32_t slot = slots[(bt * K + k) % slots.size()];
      if (load) ++load[route_e_[t * K + k]];
      for (int j = 0; j < G; ++j) {
        const int dest = pl.owner(slot) * G + j;
        ep_slot_.push_back(slot);
        ep_dest_.push_back(dest);
        ep_order_.push_back(t * K + k);
        ++ep_counts_[dest];
      }
    }
  }
  const int sent = static_cast<int>(ep_order_.size());
  // Packed row of pair j: its destination's first row plus how many earlier pairs went there.
  ep_fill_.assign(P, 0);
  for (int r = 1; r < P; ++r) ep_fill_[r] = ep_fill_[r - 1] + ep_counts_[r - 1];
  ep_send_.resize(static_cast<size_t>(sent) * row);
  ep_pos_.resize(sent);  // pair j (in ep_order_) sits at packed row ep_pos_[j]
  for (int j = 0; j < sent; ++j) {
    const int pr = static_cast<int>(ep_fill_[ep_dest_[j]]++);
    ep_pos_[j] = pr;
    float* dst = ep_send_.data() + static_cast<size_t>(pr) * row;
    std::memcpy(dst, &ep_slot_[j], sizeof(int32_t));
    std::memcpy(dst + 1, xn + static_cast<size_t>(ep_order_[j] / K) * h, sizeof(float) * h);
  }
  // The shared experts run over the rows this rank routes only: the other ranks of its attention TP group hold
  // the same rows and add the rest (rows are independent, so a compact batch changes no row's result).
  ep_sh_x_ = xn;
  ep_sh_n_ = n;
  ep_compact_ = tp_size > 1 && !w.shared.empty();
  if (ep_compact_) {
    ep_sh_n_ = 0;
    ep_shared_in_.resize(static_cast<size_t>(n) * h);
    for (int t = 0; t < n; ++t)
      if (ep_mine_[t])
        std::memcpy(ep_shared_in_.data() + static_cast<size_t>(ep_sh_n_++) * h, xn + static_cast<size_t>(t) * h, sizeof(float) * h);
    ep_sh_x_ = ep_shared_in_.data();
  }
}

Status MoeMlp::EpDispatch(dist::Communicator& comm) {
  const int P = ep_ranks_;
  const size_t row = static_cast<size_t>(hidden_) + 1;
  if (comm.size() != P) return Internal("moe: dispatch over a communicator of another size");
  // 2. Counts, then the rows.
  ep_recv_counts_.resize(P);
  DI_RETURN_IF_ERROR(comm.AllToAll(ep_counts_.data(), sizeof(int64_t), ep_recv_counts_.data()));
  ep_received_ = 0;
  ep_send_bytes_.resize(P);
  ep_recv_bytes_.resize(P);
  for (int r = 0; r < P; ++r) {
    ep_send_bytes_[r] = static_cast<size_t>(ep_counts_[r]) * row * sizeof(float);
    ep_recv_bytes_[r] = static_cast<size_t>(ep_recv_counts_[r]) * row * sizeof(float);
    ep_received_ += static_cast<int>(ep_recv_counts_[r]);
  }
  ep_recv_.resize(static_cast<size_t>(ep_received_) * row);
  return comm.AllToAllV(ep_send_.data(), ep_send_bytes_.data(), ep_recv_.data(), ep_recv_bytes_.data());
}

Status MoeMlp::EpExperts(int comm_rank) {
  const int h = hidden_, G = ep_group_, received = ep_received_;
  const size_t row = static_cast<size_t>(h) + 1;
  const ExpertPlacement& pl = *ep_pl_;
  // 3. The received rows through this rank's experts (and the shared experts over the local rows).
  ep_expert_of_.resize(received);
  for (int i = 0; i < received; ++i) {
    int32_t slot;
    std::memcpy(&slot, ep_recv_.data() + static_cast<size_t>(i) * row, sizeof(int32_t));
    if (slot < 0 || slot >= static_cast<int32_t>(pl.phy2log.size()) || pl.owner(slot) != comm_rank / G)
      return Internal("moe: received a row for expert slot " + std::to_string(slot) + ", which this rank does not hold");
    ep_expert_of_[i] = pl.phy2log[slot];
  }
  SortByExpert(ep_expert_of_.data(), received, n_experts_, expert_first_, sort_next_, rows_);
  ep_back_.resize(static_cast<size_t>(received) * h);
  RunExperts(*ep_w_, ep_recv_.data() + 1, row, 1, ep_back_.data(), ep_sh_x_, ep_sh_n_, !ep_w_->shared.empty());
  ep_rows_computed_ = received;
  return Status::Ok();
}

Status MoeMlp::EpCombine(dist::Communicator& comm) {
  const int P = ep_ranks_;
  const size_t row = static_cast<size_t>(hidden_) + 1, h = static_cast<size_t>(hidden_);
  // 4. The outputs back to where the rows came from.
  for (int r = 0; r < P; ++r) {
    std::swap(ep_send_bytes_[r], ep_recv_bytes_[r]);
    ep_send_bytes_[r] = ep_send_bytes_[r] / row * h;
    ep_recv_bytes_[r] = ep_recv_bytes_[r] / row * h;
  }
  ep_ret_.resize(ep_order_.size() * h);
  return comm.AllToAllV(ep_back_.data(), ep_send_bytes_.data(), ep_ret_.data(), ep_recv_bytes_.data());
}

void MoeMlp::EpEnd(float* out) {
  const int h = hidden_, G = ep_group_, sent = static_cast<int>(ep_order_.size());
  // A pair's G partial outputs (its group's ranks in order, each over its slice of the expert's width) are
  // consecutive in ep_order_: summed in that order, so the result does not depend on arrival.
  for (int j = 0; j < sent; ++j) {
    float* dst = out_k_.data() + static_cast<size_t>(ep_order_[j]) * h;
    const float* src = ep_ret_.data() + static_cast<size_t>(ep_pos_[j]) * h;
    if (j % G == 0) std::memcpy(dst, src, sizeof(float) * h);
    else for (int d = 0; d < h; ++d) dst[d] += src[d];
  }
  ep_pairs_sent_ = sent;
  Combine(*ep_w_, ep_sh_x_, ep_sh_n_, ep_n_, out, &ep_mine_, ep_compact_);
}

}  // namespace deepinfer
