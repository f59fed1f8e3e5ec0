#include "tools/fabricctl/devices.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/base/file_util.h"
#include "agent/base/host_paths.h"
#include "agent/sysfs/sysfs_discovery.h"
#include "test/testing/status_matchers.h"
#include "test/testing/test_dirs.h"

namespace fabric::fabricctl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using json = nlohmann::ordered_json;

// The checked-in sample trees (test/testdata/nodes/<name>/{sys,dev}). A tree
// that is not there fails the test by name: discovery alone would see a node
// without RDMA devices.
json DevicesJsonFor(const std::string& tree, const Config& config = DefaultConfig()) {
  const std::string dir = testing::TestDataDir() + "/nodes/" + tree;
  if (!IsDirectory(dir + "/sys")) {
    ADD_FAILURE() << "no sample tree " << dir << " (FABRIC_TESTDATA, which ctest sets, or run "
                  << "from the repository root)";
    return json();
  }
  HostPaths paths = HostPaths::Defaults();
  paths.sysfs_root = dir + "/sys";
  paths.dev_root = dir + "/dev";
  auto inv = DiscoverNode(paths);
  EXPECT_THAT(inv, IsOk());
  if (!inv.ok()) return json();
  EXPECT_THAT(inv->warnings, ElementsAre()) << tree;
  return DevicesToJson(*inv, config, "test");
}

const json* FindDevice(const json& doc, const std::string& name) {
  for (const json& d : doc["devices"]) {
    if (d["name"] == name) return &d;
  }
  return nullptr;
}

TEST(DevicesTest, P5HasThirtyTwoEfaAllInTheEfaPool) {
  json doc = DevicesJsonFor("p5.48xlarge");
  ASSERT_EQ(doc["devices"].size(), 32u);
  int numa0 = 0;
  std::set<uint32_t> minors;
  for (const json& d : doc["devices"]) {
    EXPECT_EQ(d["kind"], "efa");
    EXPECT_EQ(d["pci"]["vendor"], "0x1d0f");
    EXPECT_EQ(d["pci"]["device"], "0xefa1");
    EXPECT_EQ(d["link_layer"], "Unknown");
    EXPECT_THAT(d["pools"], ElementsAre("vpc.amazonaws.com/efa"));
    numa0 += d["numa_node"] == 0 ? 1 : 0;
    EXPECT_EQ(d["uverbs"]["major"], 231);
    minors.insert(d["uverbs"]["minor"].get<uint32_t>());
  }
  EXPECT_EQ(numa0, 16);
  EXPECT_EQ(minors.size(), 32u);
  EXPECT_EQ(*minors.begin(), 192u);
  EXPECT_EQ(*minors.rbegin(), 223u);
  const json* first = FindDevice(doc, "rdmap79s0");
  ASSERT_NE(first, nullptr);
  EXPECT_EQ((*first)["pci"]["address"], "0000:4f:00.0");
  EXPECT_EQ((*first)["uverbs"]["path"], "/dev/infiniband/uverbs0");
  EXPECT_EQ(doc["rdma_cm"]["dev"], "10:121");
  EXPECT_EQ(doc["pools"][0]["name"], "vpc.amazonaws.com/efa");
  EXPECT_EQ(doc["pools"][0]["devices"].size(), 32u);
}

TEST(DevicesTest, P6SeparatesEfaFromTheMlx5Functions) {
  json doc = DevicesJsonFor("p6-b200.48xlarge");
  ASSERT_EQ(doc["devices"].size(), 10u);
  int efa = 0;
  for (const json& d : doc["devices"]) efa += d["kind"] == "efa" ? 1 : 0;
  EXPECT_EQ(efa, 8);
  const json* ib = FindDevice(doc, "ibp115s0f0");
  ASSERT_NE(ib, nullptr);
  EXPECT_EQ((*ib)["kind"], "rdma");
  EXPECT_EQ((*ib)["pci"]["vendor"], "0x15b3");
  EXPECT_EQ((*ib)["link_layer"], "InfiniBand");
  EXPECT_EQ((*ib)["uverbs"]["rel_path"], "infiniband/uverbs4");
  EXPECT_THAT((*ib)["pools"],
              ElementsAre("device.gpustack.ai/rdma", "device.gpustack.ai/rdma.shared"));
  const json* e = FindDevice(doc, "rdmap24s0");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ((*e)["pci"]["device"], "0xefa2");
  EXPECT_THAT((*e)["pools"], ElementsAre("vpc.amazonaws.com/efa"));
}

