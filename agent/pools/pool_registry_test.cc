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
  EXPECT_FALSE(registry_->SetHolds({}));  // still within the TTL
  EXPECT_EQ(Unhealthy(kShared), 4);
  now_ += absl::Seconds(31);
  EXPECT_TRUE(registry_->SetHolds({}));
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
  EXPECT_FALSE(registry_->SetHolds({}, granted + absl::Milliseconds(400)));
  EXPECT_EQ(Unhealthy(kShared), 4) << "a List too soon after the grant proves nothing";
  now_ += absl::Seconds(1);
  EXPECT_TRUE(registry_->SetHolds({}, granted + absl::Milliseconds(1100)));
  EXPECT_EQ(Unhealthy(kShared), 0);
  EXPECT_OK(registry_->Claim(kShared, {"mlx5_0.t0"}));
}

TEST_F(PoolRegistryTest, ConfirmedGrantBecomesAHoldAndOutlivesTheTtl) {
  ASSERT_OK(registry_->Claim(kRdma, {"mlx5_0"}));
  const std::vector<podresources::PodDevices> pods = {{"ns", "a", "c", kRdma, {"mlx5_0"}}};
  EXPECT_TRUE(registry_->SetHolds(pods));
  EXPECT_EQ(registry_->view().pools[1].pending_grants, 0u);
  now_ += absl::Minutes(10);
  registry_->SetHolds(pods);
  EXPECT_EQ(Unhealthy(kShared), 4);
  EXPECT_THAT(registry_->Claim(kShared, {"mlx5_0.t3"}),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_TRUE(registry_->SetHolds({}));  // the Pod left
  EXPECT_EQ(Unhealthy(kShared), 0);
}

// Item 7: the change detection compares content, not counts.
TEST_F(PoolRegistryTest, PodSwapWithTheSameCountIsAChange) {
  EXPECT_TRUE(registry_->SetHolds({{"ns", "a", "c", kEfa, {"efa0"}}}));
  EXPECT_FALSE(registry_->SetHolds({{"ns", "a", "c", kEfa, {"efa0"}}}));
  EXPECT_TRUE(registry_->SetHolds({{"ns", "b", "c", kEfa, {"efa0"}}}));
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
  ASSERT_EQ(shared->Subscribe(&sub)->units.size(), 8u);
  // A health reason change on an unselected device, and a hold through the
  // same shared pool: nothing the kubelet would see changes.
  registry_->SetNode(inv_, {{"efa0", DeviceHealth{false, "port 1 DOWN"}}});
  registry_->SetHolds({{"ns", "a", "c", kShared, {"mlx5_1.t0"}}});
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
