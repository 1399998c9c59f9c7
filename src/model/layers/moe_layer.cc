#include "model/layers/moe_layer.h"

#include <chrono>

#include "dist/comm_stream.h"

namespace deepinfer {

MoeLayer::MoeLayer(const Ops& ops, const Model& model, const ModelConfig& lc, int max_tokens, const dist::DistContext* dist)
    : model_(model), c_(model.config), dist_(dist) {
  // Expert parallelism: one expert may receive every rank's tokens.
  moe_ = std::make_unique<MoeMlp>(ops, lc, max_tokens, dist_ ? dist_->pc.world : 1);
  for (const LayerWeights& L : model_.layers)
    if (L.is_moe() && !L.moe.placement.empty() && dist_) {
      placement_.resize(c_.n_layers);
      expert_load_.assign(c_.n_layers, std::vector<int64_t>(c_.n_experts, 0));
      break;
    }
  // Two-batch overlap: a micro-batch holds at most half the batch, but the buffers are sized for the whole one.
  if (overlappable()) moe2_ = std::make_unique<MoeMlp>(ops, lc, max_tokens, dist_->pc.world);
  for (int l = 0; l < static_cast<int>(placement_.size()); ++l) placement_[l] = model_.layers[l].moe.placement;
  if (!placement_.empty()) {
    ep_weights_.resize(c_.n_layers);
    ep_moved_.resize(c_.n_layers);
    for (int l = 0; l < c_.n_layers; ++l)
      if (model_.layers[l].is_moe()) {
        ep_weights_[l] = model_.layers[l].moe;
        ep_moved_[l].resize(c_.n_experts);
      }
  }
}

Status MoeLayer::TpAllReduce(float* y, int n) const {
  if (!dist_ || dist_->pc.tp == 1 || n == 0) return Status::Ok();
  const Status s = dist_->tp->AllReduceSum(y, static_cast<size_t>(n) * c_.hidden);
  return s.ok() ? s : Status(s.code(), "tensor-parallel all-reduce: " + s.message());
}

Status MoeLayer::Forward(const LayerWeights& L, int layer, const float* xn, int n, float* y, const int32_t* tokens) {
  if (L.moe.placement.empty()) {
    if (n == 0) return Status::Ok();
    moe_->Forward(L.moe, xn, n, y, tokens);
    return TpAllReduce(y, n);  // tensor parallel: each rank's down projections cover its slice of the experts
  }
  // Expert parallel: collective over every rank, even with no rows here.
  const bool live = layer >= 0 && !placement_.empty();
  dist::Communicator& comm = *dist_->moe;
  moe_->EpBegin(live ? ep_weights_[layer] : L.moe, live ? placement_[layer] : L.moe.placement, xn, n, 0, comm.size(),
                dist_->pc.tp_rank(), dist_->pc.tp, dist_->pc.moe_tp(), live ? expert_load_[layer].data() : nullptr, tokens);
  // The two exchanges, timed: without two-batch overlap all of their time is exposed (the executor waits).
  const auto t0 = std::chrono::steady_clock::now();
  Status s = moe_->EpDispatch(comm);
  const auto t1 = std::chrono::steady_clock::now();
  if (s.ok()) s = moe_->EpExperts(comm.rank());
  const auto t2 = std::chrono::steady_clock::now();
  if (s.ok()) s = moe_->EpCombine(comm);
  const auto t3 = std::chrono::steady_clock::now();
  if (!s.ok()) return Status(s.code(), "expert-parallel MoE: " + s.message());
  const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>((t1 - t0) + (t3 - t2)).count();
  dist_->moe_exchange_ns.fetch_add(ns, std::memory_order_relaxed);
  dist_->moe_exposed_ns.fetch_add(ns, std::memory_order_relaxed);
  moe_->EpEnd(y);
  dist_->expert_rows.fetch_add(moe_->ep_rows_computed(), std::memory_order_relaxed);
  return TpAllReduce(y, n);
}

void MoeLayer::Begin(int layer, int micro, const float* xn, int n, int row0, const int32_t* tokens) {
  dist::Communicator* comm = dist_->moe.get();
  MoeMlp* moe = micro == 0 ? moe_.get() : moe2_.get();
  moe->EpBegin(ep_weights_[layer], placement_[layer], xn, n, row0, comm->size(), dist_->pc.tp_rank(), dist_->pc.tp,
               dist_->pc.moe_tp(), expert_load_[layer].data(), tokens);
  ticket_[micro] = dist_->moe_stream->Submit([moe, comm] { return moe->EpDispatch(*comm); });
}

Status MoeLayer::Experts(int micro) {
  MoeMlp* moe = micro == 0 ? moe_.get() : moe2_.get();
  Status s = dist_->moe_stream->Wait(ticket_[micro]);
  if (s.ok()) s = moe->EpExperts(dist_->moe->rank());
  if (!s.ok()) return Status(s.code(), "expert-parallel MoE (two-batch overlap): " + s.message());
  dist_->expert_rows.fetch_add(moe->ep_rows_computed(), std::memory_order_relaxed);
  dist::Communicator* comm = dist_->moe.get();
  ticket_[micro] = dist_->moe_stream->Submit([moe, comm] { return moe->EpCombine(*comm); });
  return Status::Ok();
}

Status MoeLayer::End(int micro, float* y) {
  MoeMlp* moe = micro == 0 ? moe_.get() : moe2_.get();
  const Status s = dist_->moe_stream->Wait(ticket_[micro]);
  if (!s.ok()) return Status(s.code(), "expert-parallel MoE (two-batch overlap): " + s.message());
  const int n = moe->ep_rows();
  moe->EpEnd(y);
  return TpAllReduce(y, n);
}

}  // namespace deepinfer
