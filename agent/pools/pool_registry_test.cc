#include "agent/pools/pool_registry.h"

#include <atomic>

#include "agent/pools/pool_device_resolver.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/status_matchers.h"

namespace fabric {
namespace {

using ::testing::HasSubstr;

constexpr char kRdma[] = "device.gpustack.ai/rdma";
constexpr char kShared[] = "device.gpustack.ai/rdma.shared";
constexpr char kEfa[] = "vpc.amazonaws.com/efa";

// A complete kubelet view observed at `at`.
holds::KubeletView V(std::vector<podresources::PodDevices> entries,
                     absl::Time at = absl::InfinitePast()) {
  holds::KubeletView v;
  v.entries = std::move(entries);
  v.observed_at = at;
  return v;
}

RdmaDevice Dev(const std::string& name, DeviceKind kind) {
  RdmaDevice d;
  d.name = name;
  d.kind = kind;
  d.pci = PciInfo{"0000:00:00.0", 0, 0, "", 0, "", 0};
  d.uverbs = CharDevice{"infiniband/uverbs0", 231, 192};
  return d;
}

class PoolRegistryTest : public ::testing::Test {
 protected:
  PoolRegistryTest() {
    PoolRegistryOptions o;
    o.grant_ttl = absl::Seconds(60);
    o.clock = [this] { return now_; };
    registry_ = std::make_unique<PoolRegistry>(o);
    registry_->SetOnGrant([this] { ++grants_; });
    inv_.devices = {Dev("efa0", DeviceKind::kEfa), Dev("mlx5_0", DeviceKind::kRdma),
                    Dev("mlx5_1", DeviceKind::kRdma)};
    inv_.rdma_cm = CharDevice{"infiniband/rdma_cm", 10, 58};
    registry_->SetNode(inv_, {});
    Config c = DefaultConfig();
    for (PoolConfig& p : c.pools) p.tokens_per_device = 4;
    registry_->ApplyConfig(c);
  }

