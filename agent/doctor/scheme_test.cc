#include "agent/doctor/scheme.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>

namespace fabric::doctor {
namespace {

// Periods until every node pair (a, b) was probed by a's devices at least once.
int PeriodsToCoverNodes(int n, int devices, int k) {
  std::set<std::pair<int, int>> seen;
  const size_t want = static_cast<size_t>(n) * (n - 1);
  for (int t = 0; t < 100000; ++t) {
    for (int self = 0; self < n; ++self) {
      for (int d = 0; d < devices; ++d) {
        for (const ProbeTarget& p : TargetsFor(n, self, d, devices, t, k))
          seen.insert({self, p.node});
      }
    }
    if (seen.size() == want) return t + 1;
  }
  return -1;
}

// Periods until node 0 probed every (local device, peer node, peer device).
int PeriodsToCoverTriples(int n, int devices, int k) {
  std::set<std::tuple<int, int, int>> seen;
  const size_t want = static_cast<size_t>(devices) * (n - 1) * devices;
  for (int t = 0; t < 1000000; ++t) {
    for (int d = 0; d < devices; ++d) {
      for (const ProbeTarget& p : TargetsFor(n, 0, d, devices, t, k)) {
        seen.insert({d, p.node, p.device_index % devices});
      }
    }
    if (seen.size() == want) return t + 1;
  }
  return -1;
}

int CeilDiv(int a, int b) { return (a + b - 1) / b; }

TEST(Scheme, NoPeersNoTargets) { EXPECT_TRUE(TargetsFor(1, 0, 0, 4, 0, 2).empty()); }

TEST(Scheme, NeverSelfNoDuplicatesAndBounded) {
  for (int n : {2, 3, 7, 100}) {
    for (int t = 0; t < 50; ++t) {
      for (int self = 0; self < n; ++self) {
        auto targets = TargetsFor(n, self, 1, 4, static_cast<uint64_t>(t), 3);
        EXPECT_LE(targets.size(), 4u);
        std::set<std::pair<int, int>> uniq;
        for (const ProbeTarget& p : targets) {
          EXPECT_NE(p.node, self);
          EXPECT_TRUE(uniq.insert({p.node, p.device_index}).second);
        }
      }
    }
  }
}

TEST(Scheme, FixedPartnerIsNextNodeSameIndex) {
  auto targets = TargetsFor(10, 9, 5, 8, 123, 2);
  ASSERT_FALSE(targets.empty());
  EXPECT_EQ(targets[0], (ProbeTarget{0, 5, true}));
}

TEST(Scheme, NodePairsCoveredWithinTheDocumentedBound) {
  for (auto [n, d, k] :
       {std::tuple{3, 1, 1}, {5, 2, 1}, {17, 4, 2}, {64, 8, 2}, {200, 32, 2}, {1000, 32, 2}}) {
    int periods = PeriodsToCoverNodes(n, d, k);
    int bound = CeilDiv(CeilDiv(n - 1, d), k);
    EXPECT_GT(periods, 0);
    EXPECT_LE(periods, bound) << n << " nodes, " << d << " devices, K=" << k;
  }
}

TEST(Scheme, EveryDevicePairCoveredWithinTheDocumentedBound) {
  for (auto [n, d, k] : {std::tuple{3, 1, 1}, {4, 2, 1}, {9, 4, 2}, {33, 8, 2}, {100, 4, 3}}) {
    int periods = PeriodsToCoverTriples(n, d, k);
    EXPECT_GT(periods, 0);
    EXPECT_LE(periods, d * CeilDiv(n - 1, k) + 1) << n << " nodes, " << d << " devices, K=" << k;
  }
}

}  // namespace
}  // namespace fabric::doctor
