// ClaimHolds (allocated ResourceClaims -> holds) and DraDevicePreparer
// (published names -> PoolRegistry::Claim + CDI names) over a real registry.
#include <memory>
#include <string>
#include <vector>

#include "agent/config/config.h"
#include "agent/dra/dra_names.h"
#include "agent/dra_front/claim_holds.h"
#include "agent/dra_front/dra_device_preparer.h"
#include "agent/pools/pool_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace fabric::dra {
namespace {

using ::testing::HasSubstr;

constexpr char kRdma[] = "device.gpustack.ai/rdma";
constexpr char kShared[] = "device.gpustack.ai/rdma.shared";

RdmaDevice Dev(const std::string& name) {
  RdmaDevice d;
  d.name = name;
  d.kind = DeviceKind::kRdma;
  d.pci = PciInfo{"0000:00:00.0", 0, 0, "", 0, "", 0};
  d.uverbs = CharDevice{"infiniband/uverbs0", 231, 192};
  return d;
}

class DraFrontPartsTest : public ::testing::Test {
 protected:
  DraFrontPartsTest() {
    NodeInventory inv;
    inv.devices = {Dev("mlx5_0"), Dev("mlx5_1")};
    inv.rdma_cm = CharDevice{"infiniband/rdma_cm", 10, 58};
    registry_.SetNode(inv, {});
    Config c = DefaultConfig();
    for (PoolConfig& p : c.pools) p.tokens_per_device = 2;
    registry_.ApplyConfig(c);
  }
  DraNames Names() {
    std::vector<std::shared_ptr<const PoolSnapshot>> snaps;
    for (const auto& p : registry_.pools()) snaps.push_back(p->snapshot());
    return DraNames::ForPools(snaps);
  }
  std::string NameOf(const std::string& resource, const std::string& unit) {
    const DraNames names = Names();  // NameOf points into it
    const std::string* n = names.NameOf(resource, unit);
    return n ? *n : "";
  }
  nlohmann::json Claim(const std::string& uid, const std::string& device,
                       const std::string& pool = "node-a", const std::string& pod = "p") {
    nlohmann::json c = {{"metadata", {{"name", "c-" + uid}, {"namespace", "team"}, {"uid", uid}}},
                        {"status",
                         {{"allocation",
                           {{"devices",
                             {{"results",
                               {{{"request", "r"},
                                 {"driver", kDriverName},
                                 {"pool", pool},
                                 {"device", device}}}}}}}}}}};
    if (!pod.empty()) {
      c["status"]["reservedFor"] = {{{"resource", "pods"}, {"name", pod}, {"uid", pod + "-uid"}}};
    }
    return c;
  }
  ClaimHolds Holds(std::vector<holds::KubeletView>* seen) {
    return ClaimHolds(
        ClaimHoldsOptions{kDriverName, "node-a"}, nullptr, [this] { return Names(); },
        [seen](const holds::KubeletView& v) { seen->push_back(v); });
  }

