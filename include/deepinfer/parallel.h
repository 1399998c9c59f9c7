// Multi-process jobs: the same program started N times by mpirun (Open MPI), one rank per process, splitting
// the model over the ranks (tensor, context and expert parallelism) and the requests over data-parallel groups
// (docs/configuration.md "Multi-process"). A plain run is a job of one process and never touches MPI.
//
//   int main(int argc, char** argv) {
//     deepinfer::api::InitProcess(&argc, &argv);   // MPI under mpirun, nothing otherwise
//     deepinfer::api::ParallelOptions p;           // p.tp = 2, ...
//     if (!deepinfer::api::SetupParallel(p).ok()) ...   // before any Model::Load: each rank loads its shard
//     ... Model::Load, Engine::Create: rank 0 adds requests and reads outputs; every other rank runs its
//     ... engine's RunUntilIdle (it steps with rank 0) and then Shutdown, until rank 0's Shutdown ends the job
//     deepinfer::api::FinalizeProcess();
//   }
//
// Every call here is process-wide, like the compute pool (runtime.h), and made by every rank in the same order.
#pragma once
#include <string>

#include "deepinfer/status.h"

namespace deepinfer::api {

// Start-up, before anything else: under mpirun (its environment present) initializes MPI with thread support;
// otherwise does nothing. FinalizeProcess releases the job's communicators and MPI, at the very end.
void InitProcess(int* argc, char*** argv);
void FinalizeProcess();

// This process's rank in the job (0 in a plain run) and the number of ranks (1 in a plain run).
int WorldRank();
int WorldSize();

// The rank layout of a job of WorldSize() ranks. 0 leaves a size to be derived: dp and cp 1, tp N / (dp x cp),
// ep 1 when tp = N, else N. Errors name the deepinfer CLI's flags (--tp, --dp-policy, ...), which set these.
struct ParallelOptions {
  int dp = 0;  // attention data-parallel groups (each its own scheduler and KV cache)
  int tp = 0;  // tensor-parallel ranks per attention group
  int cp = 0;  // context-parallel ranks per attention group
  int ep = 0;  // expert-parallel ranks for MoE layers
  int redundant_experts = 0;  // extra expert slots per MoE layer for replicas of hot experts (EPLB)
  int eplb_interval = 0;      // engine steps between online expert rebalances (0: never)
  // How rank 0 picks a data-parallel group per request: cache_aware, least_load or round_robin (the router's
  // policies). Empty: cache_aware, or least_load when prefix_caching is off (no KV events to route by).
  std::string dp_policy;
  bool prefix_caching = true;  // EngineOptions::prefix_caching of the engines the job will create
  std::string cp_split;        // context parallelism's row split: "balanced" (empty: the default) or "contiguous"
  bool two_batch_overlap = false;  // MoE dispatch/combine of one micro-batch overlapping the other's compute
  double timeout_seconds = 30;     // a rank waiting longer than this for a peer ends the job (a dead or hung rank)
};

// Resolves and checks the layout (every rank checks the same options, so a bad combination fails on every rank
// with the same message) and, for a job of more than one rank, installs the process's communicators, which
// Model::Load and Engine::Create then use. Call once, before loading any model.
Status SetupParallel(const ParallelOptions& options);

// After loading: every rank loaded the same model (`model` as given to Model::Load; its file's size and first
// 64 KiB compared over the job). Nothing to check in a plain run.
Status CheckSameModelEverywhere(const std::string& model);

}  // namespace deepinfer::api
