// EPLB (src/dist/eplb.h): the reference's published vectors, placement invariants and load guarantees over ~200
// seeded random skewed loads, the inputs on which EPLB loses to round-robin (and why), and input errors.
//
// Against the plain round-robin placement (RoundRobinPlacement: expert p mod E in slot p) the mean rank load is
// the same for both (every placement spreads the same total), so max/mean compares the busiest rank. EPLB is not
// always better there, and the reasons are pinned by EplbVsRoundRobin.* below: the hierarchical policy keeps a
// group on one node; replication minimizes the busiest *slot*, not the busiest rank; and the greedy packing is a
// heuristic. What holds for every input, and is asserted for every random case:
//   (a) replication is optimal: in each replication domain (all slots for the global policy, a node's slots for
//       the hierarchical one) the largest per-replica load is the smallest any replica counts can reach;
//   (b) the packing bound: the busiest rank of a domain carries at most mean + (1 - 1/m) * M, m the domain's
//       ranks and M its largest per-replica load (groups onto nodes likewise). Proof: items arrive in
//       descending order; let A be the busiest pack, a_1 >= ... >= a_j (sum a) its items before its last, x.
//       Claim: every other pack Q holds >= a + x - a_1 when x is placed. Among A's placements take the
//       last one, t, at which (Q's item count - A's) is smallest. If Q was not full at t, the greedy choice of A
//       gave load(Q) >= load(A) >= A's items from the 2nd up to t's (a_1 is the largest); by the choice of t, at
//       each later item of A, Q has received more new items than A, so each later item of A pairs with a
//       distinct item of Q placed before it, hence no lighter. If Q was full at t, t is x's placement, and the
//       minimality makes the same pairing work for all of a_2 .. x. Summing over the packs,
//       S >= (a + x) + (m - 1)(a + x - a_1), so a + x <= S/m + (1 - 1/m) a_1 (checked exhaustively for small
//       cases too; the bound is tight);
//   (c) hence with one domain and one slot per rank (rank load = slot load) EPLB <= round-robin exactly, and with
//       one domain M is at most round-robin's largest slot, so EPLB <= round-robin's max + (1 - 1/P) * that.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>

#include "dist/eplb.h"