TEST(DevicesTest, SriovPfWithVfsServesNoPoolAndVfsArePartitioned) {
  json doc = DevicesJsonFor("mlx5-roce-sriov");
  ASSERT_EQ(doc["devices"].size(), 6u);
  const json* pf = FindDevice(doc, "mlx5_0");
  ASSERT_NE(pf, nullptr);
  EXPECT_EQ((*pf)["pci"]["sriov_numvfs"], 4);
  EXPECT_EQ((*pf)["netdev"], "ens1f0np0");
  EXPECT_EQ((*pf)["link_layer"], "Ethernet");
  EXPECT_TRUE((*pf)["pools"].empty());
  const json* vf = FindDevice(doc, "mlx5_2");
  ASSERT_NE(vf, nullptr);
  EXPECT_EQ((*vf)["pci"]["is_vf"], true);
  EXPECT_EQ((*vf)["pci"]["physfn"], "0000:3b:00.0");
  EXPECT_THAT((*vf)["pools"], ElementsAre("device.gpustack.ai/rdma.partitioned"));
  const json* pf1 = FindDevice(doc, "mlx5_1");
  ASSERT_NE(pf1, nullptr);
  EXPECT_THAT((*pf1)["pools"],
              ElementsAre("device.gpustack.ai/rdma", "device.gpustack.ai/rdma.shared"));
}

TEST(DevicesTest, RxeHasNoPciAndItsParentNetdev) {
  json doc = DevicesJsonFor("rxe");
  ASSERT_EQ(doc["devices"].size(), 1u);
  const json& d = doc["devices"][0];
  EXPECT_EQ(d["name"], "rxe0");
  EXPECT_EQ(d["kind"], "rdma");
  EXPECT_TRUE(d["pci"].is_null());
  EXPECT_EQ(d["numa_node"], -1);
  EXPECT_EQ(d["netdev"], "eth0");
  EXPECT_EQ(d["ports"][0]["state"], "ACTIVE");
  EXPECT_EQ(d["ports"][0]["active"], true);
  EXPECT_EQ(d["uverbs"]["dev"], "231:192");
}

TEST(DevicesTest, CustomConfigDecidesThePools) {
  auto config = ParseConfig(R"(
pools:
  - name: example.com/roce
    mode: shared
    tokensPerDevice: 8
    selector:
      linkTypes: [Ethernet]
)",
                            "custom.yaml");
  ASSERT_THAT(config, IsOk());
  json doc = DevicesJsonFor("mlx5-roce-sriov", *config);
  ASSERT_EQ(doc["pools"].size(), 1u);
  EXPECT_EQ(doc["pools"][0]["mode"], "shared");
  EXPECT_EQ(doc["pools"][0]["tokens_per_device"], 8);
  EXPECT_EQ(doc["pools"][0]["devices"].size(), 6u);
  const json* pf0 = FindDevice(doc, "mlx5_0");
  ASSERT_NE(pf0, nullptr);
  EXPECT_THAT((*pf0)["pools"], ElementsAre("example.com/roce"));
}