  PoolRegistry registry_;
};

TEST_F(DraFrontPartsTest, IncompleteUntilListedThenOneEntryPerPodAndPool) {
  std::vector<holds::KubeletView> seen;
  ClaimHolds holds = Holds(&seen);
  EXPECT_FALSE(holds.View().complete);
  const std::string token = NameOf(kShared, "mlx5_0.t0");
  ASSERT_FALSE(token.empty());
  kubeapi::ObjectList list;
  list.items = {Claim("u1", token), Claim("u2", NameOf(kRdma, "mlx5_1"), "node-a", ""),
                Claim("u3", NameOf(kRdma, "mlx5_0"), "node-b")};  // another node's: ignored
  holds.OnList(list);
  ASSERT_EQ(seen.size(), 1u);
  const holds::KubeletView& v = seen.back();
  EXPECT_TRUE(v.complete);
  ASSERT_EQ(v.entries.size(), 2u);
  EXPECT_EQ(v.entries[0].resource, kShared);
  EXPECT_EQ(v.entries[0].pod, "p");
  EXPECT_EQ(v.entries[0].device_ids, std::vector<std::string>{"mlx5_0.t0"});
  // Allocated, not reserved: held in the claim's own name.
  EXPECT_EQ(v.entries[1].pod, "");
  EXPECT_EQ(v.entries[1].pod_uid, "u2");
  EXPECT_EQ(v.entries[1].device_ids, std::vector<std::string>{"mlx5_1"});
  EXPECT_EQ(holds.status().claims, 2u);

  // The view withdraws mlx5_0 from the exclusive pool, as PodResources would.
  registry_.SetHolds(v);
  bool withdrawn = false;
  for (const auto& p : registry_.pools()) {
    if (p->resource() != kRdma) continue;
    const PoolUnit* u = p->snapshot()->FindUnit("mlx5_0");
    withdrawn = u != nullptr && !u->withdrawn.empty();
  }
  EXPECT_TRUE(withdrawn);

  // A deleted claim drops its hold; an event about a claim that is not ours
  // changes nothing and sends nothing.
  holds.OnEvent({kubeapi::WatchEvent::Type::kDeleted, Claim("u1", token), "5"});
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen.back().entries.size(), 1u);
  holds.OnEvent({kubeapi::WatchEvent::Type::kAdded, Claim("u9", token, "node-b"), "6"});
  EXPECT_EQ(seen.size(), 2u);
}

TEST_F(DraFrontPartsTest, HostileClaimIsCountedNotHeld) {
  std::vector<holds::KubeletView> seen;
  ClaimHolds holds = Holds(&seen);
  nlohmann::json bad = Claim("u1", NameOf(kRdma, "mlx5_0"));
  bad["status"]["allocation"]["devices"]["results"][0]["device"] = std::string("x\xff", 2);
  kubeapi::ObjectList list;
  // Results of the wrong type: a claim we cannot read. Both are counted.
  nlohmann::json wrong = Claim("u3", NameOf(kRdma, "mlx5_0"));
  wrong["status"]["allocation"]["devices"]["results"] = "oops";
  list.items = {bad, wrong, nlohmann::json::array(), Claim("u2", NameOf(kRdma, "mlx5_1"))};
  holds.OnList(list);
  ASSERT_EQ(seen.size(), 1u);
  ASSERT_EQ(seen.back().entries.size(), 1u);
  EXPECT_EQ(seen.back().entries[0].device_ids, std::vector<std::string>{"mlx5_1"});
  EXPECT_EQ(holds.status().rejected, 2u);
}

TEST_F(DraFrontPartsTest, PrepareClaimsUnitsAndRefusesTheOtherModeOfAHeldDevice) {
  DraDevicePreparer preparer(
      &registry_, [this] { return Names(); }, nullptr);
  auto ids = preparer.Prepare("u1", {NameOf(kShared, "mlx5_0.t1")});
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_EQ(ids->size(), 1u);
  EXPECT_THAT((*ids)[0], HasSubstr("=mlx5_0"));
  // The scheduler gave the whole device to another claim between two syncs.
  auto refused = preparer.Prepare("u2", {NameOf(kRdma, "mlx5_0")});
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("u2"));
  EXPECT_THAT(refused.status().message(), HasSubstr("mlx5_0"));
  // The other device is free.
  EXPECT_TRUE(preparer.Prepare("u3", {NameOf(kRdma, "mlx5_1")}).ok());
  auto unknown = preparer.Prepare("u4", {"no-such-device"});
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(DraFrontPartsTest, PrepareWaitsForTheCdiSpec) {
  DraDevicePreparer preparer(
      &registry_, [this] { return Names(); },
      [](const std::string& kind) {
        return absl::UnavailableError("CDI spec " + kind + " not written");
      });
  auto ids = preparer.Prepare("u1", {NameOf(kRdma, "mlx5_0")});
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace fabric::dra