namespace deepinfer::dist {
namespace {

using Load = std::vector<std::vector<double>>;
struct Shape {
  int replicas, groups, nodes, ranks;
};

const Load kExample = {{90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86},
                       {20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27}};

// log2phy/logcnt agree with phy2log: every slot once, replicas numbered 0..logcnt-1, -1 padding to the
// largest count of any layer; every expert has a slot; counts sum to the slots; each rank holds R/P slots.
std::string CheckStructure(const Load& w, const EplbPlacement& p, const Shape& s) {
  const int E = static_cast<int>(w[0].size()), R = s.replicas;
  if (p.phy2log.size() != w.size() || p.logcnt.size() != w.size() || p.log2phy.size() != w.size()) return "layers";
  int maxcnt = 0;
  for (auto& row : p.logcnt) maxcnt = std::max(maxcnt, *std::max_element(row.begin(), row.end()));
  for (size_t l = 0; l < w.size(); ++l) {
    const std::string at = "layer " + std::to_string(l) + ": ";
    if (static_cast<int>(p.phy2log[l].size()) != R || static_cast<int>(p.logcnt[l].size()) != E) return at + "sizes";
    if (std::accumulate(p.logcnt[l].begin(), p.logcnt[l].end(), 0) != R) return at + "counts do not sum to R";
    std::vector<int> seen(R, 0), per_rank(s.ranks, 0);
    for (int e = 0; e < E; ++e) {
      if (p.logcnt[l][e] < 1) return at + "expert " + std::to_string(e) + " has no slot";
      if (static_cast<int>(p.log2phy[l][e].size()) != maxcnt) return at + "log2phy width";
      for (int r = 0; r < maxcnt; ++r) {
        const int slot = p.log2phy[l][e][r];
        if (r >= p.logcnt[l][e]) {
          if (slot != -1) return at + "padding is not -1";
          continue;
        }
        if (slot < 0 || slot >= R || p.phy2log[l][slot] != e || seen[slot]++) return at + "log2phy/phy2log disagree";
        ++per_rank[slot / (R / s.ranks)];
      }
    }
    for (int c : per_rank)
      if (c != R / s.ranks) return at + "a rank does not hold R/P slots";
  }
  return "";
}

// Hierarchical policy: each group's experts sit on exactly one node, and each node holds G/N whole groups.
std::string CheckNodeLocality(const Load& w, const EplbPlacement& p, const Shape& s) {
  const int gs = static_cast<int>(w[0].size()) / s.groups, per_node = s.replicas / s.nodes;
  for (size_t l = 0; l < w.size(); ++l) {
    std::vector<int> node_of(s.groups, -1), groups_on(s.nodes, 0);
    for (int slot = 0; slot < s.replicas; ++slot) {
      const int g = p.phy2log[l][slot] / gs, node = slot / per_node;
      if (node_of[g] == -1) node_of[g] = node, ++groups_on[node];
      if (node_of[g] != node)
        return "layer " + std::to_string(l) + ": group " + std::to_string(g) + " on nodes " +
               std::to_string(node_of[g]) + " and " + std::to_string(node);
    }
    for (int c : groups_on)
      if (c != s.groups / s.nodes) return "layer " + std::to_string(l) + ": a node does not hold G/N groups";
  }
  return "";
}

// Smallest achievable largest per-replica load for integer loads w over `budget` replicas (each >= 1): the
// optimum is some w_i / c, so take the smallest feasible one (exact integer arithmetic, no greedy involved).
double OptimalMaxPerReplica(const std::vector<int64_t>& w, int budget) {
  auto need = [&](int64_t wi, int64_t c) {  // replicas needed so that no expert exceeds wi / c
    int64_t n = 0;
    for (int64_t wj : w) n += std::max<int64_t>(1, (wj * c + wi - 1) / wi);
    return n;
  };
  double best = 0;  // all loads zero
  for (int64_t wi : w) {
    if (wi == 0) continue;
    if (need(wi, 1) > budget) continue;
    int lo = 1, hi = budget;  // need(wi, c) grows with c: find the largest feasible c
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (need(wi, mid) <= budget) lo = mid;
      else hi = mid - 1;
    }
    const double t = static_cast<double>(wi) / lo;
    if (best == 0 || t < best) best = t;
  }
  return best;
}

struct RankStats {
  double max_rank, mean_rank, max_slot;
};
RankStats Stats(const std::vector<double>& w, const std::vector<int32_t>& phy2log, const std::vector<int32_t>& cnt,
                int slot0, int slots, int ranks) {
  RankStats st{0, 0, 0};
  std::vector<double> rank(ranks, 0);
  for (int s = slot0; s < slot0 + slots; ++s) {
    const double v = w[phy2log[s]] / cnt[phy2log[s]];
    rank[(s - slot0) / (slots / ranks)] += v;
    st.max_slot = std::max(st.max_slot, v);
  }
  st.max_rank = *std::max_element(rank.begin(), rank.end());
  st.mean_rank = std::accumulate(rank.begin(), rank.end(), 0.0) / ranks;
  return st;
}

// (a) and (b) of the header, per layer and domain. Loads are integers (token counts).
std::string CheckGuarantees(const Load& w, const EplbPlacement& p, const Shape& s) {
  const bool hier = s.groups % s.nodes == 0;
  const int domains = hier ? s.nodes : 1, slots = s.replicas / domains, ranks = s.ranks / domains;
  const int gs = static_cast<int>(w[0].size()) / s.groups;
  for (size_t l = 0; l < w.size(); ++l) {
    const std::string at = "layer " + std::to_string(l) + ": ";
    std::vector<double> node_load(domains, 0), group_load(s.groups, 0);
    for (size_t e = 0; e < w[l].size(); ++e) group_load[e / gs] += w[l][e];
    for (int d = 0; d < domains; ++d) {
      std::vector<int64_t> experts;  // the domain's experts, each once
      for (int e = 0; e < static_cast<int>(w[l].size()); ++e)
        if (!hier || p.log2phy[l][e][0] / slots == d) experts.push_back(static_cast<int64_t>(w[l][e]));
      const RankStats st = Stats(w[l], p.phy2log[l], p.logcnt[l], d * slots, slots, ranks);
      node_load[d] = st.mean_rank * ranks;
      const double opt = OptimalMaxPerReplica(experts, slots);
      if (std::abs(st.max_slot - opt) > 1e-6 * opt)
        return at + "largest per-replica load " + std::to_string(st.max_slot) + ", optimum " + std::to_string(opt);
      const double bound = st.mean_rank + (1.0 - 1.0 / ranks) * st.max_slot;
      if (st.max_rank > bound * (1 + 1e-6))
        return at + "busiest rank " + std::to_string(st.max_rank) + " above the packing bound " + std::to_string(bound);
    }
    const double total = std::accumulate(node_load.begin(), node_load.end(), 0.0);
    const double node_bound = total / domains + (1.0 - 1.0 / domains) * *std::max_element(group_load.begin(), group_load.end());
    if (hier && *std::max_element(node_load.begin(), node_load.end()) > node_bound * (1 + 1e-6))
      return at + "busiest node above the group packing bound";
  }
  return "";
}

TEST(EplbExample, HierarchicalMatchesPublishedVector) {
  const Shape s{16, 4, 2, 8};
  auto p = RebalanceExperts(kExample, s.replicas, s.groups, s.nodes, s.ranks);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->phy2log, (std::vector<std::vector<int32_t>>{{5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1},
                                                           {7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1}}));
  EXPECT_EQ(p->logcnt, (std::vector<std::vector<int32_t>>{{1, 2, 1, 1, 2, 2, 1, 1, 1, 1, 2, 1},
                                                          {1, 2, 1, 1, 1, 2, 2, 1, 2, 1, 1, 1}}));
  // Replica numbers follow replication (the original first), not slot order: expert 1's original ended on rank 7.
  EXPECT_EQ(p->log2phy[0][1], (std::vector<int32_t>{15, 13}));
  EXPECT_EQ(p->log2phy[0][0], (std::vector<int32_t>{12, -1}));
  EXPECT_EQ(CheckStructure(kExample, *p, s), "");
  EXPECT_EQ(CheckNodeLocality(kExample, *p, s), "");
  EXPECT_EQ(CheckGuarantees(kExample, *p, s), "");
  const auto imb = RankImbalance(kExample, *p, s.ranks);
  ASSERT_EQ(imb.size(), 2u);
  EXPECT_NEAR(imb[0], 1.208, 5e-4);
  EXPECT_NEAR(imb[1], 1.242, 5e-4);
  const auto rr = RankImbalance(kExample, RoundRobinPlacement(2, 12, 16), s.ranks);
  EXPECT_GT(rr[0], imb[0]);
  EXPECT_GT(rr[1], imb[1]);
}