  std::shared_ptr<const PoolSnapshot> Snap(const std::string& resource) {
    for (const auto& p : registry_->pools()) {
      if (p->resource() == resource) return p->snapshot();
    }
    return nullptr;
  }
  int Unhealthy(const std::string& resource) {
    int n = 0;
    for (const PoolUnit& u : Snap(resource)->units) n += !u.healthy;
    return n;
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  std::atomic<int> grants_{0};
  NodeInventory inv_;
  std::unique_ptr<PoolRegistry> registry_;
};

// Item 3: rdma then rdma.shared for the same mlx5 device, back to back, before
// any PodResources List: the second is refused, naming the device and pool.
TEST_F(PoolRegistryTest, ExclusiveGrantRefusesSharedTokenOfTheSameDeviceAtOnce) {
  ASSERT_OK(registry_->Claim(kRdma, {"mlx5_0"}));
  EXPECT_EQ(grants_, 1);
  // The withdrawal is already published: every token of mlx5_0 is Unhealthy.
  EXPECT_EQ(Unhealthy(kShared), 4);
  absl::Status s = registry_->Claim(kShared, {"mlx5_0.t1"});
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(s.message()), HasSubstr("mlx5_0"));
  EXPECT_THAT(std::string(s.message()), HasSubstr(kRdma));
  // Other devices are untouched.
  EXPECT_OK(registry_->Claim(kShared, {"mlx5_1.t0"}));
}

TEST_F(PoolRegistryTest, SharedGrantRefusesTheExclusiveDeviceButNotMoreTokens) {
  ASSERT_OK(registry_->Claim(kShared, {"mlx5_0.t0"}));
  EXPECT_EQ(Unhealthy(kRdma), 1);
  EXPECT_EQ(Unhealthy(kShared), 0) << "the shared side stays open to other Pods";
  absl::Status s = registry_->Claim(kRdma, {"mlx5_0"});
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(s.message()), HasSubstr(kShared));
  EXPECT_OK(registry_->Claim(kShared, {"mlx5_0.t1", "mlx5_0.t2"}));
  EXPECT_OK(registry_->Claim(kEfa, {"efa0"}));  // EFA is in no other pool
}

TEST_F(PoolRegistryTest, GrantNoPodTakesUpIsReleasedAfterTheTtl) {
  ASSERT_OK(registry_->Claim(kRdma, {"mlx5_0"}));
  now_ += absl::Seconds(30);
  EXPECT_FALSE(registry_->SetHolds(V({})));  // still within the TTL
  EXPECT_EQ(Unhealthy(kShared), 4);
  now_ += absl::Seconds(31);
  EXPECT_TRUE(registry_->SetHolds(V({})));
  EXPECT_EQ(Unhealthy(kShared), 0);
  EXPECT_OK(registry_->Claim(kShared, {"mlx5_0.t0"}));
  // Without PodResources at all, ExpireGrants does the same.
  now_ += absl::Seconds(61);
  registry_->ExpireGrants();
  EXPECT_EQ(Unhealthy(kRdma), 0);
}

// Found by test/hostile (flapping sysfs): Pods admitted and deleted at once
// left their devices withdrawn for the whole TTL. A List that started a settle
// time after the grant and does not show it releases it; an earlier List
// (the kubelet may not have recorded it yet) does not.
TEST_F(PoolRegistryTest, GrantAListTakenWellAfterDoesNotShowIsReleased) {
  ASSERT_OK(registry_->Claim(kRdma, {"mlx5_0"}));
  const absl::Time granted = now_;
  now_ += absl::Milliseconds(500);
  EXPECT_FALSE(registry_->SetHolds(V({}, granted + absl::Milliseconds(400))));
  EXPECT_EQ(Unhealthy(kShared), 4) << "a List too soon after the grant proves nothing";
  now_ += absl::Seconds(1);
  EXPECT_TRUE(registry_->SetHolds(V({}, granted + absl::Milliseconds(1100))));
  EXPECT_EQ(Unhealthy(kShared), 0);
  EXPECT_OK(registry_->Claim(kShared, {"mlx5_0.t0"}));
}

TEST_F(PoolRegistryTest, ConfirmedGrantBecomesAHoldAndOutlivesTheTtl) {
  ASSERT_OK(registry_->Claim(kRdma, {"mlx5_0"}));
  const std::vector<podresources::PodDevices> pods = {{"ns", "a", "c", kRdma, {"mlx5_0"}}};
  EXPECT_TRUE(registry_->SetHolds(V(pods)));
  EXPECT_EQ(registry_->view().pools[1].pending_grants, 0u);
  now_ += absl::Minutes(10);
  registry_->SetHolds(V(pods));
  EXPECT_EQ(Unhealthy(kShared), 4);
  EXPECT_THAT(registry_->Claim(kShared, {"mlx5_0.t3"}),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_TRUE(registry_->SetHolds(V({})));  // the Pod left
  EXPECT_EQ(Unhealthy(kShared), 0);
}

// Item 7: the change detection compares content, not counts.
TEST_F(PoolRegistryTest, PodSwapWithTheSameCountIsAChange) {
  EXPECT_TRUE(registry_->SetHolds(V({{"ns", "a", "c", kEfa, {"efa0"}}})));
  EXPECT_FALSE(registry_->SetHolds(V({{"ns", "a", "c", kEfa, {"efa0"}}})));
  EXPECT_TRUE(registry_->SetHolds(V({{"ns", "b", "c", kEfa, {"efa0"}}})));
  ASSERT_EQ(registry_->holds().size(), 1u);
  EXPECT_EQ(registry_->holds()[0].pod, "b");
}

TEST_F(PoolRegistryTest, RemovedPoolDropsItsGrantsAndResolvesNothing) {
  ASSERT_OK(registry_->Claim(kShared, {"mlx5_0.t0"}));
  Config c = registry_->config();
  c.pools.erase(c.pools.begin() + 2);  // rdma.shared
  auto changes = registry_->ApplyConfig(c);
  EXPECT_EQ(changes.removed, std::vector<std::string>{kShared});
  EXPECT_EQ(Unhealthy(kRdma), 0);
  EXPECT_THAT(registry_->Claim(kShared, {"mlx5_0.t0"}), StatusIs(absl::StatusCode::kNotFound));
  PoolDeviceResolver resolver(registry_.get());
  EXPECT_FALSE(resolver.Resolve(kShared, "mlx5_0.t0").has_value());
  auto efa = resolver.Resolve(kEfa, "efa0");
  ASSERT_TRUE(efa.has_value());
  EXPECT_TRUE(efa->efa);
  EXPECT_TRUE(efa->exclusive);
  EXPECT_EQ(efa->rdma_device, "efa0");
}

class CountingSubscriber : public PoolSubscriber {
 public:
  void Push(std::shared_ptr<const PoolSnapshot> snap) override {
    ++pushes;
    last = std::move(snap);
  }
  void Close() override { ++closes; }
  int pushes = 0, closes = 0;
  std::shared_ptr<const PoolSnapshot> last;
};

TEST_F(PoolRegistryTest, StreamsGetAPushOnlyWhenTheAdvertisementChanges) {
  std::shared_ptr<PoolState> shared;
  for (const auto& p : registry_->pools()) {
    if (p->resource() == kShared) shared = p;
  }
  ASSERT_NE(shared, nullptr);
  CountingSubscriber sub;
  shared->Subscribe(&sub);  // the first list comes as a push
  ASSERT_EQ(sub.pushes, 1);
  ASSERT_EQ(sub.last->units.size(), 8u);
  sub.pushes = 0;
  // A health reason change on an unselected device, and a hold through the
  // same shared pool: nothing the kubelet would see changes.
  registry_->SetNode(inv_, {{"efa0", DeviceHealth{false, "port 1 DOWN"}}});
  registry_->SetHolds(V({{"ns", "a", "c", kShared, {"mlx5_1.t0"}}}));
  EXPECT_EQ(sub.pushes, 0);
  // An exclusive grant withdraws mlx5_0's tokens: one push, from the Claim.
  ASSERT_OK(registry_->Claim(kRdma, {"mlx5_0"}));
  EXPECT_EQ(sub.pushes, 1);
  ASSERT_NE(sub.last, nullptr);
  EXPECT_FALSE(sub.last->FindUnit("mlx5_0.t2")->healthy);
  EXPECT_THAT(sub.last->FindUnit("mlx5_0.t2")->withdrawn, HasSubstr(kRdma));
  EXPECT_TRUE(sub.last->FindUnit("mlx5_1.t2")->healthy);
  shared->CloseStreams();
  EXPECT_EQ(sub.closes, 1);
  shared->Unsubscribe(&sub);
}

}  // namespace
}  // namespace fabric

