// The routed-expert layer as a forward sees it: the experts of every MoE layer of a model, run on this rank
// (MoeMlp) or spread over the expert-parallel ranks, which the layer reaches itself (dispatch, experts, combine),
// the tensor-parallel reduction of its output, the live expert placements and the loads counted for online
// rebalancing (EPLB, moe_layer_eplb.cc). Two-batch overlap (model/two_batch_overlap.cc) runs the same
// expert-parallel sequence in stages for two micro-batches; without it the stages run back to back (Forward).
// The expert-parallel sequence is written once, here.
#pragma once
#include <memory>
#include <vector>

#include "base/host_buffer.h"
#include "deepinfer/status.h"
#include "dist/parallel.h"
#include "model/model.h"

namespace deepinfer {

// What an online rebalance did (MoeLayer::Rebalance).
struct ExpertRebalanceReport {
  int moved_slots = 0;                               // physical slots (over all MoE layers) now holding another expert
  double imbalance_before = 1, imbalance_after = 1;  // worst layer's max/mean rank load under the counted loads
  int64_t pairs = 0;                                 // (token, expert) pairs counted
  int experts_sent = 0;                              // experts copied between ranks over MPI (every rank's, all layers)
  int64_t bytes_sent = 0;                            // their bytes
};

class MoeLayer {
 public:
  // lc: this rank's shapes. dist: the job's communicators (nullptr: one process), passed in by whoever built the
  // forward; the layer writes its traffic counters there.
  MoeLayer(const Ops& ops, const Model& model, const ModelConfig& lc, int max_tokens, const dist::DistContext* dist);

  // y (n rows of hidden) = the routed and shared experts of main layer `layer` (or an MTP module's: layer < 0)
  // over xn, summed over the tensor-parallel ranks. Expert parallel: collective over every rank, even with n = 0.
  // tokens: the rows' token ids (hash-routed layers).
  Status Forward(const LayerWeights& L, int layer, const float* xn, int n, float* y, const int32_t* tokens = nullptr);

  // Two-batch overlap: micro-batch `micro` (0 or 1) of main layer `layer` in three stages (xn: its n rows,
  // row0: its first row in the whole batch). Begin routes and submits the dispatch to the communication stream;
  // Experts waits for it, runs this rank's experts and submits the combine; End waits and writes y (n rows,
  // tensor-parallel reduced). Every rank calls the same stages in the same order. tokens: the micro-batch's n
  // token ids (hash-routed layers).
  void Begin(int layer, int micro, const float* xn, int n, int row0, const int32_t* tokens = nullptr);
  Status Experts(int micro);
  Status End(int micro, float* y);

  // Whether the experts are spread over ranks (the layer weights carry a placement).
  bool expert_parallel() const { return !placement_.empty(); }
  // Two-batch overlap is possible: expert parallel, with a communication stream.
  bool overlappable() const { return expert_parallel() && dist_ && dist_->moe_stream; }

  // Online EPLB, collective over every rank (call at the same step everywhere, between forwards): the loads
  // counted since the last call (summed over the ranks in rank order) go through DeepSeek's EPLB; the
  // placements change to its result, identically on every rank, and the experts a rank newly holds arrive over
  // MPI from a rank that held them. Outputs do not change: a replica is the same weights wherever it runs.
  StatusOr<ExpertRebalanceReport> Rebalance();

  // How many distinct experts the last local Forward's n rows touched (bench layers).
  int DistinctExperts(int n) const { return moe_->DistinctExperts(n); }

 private:
  Status MoveExperts(int l, const ExpertPlacement& next, ExpertRebalanceReport* rep);
  Status TpAllReduce(float* y, int n) const;

  const Model& model_;
  const ModelConfig& c_;
  const dist::DistContext* dist_;
  std::unique_ptr<MoeMlp> moe_, moe2_;  // moe2_: the second micro-batch's state under two-batch overlap
  uint64_t ticket_[2] = {0, 0};         // each micro-batch's exchange in flight on the stream
  // Expert parallelism: each main layer's live placement (starts as the model's) and its expert loads since the
  // last rebalance. Empty without EP.
  std::vector<ExpertPlacement> placement_;
  std::vector<std::vector<int64_t>> expert_load_;
  // This rank's routed experts per main layer (a copy of the layer's views, changed by rebalancing): views into the
  // model for the experts held since load, into ep_moved_[l][e] for an expert received from another rank.
  std::vector<MoeWeights> ep_weights_;
  std::vector<std::vector<std::unique_ptr<HostBuffer>>> ep_moved_;
  std::vector<std::unique_ptr<HostBuffer>> ep_free_;  // buffers of experts handed on, reused by the next arrival
};

}  // namespace deepinfer