TEST(EplbExample, GlobalPolicyVector) {
  // groups % nodes != 0 selects the global policy; the group count then plays no part (1 and 3 agree).
  for (int groups : {1, 3}) {
    auto p = RebalanceExperts(kExample, 16, groups, 2, 8);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(p->phy2log, (std::vector<std::vector<int32_t>>{{10, 6, 10, 7, 0, 2, 11, 4, 5, 9, 5, 4, 8, 3, 1, 1},
                                                             {1, 10, 2, 4, 5, 11, 5, 0, 6, 7, 6, 3, 8, 8, 9, 7}}));
    EXPECT_EQ(CheckStructure(kExample, *p, {16, groups, 2, 8}), "");
    EXPECT_EQ(CheckGuarantees(kExample, *p, {16, groups, 2, 8}), "");
  }
}

TEST(EplbExample, FloatTieBreakingLikeTheReference) {
  // 1 and 1 + 1e-9 are distinct doubles but the same float: the reference (float32) sees a tie and gives the
  // redundant slot to the first expert; a double port would pick expert 1.
  auto p = RebalanceExperts({{1.0, 1.0 + 1e-9}}, 3, 1, 1, 3);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->phy2log[0], (std::vector<int32_t>{0, 1, 0}));
  EXPECT_EQ(RankImbalance({{0, 0}}, *p, 3), std::vector<double>{1.0});  // zero load: balanced by definition
}

