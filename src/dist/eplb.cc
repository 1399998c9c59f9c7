// EPLB port. The reference (eplb.py) works on float32 tensors on the CPU, and its greedy choices compare float32
// values, so this file does its arithmetic in float too: the load converted to float, group loads summed in float,
// per-replica load = float load / replica count, pack loads accumulated in float in placement order. In double a
// near-tie could fall the other way and pick a different expert or pack. (torch's float sum over a group may
// associate differently from the sequential sum here; for integer token counts below 2^24, what the reference is
// fed, every sum is exact and the two agree.)
//
// Tie-breaking follows the reference: a replica goes to the first expert with the maximal per-replica load
// (torch.max's first index) and an item to the lowest-index lightest non-full pack (Python's min). Items are taken
// in the order of torch's `sort(descending=True)`, which on the CPU is std::sort (not stable) of (load, index)
// pairs compared by load alone. libstdc++'s std::sort is a plain insertion sort up to 16 elements, i.e. stable, so
// for <= 16 items equal loads keep index order (the published vectors); beyond that its introsort decides. Running
// the same std::sort with the same comparator on the same pairs reproduces torch built against libstdc++ there
// too (not checked against torch: no torch here). Equal loads of replicas of one expert only swap replica
// numbers; equal loads of different experts or groups can change the placement.
#include "dist/eplb.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <utility>

