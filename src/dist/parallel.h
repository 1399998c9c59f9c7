// How the ranks of a job are laid out (the mpirun contract, docs/configuration.md "Multi-process"):
//   attention:  rank = (dp_rank * cp + cp_rank) * tp + tp_rank     (D data-parallel groups of C x T ranks)
//   MoE layers: rank = ep_rank * moe_tp + moe_tp_rank              (E expert-parallel groups of N / E ranks)
// MoE layers either follow attention's tensor parallelism (ep = 1 and tp = N: every expert split like the dense
// MLP, no dispatch) or dispatch tokens (every other layout): a token's row goes to the N / E ranks of the group
// that holds its expert, each computes its 1 / (N / E) slice of that expert (moe_tp > 1) or all of it (E = N).
// Each attention group (one dp_rank) runs its own scheduler, KV pool and overlap loop; its tp ranks run that
// schedule in lockstep (identical inputs, identical sampled tokens). MoE layers are collective over all N ranks.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "deepinfer/status.h"
#include "dist/comm_stream.h"
#include "dist/communicator.h"

namespace deepinfer::dist {

struct ParallelConfig {
  int world = 1, rank = 0;
  int dp = 1, cp = 1, tp = 1, ep = 1;
  // Expert parallelism: extra physical expert slots (replicas of hot experts, chosen by EPLB) and how many engine
  // steps pass between online rebalances (0: the placement never changes).
  int redundant_experts = 0;
  int eplb_interval = 0;
  // Context parallelism: how a prefill chunk's rows are divided over the C ranks (model/layers/context_parallel.h):
  // false = balanced head-tail pieces, true = contiguous pieces (the naive split, for comparison).
  bool cp_contiguous = false;
  // Two-batch overlap (--enable-two-batch-overlap): each forward's batch runs as two micro-batches, one's MoE
  // dispatch/combine on a communication thread while the other computes (needs expert dispatch, no CP).
  bool two_batch_overlap = false;
  // How rank 0 picks a data-parallel group per request (--dp-policy): a router policy name
  // (routing/routing_policy.h MakePolicy); cache_aware scores groups by the KV blocks their events say they hold.
  std::string dp_policy = "cache_aware";

  int moe_tp() const { return world / ep; }
  // Whether MoE layers dispatch tokens to expert groups (all-to-all-v) rather than follow attention's TP.
  bool expert_dispatch() const { return ep > 1 || tp != world; }
  int dp_rank() const { return rank / (cp * tp); }
  int cp_rank() const { return rank / tp % cp; }
  int tp_rank() const { return rank % tp; }
  int ep_rank() const { return rank / moe_tp(); }
  int moe_tp_rank() const { return rank % moe_tp(); }
  // The rank that speaks for attention group g (its outputs go to rank 0).
  int group_leader(int g) const { return g * cp * tp; }
  bool is_group_leader() const { return rank == group_leader(dp_rank()); }
  bool single() const { return world == 1; }
  std::string Describe() const;  // "rank 1/4: dp 1/2, tp 0/2, ep 1/4"
};

// The flags as given (0 = left out). Left-out --dp/--cp are 1; --tp fills N / (dp * cp); --ep is 1 when tp = N
// (experts tensor-split like everything else) and N otherwise (whole experts spread over every rank); any E
// dividing N is accepted (1 < E < N: each expert split N / E ways inside its group). Every inconsistency is an
// error naming the flags and N, returned on every rank before any weight is read.
StatusOr<ParallelConfig> ResolveParallel(int world, int rank, int dp, int tp, int cp, int ep);

// The communicators one rank uses. world/control/moe all span every rank but are separate MPI communicators, so
// the engine thread (control) and the executor thread (moe, tp) never share one.
struct DistContext {
  ParallelConfig pc;
  std::unique_ptr<Communicator> control;  // engine loop: requests in, outputs and load reports back
  std::unique_ptr<Communicator> moe;      // MoE dispatch/combine (executor thread)
  std::unique_ptr<Communicator> tp;       // the attention group's tensor-parallel ranks (executor thread)
  std::unique_ptr<Communicator> cp;       // the context-parallel ranks with this rank's tp_rank (executor thread)
  // Expert rows this rank computed for any rank (the executor adds, the control plane reports): the per-rank
  // expert load behind the imbalance gauge.
  mutable std::atomic<int64_t> expert_rows{0};
  // Context parallelism: attention work (query x key pairs) of the rows this rank computed, summed over forwards.
  mutable std::atomic<int64_t> attention_work{0};
  // MoE exchanges (dispatch + combine) on the executor's own thread: their duration, all of it exposed (the
  // executor waited). Under two-batch overlap they run on moe_stream instead (its busy / exposed seconds).
  mutable std::atomic<int64_t> moe_exchange_ns{0}, moe_exposed_ns{0};
  // What ends the job when this rank cannot go on (a collective failed, a peer sent what this build cannot read):
  // the ranks are out of step, so finishing the rank's requests with an error is not enough. The process's top
  // level owns the job and installs it (SetupParallel: log, then MPI_Abort of the world); the engine reports
  // through FailJob and decides nothing itself. Must not return.
  std::function<void(const std::string& why)> fail_job;
  // Calls fail_job (the top level's policy); without one, as a last resort, AbortJob.
  [[noreturn]] void FailJob(const std::string& why) const;
  // Two-batch overlap: the thread that runs the MoE exchanges over `moe` (declared last: stopped first).
  std::unique_ptr<CommStream> moe_stream;
};

StatusOr<std::unique_ptr<DistContext>> MakeDistContext(Communicator& world, const ParallelConfig& pc);

}  // namespace deepinfer::dist

namespace deepinfer::dist {

// The process's distributed context, like the compute pool a property of how the process was launched: set
// once by the CLI start-up under mpirun (before the model loads), read by the loader (which shard to map), the
// transformer (which collectives a layer needs) and the engine (the control loop). nullptr: one process.
void SetContext(std::unique_ptr<DistContext> ctx);
DistContext* Context();
// Releases the context's communicators (before FinalizeWorld).
void ResetContext();

}  // namespace deepinfer::dist