// log2phy and logcnt recomputed from phy2log (replicas numbered in slot order), for hand-made placements.
EplbPlacement FromPhy2Log(std::vector<std::vector<int32_t>> phy2log, int experts) {
  EplbPlacement p;
  int maxcnt = 0;
  for (auto& row : phy2log) {
    auto& cnt = p.logcnt.emplace_back(experts, 0);
    for (int32_t e : row) maxcnt = std::max(maxcnt, ++cnt[e]);
  }
  for (auto& row : phy2log) {
    auto& l2p = p.log2phy.emplace_back(experts, std::vector<int32_t>(maxcnt, -1));
    std::vector<int> next(experts, 0);
    for (int s = 0; s < static_cast<int>(row.size()); ++s) l2p[row[s]][next[row[s]]++] = s;
  }
  p.phy2log = std::move(phy2log);
  return p;
}

TEST(EplbExample, CheckersRejectBrokenPlacements) {
  // The checkers used by the property test can fail: damage the published placement in ways each must notice.
  const Shape s{16, 4, 2, 8};
  auto good = RebalanceExperts(kExample, 16, 4, 2, 8);
  ASSERT_TRUE(good.ok());
  EplbPlacement p = *good;
  std::swap(p.phy2log[0][0], p.phy2log[0][15]);  // expert 5 (node 0) and expert 1 (node 1) trade places
  EXPECT_NE(CheckStructure(kExample, p, s), "");  // log2phy no longer matches
  p = FromPhy2Log(p.phy2log, 12);
  EXPECT_EQ(CheckStructure(kExample, p, s), "");
  EXPECT_NE(CheckNodeLocality(kExample, p, s), "");
  p = *good;
  p.logcnt[1][0] = 2;
  EXPECT_NE(CheckStructure(kExample, p, s), "");
  p = *good;
  p.phy2log[0][2] = 7;  // expert 5 (165) down to one replica, expert 7 (4) up to two: same node, not optimal
  p = FromPhy2Log(p.phy2log, 12);
  EXPECT_EQ(CheckStructure(kExample, p, s), "");
  EXPECT_EQ(CheckNodeLocality(kExample, p, s), "");
  EXPECT_NE(CheckGuarantees(kExample, p, s), "");
  // Round-robin on 5,5,5,5,1,1,1,1 over 2 ranks: 20 on rank 0, above 12 + (1 - 1/2) * 5; EPLB gets 12 / 12.
  const Load w = {{5, 5, 5, 5, 1, 1, 1, 1}};
  EXPECT_NE(CheckGuarantees(w, RoundRobinPlacement(1, 8, 8), {8, 1, 1, 2}), "");
  auto eplb = RebalanceExperts(w, 8, 1, 1, 2);
  ASSERT_TRUE(eplb.ok());
  EXPECT_EQ(CheckGuarantees(w, *eplb, {8, 1, 1, 2}), "");
  EXPECT_DOUBLE_EQ(RankImbalance(w, *eplb, 2)[0], 1.0);
}

