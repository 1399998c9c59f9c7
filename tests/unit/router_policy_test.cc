// The router's policies without a network: the approximate prefix tree (matches, edge splits, the LRU bound) and
// the decisions of cache_aware, least_load and round_robin on given loads.
#include <gtest/gtest.h>

#include <string>

#include "routing/approx_prefix_tree.h"
#include "routing/cache_aware_policy.h"
#include "routing/least_load_policy.h"
#include "routing/round_robin_policy.h"

namespace deepinfer::router {
namespace {

TEST(ApproxPrefixTree, MatchesLongestInsertedPrefix) {
  ApproxPrefixTree t(1 << 20);
  t.Insert("system: be brief\nuser: hello");
  t.Insert("system: be brief\nuser: bye");  // splits the edge after "user: "
  EXPECT_EQ(t.Match("system: be brief\nuser: hello there"), 28u);
  EXPECT_EQ(t.Match("system: be brief\nuser: b"), 24u);
  EXPECT_EQ(t.Match("system: be verbose"), 11u);
  EXPECT_EQ(t.Match("other"), 0u);
  EXPECT_EQ(t.size(), std::string("system: be brief\nuser: hello").size() + 3);
}

TEST(ApproxPrefixTree, EvictsLeastRecentlyUsedPastTheBound) {
  ApproxPrefixTree t(100);
  const std::string a(40, 'a'), b(40, 'b'), c(40, 'c');
  t.Insert(a);
  t.Insert(b);
  EXPECT_EQ(t.Match(a), 40u);  // a is now more recent than b
  t.Insert(c);                 // 120 > 100: b (least recently used) goes
  EXPECT_LE(t.size(), 100u);
  EXPECT_EQ(t.Match(a), 40u);
  EXPECT_EQ(t.Match(b), 0u);
  EXPECT_EQ(t.Match(c), 40u);
}

TEST(CacheAwarePolicy, FollowsThePrefixWhileBalancedAndTheLoadWhenNot) {
  CacheAwarePolicy p(3, CacheAwareOptions{});
  std::vector<ReplicaView> v(3, ReplicaView{true, 0});
  const std::string tenant_a(200, 'a'), tenant_b(200, 'b');
  const Decision first = p.Pick(tenant_a + "1", v);
  EXPECT_EQ(first.outcome, Outcome::kCacheMiss);
  const Decision second_b = p.Pick(tenant_b + "1", v);
  EXPECT_NE(second_b.replica, first.replica);  // equal loads: the smallest tree takes a new prefix
  v[first.replica].in_flight = 5;               // busier, but within the balance thresholds
  const Decision again = p.Pick(tenant_a + "2", v);
  EXPECT_EQ(again.replica, first.replica);
  EXPECT_EQ(again.outcome, Outcome::kCacheHit);
  EXPECT_EQ(again.matched_chars, 200u);
  v[first.replica].in_flight = 40;  // 40 - 0 > 32 and 40 > 1.0001 * 0: imbalanced
  const Decision busy = p.Pick(tenant_a + "3", v);
  EXPECT_NE(busy.replica, first.replica);
  EXPECT_EQ(busy.outcome, Outcome::kImbalance);
  v[first.replica].in_flight = 0;
  p.OnReplicaDown(first.replica);  // its cache is gone: the prefix now matches where the imbalance sent it
  EXPECT_EQ(p.Pick(tenant_a + "4", v).replica, busy.replica);
  v[busy.replica].available = false;
  EXPECT_NE(p.Pick(tenant_a + "5", v).replica, busy.replica);
}

TEST(SimplePolicies, RoundRobinSkipsUnavailableAndLeastLoadPicksFewestInFlight) {
  std::vector<ReplicaView> v = {{true, 3}, {false, 0}, {true, 1}};
  RoundRobinPolicy rr;
  EXPECT_EQ(rr.Pick("x", v).replica, 0);
  EXPECT_EQ(rr.Pick("x", v).replica, 2);
  EXPECT_EQ(rr.Pick("x", v).replica, 0);
  LeastLoadPolicy ll;
  EXPECT_EQ(ll.Pick("x", v).replica, 2);
  v = {{false, 0}, {false, 0}};
  EXPECT_EQ(ll.Pick("x", v).replica, -1);
  EXPECT_EQ(rr.Pick("x", v).replica, -1);
}

}  // namespace
}  // namespace deepinfer::router
