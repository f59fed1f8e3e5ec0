// ClaimHolds (allocated ResourceClaims -> holds) and DraDevicePreparer
// (published names -> PoolRegistry::Claim + CDI names) over a real registry.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "agent/base/file_util.h"
#include "agent/config/config.h"
#include "agent/dra/dra_names.h"
#include "agent/dra_front/claim_env_specs.h"
#include "agent/dra_front/claim_holds.h"
#include "agent/dra_front/dra_device_preparer.h"
#include "agent/pools/pool_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "test/testing/test_dirs.h"

namespace fabric::dra {
namespace {

using ::testing::ElementsAre;
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
  EXPECT_THAT((*ids)[0], ElementsAre(HasSubstr("=mlx5_0")));
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

// A claim over devices of pools with env presets gets one more CDI name on
// every device: its own entry holding the variables for all of them.
// Both devices as RoCE ports whose RoCE v2 IPv4 GID is index 1.
NodeInventory RoceNode() {
  NodeInventory inv;
  RdmaDevice a = Dev("mlx5_0"), b = Dev("mlx5_1");
  for (RdmaDevice* d : {&a, &b}) {
    PortInfo p;
    p.number = 1;
    p.link_layer = "Ethernet";
    p.gids = {{0, "fe80:0000:0000:0000:5054:00ff:fe12:3456", GidType::kRoceV2, "eth0"},
              {1, "0000:0000:0000:0000:0000:ffff:0a00:020f", GidType::kRoceV2, "eth0"}};
    d->ports = {p};
  }
  inv.devices = {a, b};
  return inv;
}

TEST_F(DraFrontPartsTest, PresetsGiveTheClaimItsOwnEngineEnvironmentEntry) {
  registry_.SetNode(RoceNode(), {});
  Config c = DefaultConfig();
  for (PoolConfig& p : c.pools) {
    p.tokens_per_device = 2;
    p.env = {EnvPreset::kMooncake, EnvPreset::kNccl, EnvPreset::kNcclGidIndex};
  }
  registry_.ApplyConfig(c);
  testing::TempDir dir;
  ClaimEnvSpecs specs(dir.path() + "/cdi", dir.path() + "/state", kDriverName);
  DraDevicePreparer preparer(
      &registry_, [this] { return Names(); }, nullptr, &specs);
  auto ids = preparer.Prepare("u1", {NameOf(kRdma, "mlx5_0"), NameOf(kRdma, "mlx5_1")});
  ASSERT_TRUE(ids.ok()) << ids.status();
  const std::string claim = "fabric.gpustack.ai/claim=claim-u1";
  EXPECT_THAT((*ids)[0], ElementsAre("device.gpustack.ai/rdma=mlx5_0", claim));
  EXPECT_THAT((*ids)[1], ElementsAre("device.gpustack.ai/rdma=mlx5_1", claim));
  auto text = ReadFile(specs.SpecPath("u1"));
  ASSERT_TRUE(text.ok()) << text.status();
  auto spec = nlohmann::json::parse(*text);
  EXPECT_EQ(spec["kind"], "fabric.gpustack.ai/claim");
  EXPECT_EQ(spec["devices"][0]["name"], "claim-u1");
  EXPECT_EQ(
      spec["devices"][0]["containerEdits"]["env"],
      nlohmann::json({"MOONCAKE_DEVICE=mlx5_0,mlx5_1", "MC_MS_FILTERS=mlx5_0,mlx5_1",
                      "MC_GID_INDEX=1", "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1", "NCCL_IB_GID_INDEX=1"}));
  // Lost with the tmpfs at a reboot: back at the next start.
  std::filesystem::remove_all(dir.path() + "/cdi");
  auto restored = specs.Restore();
  ASSERT_TRUE(restored.ok());
  EXPECT_EQ(*restored, 1);
  EXPECT_TRUE(PathExists(specs.SpecPath("u1")));
  ASSERT_TRUE(preparer.Unprepare("u1").ok());
  EXPECT_FALSE(PathExists(specs.SpecPath("u1")));
  EXPECT_EQ(*specs.Restore(), 0);
  EXPECT_FALSE(specs.Remove("../escape").ok());
}

// One claim, two pools: a variable they set differently is left out.
TEST_F(DraFrontPartsTest, PoolsThatDisagreeLeaveTheVariableOut) {
  registry_.SetNode(RoceNode(), {});
  Config c = DefaultConfig();
  for (PoolConfig& p : c.pools) {
    p.tokens_per_device = 2;
    p.env = {EnvPreset::kUcx};
  }
  registry_.ApplyConfig(c);
  engine_env::EngineEnv env =
      ClaimEngineEnv(registry_, {{kRdma, {"mlx5_0"}}, {kShared, {"mlx5_1"}}});
  EXPECT_TRUE(env.vars.empty());
  ASSERT_EQ(env.notes.size(), 1u);
  EXPECT_THAT(env.notes[0], HasSubstr("UCX_NET_DEVICES not set"));
  env = ClaimEngineEnv(registry_, {{kRdma, {"mlx5_0"}}});
  EXPECT_EQ(env.vars,
            (std::vector<std::pair<std::string, std::string>>{{"UCX_NET_DEVICES", "mlx5_0:1"}}));
}

// Presets off (the default): the claim's answer is what it always was.
TEST_F(DraFrontPartsTest, NoPresetsNoEntry) {
  testing::TempDir dir;
  ClaimEnvSpecs specs(dir.path() + "/cdi", dir.path() + "/state", kDriverName);
  DraDevicePreparer preparer(
      &registry_, [this] { return Names(); }, nullptr, &specs);
  auto ids = preparer.Prepare("u1", {NameOf(kRdma, "mlx5_0")});
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT((*ids)[0], ElementsAre("device.gpustack.ai/rdma=mlx5_0"));
  EXPECT_FALSE(PathExists(specs.SpecPath("u1")));
}

}  // namespace
}  // namespace fabric::dra