// splitmix64: the same stream on every platform (std distributions are not).
struct Rng {
  uint64_t x;
  uint64_t Next() {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  int Int(int n) { return static_cast<int>(Next() % static_cast<uint64_t>(n)); }
  double Unit() { return static_cast<double>(Next() >> 11) / 9007199254740992.0; }
};

struct Case {
  Load w;
  Shape s;
};

// Shapes: hierarchical (G a multiple of N), global (G % N != 0), one slot per rank, many slots per expert.
// Loads: Zipf-like (a shuffled 1/rank^s), a few hot experts over a cold floor, or Zipf with dead experts.
Case RandomCase(uint64_t seed) {
  Rng r{seed};
  Case c;
  const int kind = r.Int(4), nodes = kind == 1 ? 2 << r.Int(2) : 1 << r.Int(3);
  const int groups = kind == 1 ? nodes * r.Int(3) + 1 + r.Int(nodes - 1) : nodes * (1 + r.Int(4));
  const int experts = groups * (1 + r.Int(kind == 2 ? 3 : 6));
  int ranks = nodes * (1 + r.Int(4)), per_rank = (experts + ranks - 1) / ranks + r.Int(3);
  if (kind == 2) ranks = (experts + r.Int(4) + nodes - 1) / nodes * nodes, per_rank = 1;
  if (kind == 3) per_rank = (experts + ranks - 1) / ranks * (2 + r.Int(3));
  c.s = {ranks * per_rank, groups, nodes, ranks};
  const int layers = 1 + r.Int(3), load_kind = r.Int(3);
  for (int l = 0; l < layers; ++l) {
    std::vector<int> order(experts);
    std::iota(order.begin(), order.end(), 0);
    for (int i = experts - 1; i > 0; --i) std::swap(order[i], order[r.Int(i + 1)]);
    const double s = 0.6 + 1.6 * r.Unit(), scale = 1000 + r.Int(50000);
    auto& row = c.w.emplace_back(experts);
    for (int e = 0; e < experts; ++e) {
      if (load_kind == 1) row[e] = order[e] < 1 + r.Int(3) ? 2000 + r.Int(8000) : r.Int(100);
      else row[e] = std::floor(scale / std::pow(order[e] + 1, s));
      if (load_kind == 2 && r.Int(5) == 0) row[e] = 0;
    }
  }
  return c;
}

TEST(EplbProperty, RandomSkewedLoads) {
  int better = 0, equal = 0, worse = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    const Case c = RandomCase(seed);
    const Shape& s = c.s;
    const std::string name = "seed " + std::to_string(seed) + ": E=" + std::to_string(c.w[0].size()) +
                             " R=" + std::to_string(s.replicas) + " G=" + std::to_string(s.groups) +
                             " N=" + std::to_string(s.nodes) + " P=" + std::to_string(s.ranks);
    auto p = RebalanceExperts(c.w, s.replicas, s.groups, s.nodes, s.ranks);
    ASSERT_TRUE(p.ok()) << name << ": " << p.status().ToString();
    EXPECT_EQ(CheckStructure(c.w, *p, s), "") << name;
    if (s.groups % s.nodes == 0) {
      EXPECT_EQ(CheckNodeLocality(c.w, *p, s), "") << name;
    }
    EXPECT_EQ(CheckGuarantees(c.w, *p, s), "") << name;
    const auto rr_p = RoundRobinPlacement(static_cast<int>(c.w.size()), static_cast<int>(c.w[0].size()), s.replicas);
    const auto eplb = RankImbalance(c.w, *p, s.ranks), rr = RankImbalance(c.w, rr_p, s.ranks);
    const bool one_domain = s.groups % s.nodes != 0 || s.nodes == 1;
    for (size_t l = 0; l < c.w.size(); ++l) {
      (eplb[l] < rr[l] - 1e-9 ? better : eplb[l] > rr[l] + 1e-9 ? worse : equal)++;
      if (!one_domain) continue;  // (c) of the header
      const RankStats a = Stats(c.w[l], p->phy2log[l], p->logcnt[l], 0, s.replicas, s.ranks);
      const RankStats b = Stats(c.w[l], rr_p.phy2log[l], rr_p.logcnt[l], 0, s.replicas, s.ranks);
      EXPECT_LE(a.max_slot, b.max_slot * (1 + 1e-6)) << name;
      if (s.replicas == s.ranks) {
        EXPECT_LE(eplb[l], rr[l] * (1 + 1e-6)) << name << " layer " << l;
      }
      EXPECT_LE(a.max_rank, (b.max_rank + (1.0 - 1.0 / s.ranks) * b.max_slot) * (1 + 1e-6)) << name;
    }
  }
  std::printf("EPLB vs round-robin over the random layers: %d better, %d equal, %d worse\n", better, equal, worse);
  EXPECT_GT(better, 4 * worse);  // not a guarantee (see EplbVsRoundRobin); a regression alarm for these seeds
}

// The inputs on which round-robin wins, each for a different reason; the guarantees still hold on all of them.
TEST(EplbVsRoundRobin, HierarchicalKeepsAGroupOnItsNode) {
  // Group 0 (experts 0, 1: load 20 of 22) must stay on node 0, whose one rank then carries 20; round-robin
  // ignores groups and splits 11/11. No hierarchical placement can do better than EPLB's here.
  const Load w = {{10, 10, 1, 1}};
  const Shape s{6, 2, 2, 2};
  auto p = RebalanceExperts(w, s.replicas, s.groups, s.nodes, s.ranks);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(CheckGuarantees(w, *p, s), "");
  EXPECT_NEAR(RankImbalance(w, *p, 2)[0], 20.0 / 11, 1e-12);
  EXPECT_NEAR(RankImbalance(w, RoundRobinPlacement(1, 4, 6), 2)[0], 1.0, 1e-12);
}