namespace fabric {
namespace {

class PoolRegistryHoldsTest : public PoolRegistryTest {};

// Issue 19 item 3: right after a kubelet restart its List answers [] while a
// shared Pod still runs. An incomplete view lifts no hold, so the exclusive
// pool's first Allocates after the restart are still refused.
TEST_F(PoolRegistryHoldsTest, IncompleteViewLiftsNoHoldAndReleasesNoGrant) {
  ASSERT_TRUE(registry_->SetHolds(V({{"ns", "a", "c", kShared, {"mlx5_0.t0"}}})));
  ASSERT_OK(registry_->Claim(kEfa, {"efa0"}));
  now_ += absl::Seconds(5);
  holds::KubeletView restarting = V({}, now_);
  restarting.complete = false;
  restarting.incomplete_reason = "the kubelet restarted";
  registry_->SetHolds(restarting);
  EXPECT_EQ(Unhealthy(kRdma), 1) << "mlx5_0 stays withdrawn from the exclusive pool";
  EXPECT_THAT(registry_->Claim(kRdma, {"mlx5_0"}), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(registry_->view().pools[0].pending_grants, 1u) << "the EFA grant is kept";
  ASSERT_EQ(registry_->holds().size(), 1u);
  // A complete view that still does not show them settles it.
  EXPECT_TRUE(registry_->SetHolds(V({}, now_)));
  EXPECT_EQ(Unhealthy(kRdma), 0);
  EXPECT_EQ(registry_->view().pools[0].pending_grants, 0u);
}

// Issue 19 item 3: a plain init container's grant is in the kubelet checkpoint
// only (v1 List reports app and sidecar containers). It is a hold: the settle
// rule does not release it while the init container runs.
TEST_F(PoolRegistryHoldsTest, InitContainerGrantKnownFromTheCheckpointIsAHold) {
  ASSERT_OK(registry_->Claim(kShared, {"mlx5_0.t0"}));
  const absl::Time granted = now_;
  now_ += absl::Seconds(2);
  podresources::PodDevices init{"ns", "p", "init", kShared, {"mlx5_0.t0"}, "uid-1"};
  registry_->SetHolds(V({init}, granted + absl::Seconds(2)));
  EXPECT_EQ(Unhealthy(kRdma), 1) << "the exclusive pool stays withdrawn while init runs";
  EXPECT_EQ(registry_->view().pools[2].pending_grants, 0u) << "confirmed, not released";
  ASSERT_EQ(registry_->holds().size(), 1u);
  EXPECT_EQ(registry_->holds()[0].container, "init");
  EXPECT_EQ(registry_->holds()[0].pod_uid, "uid-1");
  now_ += absl::Minutes(5);
  registry_->SetHolds(V({init}, now_));
  EXPECT_EQ(Unhealthy(kRdma), 1);
}

// The kubelet reuses an init container's devices for the app container: one
// unit listed twice is one allocated unit.
TEST_F(PoolRegistryHoldsTest, AUnitHeldByInitAndAppContainerCountsOnce) {
  registry_->SetHolds(
      V({{"ns", "p", "init", kEfa, {"efa0"}, "u"}, {"ns", "p", "c", kEfa, {"efa0"}, "u"}}));
  EXPECT_EQ(registry_->view().pools[0].allocated_units, 1u);
  EXPECT_EQ(registry_->holds().size(), 2u);
}

// Issue 19 item 3: a removed device stays an Unhealthy unit so the kubelet
// keeps its allocations, but once nothing holds it for the grace period it is
// forgotten, so capacity does not grow on nodes where devices come and go.
TEST_F(PoolRegistryHoldsTest, RemovedDeviceIsForgottenOnceNothingHoldsItAfterTheGrace) {
  registry_->SetHolds(V({{"ns", "a", "c", kShared, {"mlx5_0.t1"}}}));
  NodeInventory without = inv_;
  std::erase_if(without.devices, [](const RdmaDevice& d) { return d.name != "efa0"; });
  registry_->SetNode(without, {});
  ASSERT_EQ(Snap(kRdma)->units.size(), 2u) << "removed devices stay listed, Unhealthy";
  EXPECT_EQ(Unhealthy(kRdma), 2);
  now_ += absl::Minutes(6);
  registry_->SetHolds(V({{"ns", "a", "c", kShared, {"mlx5_0.t1"}}}, now_));
  // mlx5_1: nothing holds it -> forgotten; mlx5_0: a Pod holds a token -> kept.
  ASSERT_EQ(Snap(kRdma)->units.size(), 1u);
  EXPECT_EQ(Snap(kRdma)->units[0].device, "mlx5_0");
  EXPECT_EQ(Snap(kShared)->units.size(), 4u);
  EXPECT_EQ(registry_->node().known.count("mlx5_1"), 0u);
  registry_->SetHolds(V({}, now_));  // the Pod left
  EXPECT_EQ(Snap(kRdma)->units.size(), 0u);
  // A device that comes back is a new device again.
  registry_->SetNode(inv_, {});
  EXPECT_EQ(Snap(kRdma)->units.size(), 2u);
  EXPECT_EQ(Unhealthy(kRdma), 0);
}

// Issue 19 item 5: grant TTL and settle are durations on a monotonic clock,
// not the wall clock an NTP step can move.
TEST(PoolRegistryClockTest, DurationsUseAMonotonicClock) {
  PoolRegistryOptions o;
  EXPECT_LT(absl::AbsDuration(o.clock() - MonotonicNow()), absl::Seconds(5));
  EXPECT_GT(absl::AbsDuration(o.clock() - absl::Now()), absl::Hours(1))
      << "the default clock is the wall clock";
}

}  // namespace
}  // namespace fabric
