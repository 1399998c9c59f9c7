// Expert-parallel load balancer: a C++ port of DeepSeek's EPLB (github.com/deepseek-ai/EPLB, eplb.py).
// Given a per-layer load estimate of every logical expert, it chooses how many replicas each expert gets and on
// which physical slot each replica lives; slot p belongs to rank p / (num_replicas / num_ranks).
//
// Policy (as in the reference): hierarchical when num_groups % num_nodes == 0 -- expert groups are packed onto
// nodes first (so a token's group-limited routing stays inside one node), then experts are replicated inside each
// node and the replicas packed onto that node's ranks; otherwise global -- the same with one group and one node
// (replication over all slots, then packing over all ranks). Results equal the reference's for integer loads (token
// counts), including its float32 arithmetic and tie-breaking (see eplb.cc).
#pragma once
#include <cstdint>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer::dist {

struct EplbPlacement {
  std::vector<std::vector<int32_t>> phy2log;               // [layer][physical slot] -> logical expert
  std::vector<std::vector<std::vector<int32_t>>> log2phy;  // [layer][logical][replica] -> slot, padded with -1 to maxcnt
  std::vector<std::vector<int32_t>> logcnt;                // [layer][logical] -> replica count
};

// weight: [layers][logical experts] load (finite, >= 0). num_replicas: physical slots per layer (logical +
// redundant), a multiple of num_ranks; num_groups divides the expert count; num_ranks a multiple of num_nodes.
// Every violation is an InvalidArgument naming the values. Unlike the reference, the groups/nodes checks apply
// to the global policy too (the reference ignores both there): a grouping that does not divide the experts or a
// rank count that does not split over the nodes describes no real deployment. Sizes far beyond any deployment
// (more than 2^26 slots over all layers, and similar; eplb.cc) are refused rather than left to exhaust memory.
StatusOr<EplbPlacement> RebalanceExperts(const std::vector<std::vector<double>>& weight, int num_replicas,
                                         int num_groups, int num_nodes, int num_ranks);

// Per layer: max over ranks / mean over ranks of the rank load, where a slot carries its expert's load divided
// by the expert's replica count (tokens spread evenly over replicas). 1.0 is perfect; a layer whose total load is
// 0 reports 1.0. Computed in double from `weight` as given. Expects a placement valid for `weight` and num_ranks
// dividing the slot count (as RebalanceExperts and RoundRobinPlacement produce).
std::vector<double> RankImbalance(const std::vector<std::vector<double>>& weight, const EplbPlacement& p, int num_ranks);

// The naive placement to compare against: slot p holds logical expert p mod E, so the first E slots hold every
// expert once in order and the redundant slots give extra replicas to experts 0, 1, 2, ... (wrapping around when
// num_replicas > 2E). Needs num_replicas >= E >= 1 (callers validate; RebalanceExperts' checks cover it).
EplbPlacement RoundRobinPlacement(int num_layers, int num_experts, int num_replicas);

}  // namespace deepinfer::dist