TEST(EplbVsRoundRobin, FewestPerReplicaLoadIsNotFewestPerRank) {
  // Replication minimizes the busiest slot: expert 1 gets 10 replicas of 152.2, experts 0 and 2 one each; three
  // slots per rank then cannot reach the mean 394.75 (the best rank holds 3 x 152.2). Round-robin's 4 replicas
  // each put one replica of every expert on every rank: exactly the mean.
  const Load w = {{19, 1522, 38}};
  auto p = RebalanceExperts(w, 12, 1, 1, 4);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->logcnt[0], (std::vector<int32_t>{1, 10, 1}));
  EXPECT_EQ(CheckGuarantees(w, *p, {12, 1, 1, 4}), "");
  EXPECT_GT(RankImbalance(w, *p, 4)[0], 1.15);
  EXPECT_NEAR(RankImbalance(w, RoundRobinPlacement(1, 3, 12), 4)[0], 1.0, 1e-12);
}

TEST(EplbVsRoundRobin, GreedyPackingIsAHeuristic) {
  // No redundant slots, so only the packing acts. In descending order: 4 -> rank 0, 2 -> rank 1, 2 -> rank 1,
  // 2 -> rank 0 (4 = 4, lowest index), 1 -> rank 1 (now full: 2+2+1), 1 -> rank 0: 7 against 5. The optimum,
  // {1,1,4} and {2,2,2} = 6 and 6, is exactly round-robin's slot order.
  const Load w = {{1, 1, 4, 2, 2, 2}};
  auto p = RebalanceExperts(w, 6, 1, 1, 2);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(CheckGuarantees(w, *p, {6, 1, 1, 2}), "");
  EXPECT_NEAR(RankImbalance(w, *p, 2)[0], 7.0 / 6, 1e-12);
  EXPECT_NEAR(RankImbalance(w, RoundRobinPlacement(1, 6, 6), 2)[0], 1.0, 1e-12);
}

TEST(EplbErrors, BadInputsAreInvalidArgument) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  struct Bad {
    Load w;
    Shape s;
    const char* message;
  } cases[] = {
      {{}, {16, 4, 2, 8}, "no layers"},
      {{{}}, {16, 4, 2, 8}, "no experts"},
      {{{1, 2, 3, 4}, {1, 2, 3}}, {4, 1, 1, 1}, "layer 1 has 3 experts"},
      {{{1, -2, 3, 4}}, {4, 1, 1, 1}, "expert 1"},
      {{{1, 2, nan, 4}}, {4, 1, 1, 1}, "finite"},
      {{{1, 2, 3, inf}}, {4, 1, 1, 1}, "finite"},
      {{{1, 2, 3, 1e300}}, {4, 1, 1, 1}, "float range"},
      {kExample, {13, 4, 2, 8}, "multiple of ranks"},
      {kExample, {16, 4, 3, 8}, "multiple of nodes"},  // checked for the global policy too (4 % 3 != 0)
      {kExample, {16, 5, 1, 8}, "divide the number of logical experts"},
      {kExample, {8, 4, 2, 8}, "must be >= the number of logical experts"},
      {kExample, {0, 4, 2, 8}, "replicas must be >= 1"},
      {kExample, {16, 0, 2, 8}, "groups must be >= 1"},
      {kExample, {16, 4, -1, 8}, "nodes must be >= 1"},
      {kExample, {16, 4, 2, 0}, "ranks must be >= 1"},
      {{{1}}, {1 << 27, 1, 1, 1}, "slots, above the supported"},
      {{std::vector<double>(1 << 16, 1.0)}, {1 << 17, 1, 1, 1}, "(experts + ranks)"},
  };
  for (const auto& b : cases) {
    auto p = RebalanceExperts(b.w, b.s.replicas, b.s.groups, b.s.nodes, b.s.ranks);
    ASSERT_FALSE(p.ok()) << b.message;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << b.message;
    EXPECT_NE(p.status().message().find(b.message), std::string::npos) << p.status().message();
  }
}

}  // namespace
}  // namespace deepinfer::dist