TEST(DevicesTest, TextTableHasOneRowPerDeviceAndThePools) {
  NodeInventory inv;
  RdmaDevice d;
  d.name = "rdmap79s0";
  d.kind = DeviceKind::kEfa;
  d.pci = PciInfo{"0000:4f:00.0", 0x1d0f, 0xefa1, "efa", 0, "", 0};
  d.uverbs = {"infiniband/uverbs0", 231, 192};
  d.ports.push_back(PortInfo{1, 4, "ACTIVE", 5, "LinkUp", "Unknown", "100 Gb/sec", ""});
  inv.devices.push_back(d);
  inv.warnings.push_back("skipped foo: no uverbs");
  std::string text = DevicesToText(inv, DefaultConfig(), "built-in defaults");
  EXPECT_THAT(text, HasSubstr("NAME"));
  EXPECT_THAT(text, HasSubstr("rdmap79s0    efa  0000:4f:00.0"));
  EXPECT_THAT(text, HasSubstr("231:192"));
  EXPECT_THAT(text, HasSubstr("vpc.amazonaws.com/efa"));
  EXPECT_THAT(text, HasSubstr("1 device(s); rdma_cm absent"));
  EXPECT_THAT(text, HasSubstr("warning: skipped foo: no uverbs"));
  EXPECT_THAT(DevicesToText(NodeInventory{}, DefaultConfig(), "x"), HasSubstr("(no RDMA devices)"));
}

// --agent: what the agent's /v1/node says of how it serves the pools.
TEST(DevicesTest, AgentServingShowsRegistrationAndDraState) {
  const nlohmann::json node = nlohmann::json::parse(R"({
    "pools": [{"resource": "vpc.amazonaws.com/efa", "registration": "dra", "registered": true},
              {"resource": "device.gpustack.ai/efa.shared", "registration": "dra", "registered": false}],
    "dra": {"driver": "fabric.gpustack.ai", "pool": "node-a", "registered": true,
            "slices": {"synced": false, "count": 1, "devices": 93, "generation": 5,
                       "last_error": "list resourceslices: cannot reach the API server"},
            "claims": {"allocated": 2, "prepared": 1},
            "prepare": {"calls": 2, "errors": 1}}})");
  const nlohmann::ordered_json serving = AgentServing(node);
  ASSERT_EQ(serving["pools"].size(), 2u);
  EXPECT_EQ(serving["dra"]["slices"]["devices"], 93);
  const std::string text = AgentServingToText(serving, "http://127.0.0.1:9435");
  EXPECT_THAT(text, HasSubstr("device.gpustack.ai/efa.shared"));
  EXPECT_THAT(text, HasSubstr("NOT registered"));
  EXPECT_THAT(text, HasSubstr("DRA driver fabric.gpustack.ai (pool node-a): registered; 1 "
                              "ResourceSlice(s), 93 device(s), generation 5 (NOT synced)"));
  EXPECT_THAT(text,
              HasSubstr("claims: 2 allocated here, 1 prepared; prepare: 2 call(s), 1 error(s)"));
  EXPECT_THAT(text, HasSubstr("last slice error: list resourceslices"));
}

TEST(DevicesTest, AgentServingToleratesADeviceModeOrHostileDocument) {
  // A device-plugin agent: no "dra" member.
  const nlohmann::ordered_json dp = AgentServing(nlohmann::json::parse(
      R"({"pools": [{"resource": "vpc.amazonaws.com/efa", "registration": "watcher", "registered": true}]})"));
  EXPECT_TRUE(dp["dra"].is_null());
  EXPECT_THAT(AgentServingToText(dp, "a"), Not(HasSubstr("DRA driver")));
  // Wrong types everywhere: nothing throws, nothing is invented.
  const nlohmann::ordered_json bad = AgentServing(
      nlohmann::json::parse(R"({"pools": [1, "x", {"resource": 7}], "dra": {"slices": 3}})"));
  EXPECT_NO_THROW((void)AgentServingToText(bad, "a"));
  EXPECT_TRUE(AgentServing(nlohmann::json::array())["pools"].empty());
}

}  // namespace
}  // namespace fabric::fabricctl