namespace deepinfer::dist {
namespace {

std::string Str(long long v) { return std::to_string(v); }

// Bounds far beyond any deployment (DeepSeek-V3: 58 layers x 288 slots, 256 experts, 64 ranks) that keep the
// memory and the greedy's O(layers x slots x (experts + ranks)) time in check on absurd input. log2phy is padded
// to the largest replica count, which one hot expert can push to about the slot count, so it has its own cap.
constexpr long long kMaxSlots = 1ll << 26, kMaxWork = 1ll << 32, kMaxLog2PhyEntries = 1ll << 26;

// balanced_packing for one row: n items into m packs of exactly n/m items each. Writes each item's pack and its
// arrival order inside that pack. With one item per pack the reference skips the greedy and keeps item i in pack i
// (the greedy would sort them), so this does too.
void BalancedPacking(const std::vector<float>& w, int m, std::vector<int>* pack, std::vector<int>* rank) {
  const int n = static_cast<int>(w.size()), per_pack = n / m;
  pack->assign(n, -1);
  rank->assign(n, 0);
  if (per_pack == 1) {
    std::iota(pack->begin(), pack->end(), 0);
    return;
  }
  std::vector<std::pair<float, int>> order(n);  // torch's sort: (value, index) pairs, compared by value
  for (int i = 0; i < n; ++i) order[i] = {w[i], i};
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<float> pack_load(m, 0.0f);
  std::vector<int> pack_items(m, 0);
  for (auto [load, item] : order) {
    int best = -1;
    for (int k = 0; k < m; ++k)
      if (pack_items[k] < per_pack && (best < 0 || pack_load[k] < pack_load[best])) best = k;
    (*pack)[item] = best;
    (*rank)[item] = pack_items[best]++;
    pack_load[best] += load;
  }
}

// replicate_experts for one row: slots 0..E-1 hold experts 0..E-1; each further slot goes to the expert with the
// largest load per replica (first index on ties). Repeatedly relieving the current maximum minimizes the largest
// per-replica load over all ways to hand out the replicas. replica[s] = how many replicas of that expert came
// before slot s.
void ReplicateExperts(const std::vector<float>& w, int num_phy, std::vector<int>* phy2log, std::vector<int>* replica,
                      std::vector<int>* count) {
  const int num_log = static_cast<int>(w.size());
  phy2log->resize(num_phy);
  replica->assign(num_phy, 0);
  count->assign(num_log, 1);
  std::iota(phy2log->begin(), phy2log->begin() + num_log, 0);
  for (int s = num_log; s < num_phy; ++s) {
    int best = 0;
    float best_load = w[0] / static_cast<float>((*count)[0]);
    for (int j = 1; j < num_log; ++j) {
      const float load = w[j] / static_cast<float>((*count)[j]);
      if (load > best_load) best = j, best_load = load;
    }
    (*phy2log)[s] = best;
    (*replica)[s] = (*count)[best]++;
  }
}

Status Validate(const std::vector<std::vector<double>>& weight, int num_replicas, int num_groups, int num_nodes,
                int num_ranks) {
  if (weight.empty() || weight[0].empty())
    return InvalidArgument("EPLB: the load has no " + std::string(weight.empty() ? "layers" : "experts"));
  const size_t experts = weight[0].size();
  for (size_t l = 0; l < weight.size(); ++l) {
    if (weight[l].size() != experts)
      return InvalidArgument("EPLB: layer " + Str(l) + " has " + Str(weight[l].size()) + " experts, layer 0 has " +
                             Str(experts) + " (every layer needs the same count)");
    for (size_t j = 0; j < experts; ++j) {
      const double v = weight[l][j];
      // Loads beyond float's range would become inf in the float arithmetic the reference does.
      if (!std::isfinite(v) || v < 0 || v > std::numeric_limits<float>::max())
        return InvalidArgument("EPLB: load of layer " + Str(l) + " expert " + Str(j) + " is " + std::to_string(v) +
                               " (loads must be finite, >= 0 and within float range)");
    }
  }
  for (auto [name, v] : {std::pair{"replicas", num_replicas}, {"groups", num_groups}, {"nodes", num_nodes},
                         {"ranks", num_ranks}})
    if (v < 1) return InvalidArgument(std::string("EPLB: ") + name + " must be >= 1, got " + Str(v));
  const long long slots = static_cast<long long>(weight.size()) * num_replicas;
  if (slots > kMaxSlots)
    return InvalidArgument("EPLB: layers x replicas = " + Str(slots) + " slots, above the supported " + Str(kMaxSlots));
  if (const double work = static_cast<double>(slots) * (static_cast<double>(experts) + num_ranks); work > kMaxWork)
    return InvalidArgument("EPLB: layers x replicas x (experts + ranks) = " + std::to_string(work) +
                           ", above the supported " + Str(kMaxWork) + " (far beyond any deployment)");
  if (experts > static_cast<size_t>(num_replicas))
    return InvalidArgument("EPLB: replicas (" + Str(num_replicas) + ") must be >= the number of logical experts (" +
                           Str(experts) + "): every expert needs a slot");
  const int e = static_cast<int>(experts);
  if (num_replicas % num_ranks != 0)
    return InvalidArgument("EPLB: replicas (" + Str(num_replicas) + ") must be a multiple of ranks (" +
                           Str(num_ranks) + "): every rank holds the same number of slots");
  if (num_ranks % num_nodes != 0)
    return InvalidArgument("EPLB: ranks (" + Str(num_ranks) + ") must be a multiple of nodes (" + Str(num_nodes) + ")");
  if (e % num_groups != 0)
    return InvalidArgument("EPLB: groups (" + Str(num_groups) + ") must divide the number of logical experts (" +
                           Str(e) + ")");
  return Status::Ok();
}

// The hierarchical policy for one layer (rebalance_experts_hierarchical); groups = nodes = 1 is the global policy.
// Outputs the slot -> logical expert map, each slot's replica index, and the replica count per expert.
void RebalanceLayer(const std::vector<float>& w, int num_phy, int num_groups, int num_nodes, int num_ranks,
                    int32_t* phy2log, std::vector<int>* phy_replica, int32_t* logcnt) {
  const int num_log = static_cast<int>(w.size());
  const int group_size = num_log / num_groups, groups_per_node = num_groups / num_nodes;
  const int log_per_node = num_log / num_nodes, phy_per_node = num_phy / num_nodes;
  const int ranks_per_node = num_ranks / num_nodes, phy_per_rank = num_phy / num_ranks;

  // 1. Groups onto nodes. "mlog" numbers experts node-major: node k's experts are [k, k+1) * log_per_node, groups
  // in their arrival order on the node, experts inside a group in their original order.
  std::vector<float> group_load(num_groups, 0.0f);
  for (int g = 0; g < num_groups; ++g)
    for (int t = 0; t < group_size; ++t) group_load[g] += w[g * group_size + t];
  std::vector<int> group_pack, group_rank;
  BalancedPacking(group_load, num_nodes, &group_pack, &group_rank);
  std::vector<int> mlog2log(num_log);
  for (int g = 0; g < num_groups; ++g)
    for (int t = 0; t < group_size; ++t)
      mlog2log[(group_pack[g] * groups_per_node + group_rank[g]) * group_size + t] = g * group_size + t;

  phy_replica->resize(num_phy);
  std::vector<float> node_load(log_per_node), replica_load(phy_per_node);
  std::vector<int> phy2mlog, replica, mlogcnt, rank_pack, rank_pos, slot2phy(phy_per_node);
  for (int node = 0; node < num_nodes; ++node) {
    const int* node_mlog2log = mlog2log.data() + node * log_per_node;
    // 2. Replicate the node's experts over the node's slots.
    for (int i = 0; i < log_per_node; ++i) node_load[i] = w[node_mlog2log[i]];
    ReplicateExperts(node_load, phy_per_node, &phy2mlog, &replica, &mlogcnt);
    // 3. Pack the node's replicas onto its ranks by per-replica load; a replica's slot on the node is
    // rank * phy_per_rank + its arrival order on that rank.
    for (int q = 0; q < phy_per_node; ++q)
      replica_load[q] = node_load[phy2mlog[q]] / static_cast<float>(mlogcnt[phy2mlog[q]]);
    BalancedPacking(replica_load, ranks_per_node, &rank_pack, &rank_pos);
    for (int q = 0; q < phy_per_node; ++q) slot2phy[rank_pack[q] * phy_per_rank + rank_pos[q]] = q;
    // 4. Back to logical ids and global slots.
    for (int s = 0; s < phy_per_node; ++s) {
      const int q = slot2phy[s];
      phy2log[node * phy_per_node + s] = node_mlog2log[phy2mlog[q]];
      (*phy_replica)[node * phy_per_node + s] = replica[q];
    }
    for (int i = 0; i < log_per_node; ++i) logcnt[node_mlog2log[i]] = mlogcnt[i];
  }
}

}  // namespace

StatusOr<EplbPlacement> RebalanceExperts(const std::vector<std::vector<double>>& weight, int num_replicas,
                                         int num_groups, int num_nodes, int num_ranks) {
  DI_RETURN_IF_ERROR(Validate(weight, num_replicas, num_groups, num_nodes, num_ranks));
  const bool hierarchical = num_groups % num_nodes == 0;
  const int groups = hierarchical ? num_groups : 1, nodes = hierarchical ? num_nodes : 1;
  const int layers = static_cast<int>(weight.size()), num_log = static_cast<int>(weight[0].size());
  EplbPlacement p;
  p.phy2log.assign(layers, std::vector<int32_t>(num_replicas));
  p.logcnt.assign(layers, std::vector<int32_t>(num_log));
  std::vector<std::vector<int>> replica(layers);
  std::vector<float> w(num_log);
  int maxcnt = 1;
  for (int l = 0; l < layers; ++l) {
    for (int j = 0; j < num_log; ++j) w[j] = static_cast<float>(weight[l][j]);
    RebalanceLayer(w, num_replicas, groups, nodes, num_ranks, p.phy2log[l].data(), &replica[l], p.logcnt[l].data());
    maxcnt = std::max(maxcnt, *std::max_element(p.logcnt[l].begin(), p.logcnt[l].end()));
  }
  // log2phy is padded to the largest replica count over all layers, as the reference's single tensor is.
  if (static_cast<long long>(layers) * num_log * maxcnt > kMaxLog2PhyEntries)
    return InvalidArgument("EPLB: log2phy would hold " + Str(static_cast<long long>(layers) * num_log * maxcnt) +
                           " entries (layers x experts x max replicas " + Str(maxcnt) + "); use fewer replicas");
  p.log2phy.assign(layers, std::vector<std::vector<int32_t>>(num_log, std::vector<int32_t>(maxcnt, -1)));
  for (int l = 0; l < layers; ++l)
    for (int s = 0; s < num_replicas; ++s) p.log2phy[l][p.phy2log[l][s]][replica[l][s]] = s;
  return p;
}

std::vector<double> RankImbalance(const std::vector<std::vector<double>>& weight, const EplbPlacement& p,
                                  int num_ranks) {
  std::vector<double> out;
  for (size_t l = 0; l < p.phy2log.size() && l < weight.size(); ++l) {
    const auto& slots = p.phy2log[l];
    const size_t per_rank = slots.size() / static_cast<size_t>(num_ranks);
    std::vector<double> rank_load(num_ranks, 0.0);
    for (size_t s = 0; s < slots.size(); ++s)
      rank_load[s / per_rank] += weight[l][slots[s]] / p.logcnt[l][slots[s]];
    const double total = std::accumulate(rank_load.begin(), rank_load.end(), 0.0);
    const double max = *std::max_element(rank_load.begin(), rank_load.end());
    out.push_back(total > 0 ? max / (total / num_ranks) : 1.0);
  }
  return out;
}

EplbPlacement RoundRobinPlacement(int num_layers, int num_experts, int num_replicas) {
  EplbPlacement p;
  std::vector<int32_t> slots(num_replicas), count(num_experts, 0);
  std::vector<std::vector<int32_t>> log2phy(num_experts);
  for (int s = 0; s < num_replicas; ++s) {
    slots[s] = s % num_experts;
    ++count[slots[s]];
    log2phy[slots[s]].push_back(s);
  }
  const int maxcnt = (num_replicas + num_experts - 1) / num_experts;
  for (auto& v : log2phy) v.resize(maxcnt, -1);
  p.phy2log.assign(num_layers, slots);
  p.logcnt.assign(num_layers, count);
  p.log2phy.assign(num_layers, log2phy);
  return p;
}

}  // namespace deepinfer::dist
