#include "agent/dra/resource_slices.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/str_format.h"
#include "agent/base/file_util.h"
#include "agent/base/json_text.h"
#include "agent/config/config.h"
#include "agent/sysfs/sysfs_discovery.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/status_matchers.h"
#include "test/testing/test_dirs.h"

namespace fabric::dra {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr char kNode[] = "node-a";
constexpr char kEfa[] = "vpc.amazonaws.com/efa";
constexpr char kRdmaPool[] = "device.gpustack.ai/rdma";
constexpr char kSharedPool[] = "device.gpustack.ai/rdma.shared";

const PoolConfig& DefaultPool(const std::string& name) {
  static const Config config = DefaultConfig();
  const PoolConfig* pool = config.FindPool(name);
  if (!pool) std::abort();
  return *pool;
}

NodeInventory SampleNode(const std::string& name) {
  HostPaths p = HostPaths::Defaults();
  p.sysfs_root = testing::TestDataDir() + "/nodes/" + name + "/sys";
  p.dev_root = testing::TestDataDir() + "/nodes/" + name + "/dev";
  auto inv = DiscoverNode(p);
  if (!inv.ok()) {
    ADD_FAILURE() << inv.status();
    return {};
  }
  return *inv;
}

// The pool as the registry would build it: the devices its selector takes.
std::shared_ptr<const PoolSnapshot> Pool(const PoolConfig& config, const NodeInventory& inv,
                                         std::map<std::string, DeviceHealth> health = {},
                                         std::map<std::string, std::string> withdrawn = {}) {
  SnapshotInputs in;
  in.pool = &config;
  for (const RdmaDevice& d : inv.devices) {
    if (config.selector.Matches(d)) in.devices.push_back(d);
  }
  in.health = std::move(health);
  in.withdrawn = std::move(withdrawn);
  return BuildSnapshot(in);
}

RdmaDevice Mlx5(const std::string& name, int numa, const std::string& bdf) {
  RdmaDevice d;
  d.name = name;
  d.kind = DeviceKind::kRdma;
  d.pci = PciInfo{bdf, 0x15b3, 0x101d, "mlx5_core", numa, "", 0};
  d.pci->pcie_root = "pci0000:" + bdf.substr(5, 2);
  d.uverbs = CharDevice{"infiniband/uverbs" + name.substr(5), 231, 192};
  d.ports = {PortInfo{1, 4, "ACTIVE", 5, "LinkUp", "Ethernet", "100 Gb/sec", "ens1f0"}};
  return d;
}

NodeInventory FourMlx5() {
  NodeInventory inv;
  for (int i = 0; i < 4; ++i) {
    inv.devices.push_back(
        Mlx5("mlx5_" + std::to_string(i), i / 2, "0000:3" + std::to_string(i) + ":00.0"));
  }
  return inv;
}

std::vector<json> AllDevices(const ResourceSliceSet& set) {
  std::vector<json> out;
  for (const json& s : set.slices) {
    for (const json& d : s["spec"]["devices"]) out.push_back(d);
  }
  return out;
}

const json* DeviceNamed(const ResourceSliceSet& set, const std::string& name) {
  for (const json& s : set.slices) {
    for (const json& d : s["spec"]["devices"]) {
      if (d["name"] == name) return &d;
    }
  }
  return nullptr;
}

std::set<std::string> Names(const ResourceSliceSet& set) {
  std::set<std::string> out;
  for (const json& d : AllDevices(set)) out.insert(d["name"].get<std::string>());
  return out;
}

// Byte-exact comparison with a checked-in slice set; the manifest checks
// validate the same files against the Kubernetes ResourceSlice schema.
// FABRIC_UPDATE_GOLDEN=1 rewrites them.
void ExpectGolden(const std::vector<json>& slices, const std::string& file) {
  const std::string path = std::string(FABRIC_DRA_TESTDATA) + "/" + file;
  const std::string text = DumpJson(json(slices), 2) + "\n";
  if (std::getenv("FABRIC_UPDATE_GOLDEN")) {
    std::ofstream(path) << text;
    return;
  }
  std::ifstream in(path);
  std::stringstream want;
  want << in.rdbuf();
  EXPECT_EQ(text, want.str()) << "differs from " << path << " (FABRIC_UPDATE_GOLDEN=1 rewrites it)";
}

TEST(ResourceSlicesTest, P5PublishesThirtyTwoEfaWithTheirTopology) {
  const NodeInventory inv = SampleNode("p5.48xlarge");
  ASSERT_THAT(inv.devices, SizeIs(32));
  SliceInput in;
  in.node_name = kNode;
  in.pools = {Pool(DefaultPool(kEfa), inv)};
  ResourceSliceSet set = BuildResourceSlices(in);

  ASSERT_THAT(set.slices, SizeIs(1));
  const json& slice = set.slices[0];
  EXPECT_EQ(slice["apiVersion"], "resource.k8s.io/v1");
  EXPECT_EQ(slice["kind"], "ResourceSlice");
  EXPECT_EQ(slice["metadata"]["name"], "node-a-fabric.gpustack.ai-0");
  EXPECT_EQ(slice["spec"]["driver"], "fabric.gpustack.ai");
  EXPECT_EQ(slice["spec"]["nodeName"], kNode);
  EXPECT_EQ(slice["spec"]["pool"],
            json({{"name", kNode}, {"generation", 1}, {"resourceSliceCount", 1}}));
  EXPECT_EQ(set.generation, 1);
  EXPECT_EQ(set.device_count, 32u);
  EXPECT_THAT(set.warnings, IsEmpty());

  std::map<int64_t, int> per_numa;
  for (const RdmaDevice& dev : inv.devices) {
    const json* d = DeviceNamed(set, dev.name);  // EFA names are labels already
    ASSERT_NE(d, nullptr) << dev.name;
    const json& a = (*d)["attributes"];
    EXPECT_EQ(a["kind"], json({{"string", "efa"}}));
    EXPECT_EQ(a["mode"], json({{"string", "exclusive"}}));
    EXPECT_EQ(a["resource"], json({{"string", kEfa}}));
    EXPECT_EQ(a["rdmaDevice"], json({{"string", dev.name}}));
    EXPECT_EQ(a["uverbs"], json({{"string", Basename(dev.uverbs.rel_path)}}));
    EXPECT_EQ(a["pciAddress"], json({{"string", dev.pci->address}}));
    EXPECT_EQ(a["healthy"], json({{"bool", true}}));
    EXPECT_EQ(a["portState"], json({{"string", "ACTIVE"}}));
    EXPECT_FALSE(a.contains("token"));
    EXPECT_FALSE(d->contains("taints"));
    // The root is the pci* directory the device's class link goes through.
    auto link =
        ReadLink(testing::TestDataDir() + "/nodes/p5.48xlarge/sys/class/infiniband/" + dev.name);
    ASSERT_OK(link);
    EXPECT_EQ(a[kPcieRootAttribute], json({{"string", link->substr(14, 10)}})) << *link;
    per_numa[a["numaNode"]["int"].get<int64_t>()]++;
  }
  EXPECT_EQ(per_numa, (std::map<int64_t, int>{{0, 16}, {1, 16}}));
  // Natural order: rdmap79s0 before rdmap113s0.
  EXPECT_EQ(slice["spec"]["devices"][0]["name"], "rdmap79s0");
  EXPECT_EQ(slice["spec"]["devices"][31]["name"], "rdmap201s0");
  ExpectGolden(set.slices, "p5-efa-slices.json");
}

TEST(ResourceSlicesTest, SharedPoolOf64TokensOnFourDevicesFillsTwoSlicesOf128) {
  const NodeInventory inv = FourMlx5();
  SliceInput in;
  in.node_name = kNode;
  in.pools = {Pool(DefaultPool(kSharedPool), inv)};
  ResourceSliceSet set = BuildResourceSlices(in);

  EXPECT_EQ(set.device_count, 256u);
  ASSERT_THAT(set.slices, SizeIs(2));
  for (size_t i = 0; i < 2; ++i) {
    const json& s = set.slices[i];
    EXPECT_EQ(s["metadata"]["name"], "node-a-fabric.gpustack.ai-" + std::to_string(i));
    EXPECT_THAT(s["spec"]["devices"], SizeIs(128));
    EXPECT_EQ(s["spec"]["pool"]["resourceSliceCount"], 2);
    EXPECT_EQ(s["spec"]["pool"]["generation"], 1);
    EXPECT_EQ(s["spec"]["pool"]["name"], kNode);
  }
  EXPECT_THAT(Names(set), SizeIs(256));
  // One device's tokens stay together: mlx5_0 and mlx5_1 in slice 0.
  EXPECT_EQ(set.slices[0]["spec"]["devices"][0]["name"], "mlx5-0-t00");
  EXPECT_EQ(set.slices[0]["spec"]["devices"][127]["name"], "mlx5-1-t63");
  EXPECT_EQ(set.slices[1]["spec"]["devices"][0]["name"], "mlx5-2-t00");
  const json* t = DeviceNamed(set, "mlx5-3-t42");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ((*t)["attributes"]["token"], json({{"int", 42}}));
  EXPECT_EQ((*t)["attributes"]["mode"], json({{"string", "shared"}}));
  EXPECT_EQ((*t)["attributes"]["kind"], json({{"string", "rdma"}}));
  EXPECT_EQ((*t)["attributes"]["rdmaDevice"], json({{"string", "mlx5_3"}}));
  EXPECT_EQ((*t)["attributes"]["numaNode"], json({{"int", 1}}));
  EXPECT_EQ((*t)["attributes"]["netdev"], json({{"string", "ens1f0"}}));
  EXPECT_EQ((*t)["attributes"]["linkLayer"], json({{"string", "Ethernet"}}));
  EXPECT_EQ((*t)["attributes"][kPcieRootAttribute], json({{"string", "pci0000:33"}}));
  const PublishedUnit* unit = set.names.Lookup("mlx5-3-t42");
  ASSERT_NE(unit, nullptr);
  EXPECT_EQ(*unit, (PublishedUnit{kSharedPool, "mlx5_3", "mlx5_3.t42", 42}));
}

TEST(ResourceSlicesTest, WithdrawnUnitsAreLeftOutButKeepTheirNames) {
  const NodeInventory inv = FourMlx5();
  // mlx5_0 is held through a shared token: its exclusive unit is withdrawn.
  // mlx5_1 is held exclusively: every token of it is withdrawn.
  std::map<std::string, std::string> exclusive_withdrawn = {
      {"mlx5_0", "withdrawn while device mlx5_0 is held through rdma.shared"}};
  std::map<std::string, std::string> shared_withdrawn;
  for (int t = 0; t < 64; ++t) shared_withdrawn[TokenId("mlx5_1", t, 64)] = "held exclusively";
  SliceInput in;
  in.node_name = kNode;
  in.pools = {Pool(DefaultPool(kRdmaPool), inv, {}, exclusive_withdrawn),
              Pool(DefaultPool(kSharedPool), inv, {}, shared_withdrawn)};
  ResourceSliceSet set = BuildResourceSlices(in);

  const std::set<std::string> names = Names(set);
  EXPECT_EQ(set.device_count, 3u + 3u * 64u);
  EXPECT_FALSE(names.count("mlx5-0"));
  EXPECT_TRUE(names.count("mlx5-1"));
  EXPECT_TRUE(names.count("mlx5-0-t00"));
  for (int t = 0; t < 64; ++t) EXPECT_FALSE(names.count(absl::StrFormat("mlx5-1-t%02d", t)));
  // The withdrawn units are still named, so a claim allocated before the
  // withdrawal still resolves.
  ASSERT_NE(set.names.Lookup("mlx5-0"), nullptr);
  EXPECT_EQ(set.names.Lookup("mlx5-1-t05")->unit_id, "mlx5_1.t05");
}

TEST(ResourceSlicesTest, UnhealthyDeviceIsPublishedWithHealthyFalseAndAnOptionalTaint) {
  const NodeInventory inv = FourMlx5();
  std::map<std::string, DeviceHealth> health = {
      {"mlx5_2", DeviceHealth{false, "port 1 DOWN/Disabled", HealthCause::kPortDown}}};
  SliceInput in;
  in.node_name = kNode;
  in.pools = {Pool(DefaultPool(kRdmaPool), inv, health)};
  ResourceSliceSet plain = BuildResourceSlices(in);
  ASSERT_EQ(plain.device_count, 4u);
  const json* sick = DeviceNamed(plain, "mlx5-2");
  ASSERT_NE(sick, nullptr);
  EXPECT_EQ((*sick)["attributes"]["healthy"], json({{"bool", false}}));
  EXPECT_FALSE(sick->contains("taints")) << "taints are opt-in";
  EXPECT_EQ((*DeviceNamed(plain, "mlx5-1"))["attributes"]["healthy"], json({{"bool", true}}));

  in.options.taint_unhealthy = true;
  ResourceSliceSet tainted = BuildResourceSlices(in);
  sick = DeviceNamed(tainted, "mlx5-2");
  ASSERT_NE(sick, nullptr);
  EXPECT_EQ((*sick)["taints"], json::parse(R"([{"key":"fabric.gpustack.ai/unhealthy",
      "value":"port_down","effect":"NoSchedule"}])"));
  EXPECT_FALSE(DeviceNamed(tainted, "mlx5-1")->contains("taints"));
}

TEST(ResourceSlicesTest, SameInputSameJsonAndGeneration) {
  const NodeInventory inv = FourMlx5();
  SliceInput in;
  in.node_name = kNode;
  in.pools = {Pool(DefaultPool(kRdmaPool), inv), Pool(DefaultPool(kSharedPool), inv)};
  ResourceSliceSet first = BuildResourceSlices(in);
  ResourceSliceSet again = BuildResourceSlices(in);
  EXPECT_EQ(DumpJson(json(first.slices)), DumpJson(json(again.slices)));
  EXPECT_EQ(first.generation, 1);

  // Published and listed back from the server (text round trip, server
  // fields added): the same content keeps the generation and needs no write.
  std::vector<json> listed;
  for (const json& s : first.slices) {
    json l = json::parse(DumpJson(s));
    l["metadata"]["resourceVersion"] = "1234";
    l["metadata"]["uid"] = "7c0e-uid";
    l["metadata"]["creationTimestamp"] = "2026-12-02T04:00:00Z";
    listed.push_back(std::move(l));
  }
  in.published = listed;
  ResourceSliceSet third = BuildResourceSlices(in);
  EXPECT_EQ(third.generation, 1);
  EXPECT_EQ(DumpJson(json(third.slices)), DumpJson(json(first.slices)));
  EXPECT_TRUE(DiffSlices(third.slices, listed, kDriverName, kNode).empty());
  // Pools in another order publish the same.
  std::swap(in.pools[0], in.pools[1]);
  EXPECT_EQ(DumpJson(json(BuildResourceSlices(in).slices)), DumpJson(json(first.slices)));
}

TEST(ResourceSlicesTest, GenerationStepsOnlyWhenContentChanges) {
  const NodeInventory inv = FourMlx5();
  SliceInput in;
  in.node_name = kNode;
  in.pools = {Pool(DefaultPool(kRdmaPool), inv)};
  in.published = BuildResourceSlices(in).slices;
  for (json& s : in.published) s["spec"]["pool"]["generation"] = 6;  // published long ago

  EXPECT_EQ(BuildResourceSlices(in).generation, 6);
  in.pools = {Pool(DefaultPool(kRdmaPool), inv, {{"mlx5_0", DeviceHealth{false, "x"}}})};
  ResourceSliceSet changed = BuildResourceSlices(in);
  EXPECT_EQ(changed.generation, 7);
  for (const json& s : changed.slices) EXPECT_EQ(s["spec"]["pool"]["generation"], 7);
  EXPECT_FALSE(SameSliceContent(changed.slices, in.published));

  // Slices of another driver or node say nothing about ours.
  std::vector<json> others = in.published;
  for (json& s : others) s["spec"]["nodeName"] = "node-b";
  in.published = others;
  EXPECT_EQ(BuildResourceSlices(in).generation, 1);
}

TEST(ResourceSlicesTest, TaintTimeAddedBytheServerIsNotAChange) {
  const NodeInventory inv = FourMlx5();
  SliceInput in;
  in.node_name = kNode;
  in.options.taint_unhealthy = true;
  in.pools = {Pool(DefaultPool(kRdmaPool), inv, {{"mlx5_0", DeviceHealth{false, "x"}}})};
  std::vector<json> listed = BuildResourceSlices(in).slices;
  for (json& d : listed[0]["spec"]["devices"]) {
    if (d.contains("taints")) d["taints"][0]["timeAdded"] = "2026-12-02T04:00:00Z";
  }
  in.published = listed;
  ResourceSliceSet set = BuildResourceSlices(in);
  EXPECT_EQ(set.generation, 1);
  EXPECT_TRUE(DiffSlices(set.slices, listed, kDriverName, kNode).empty());
}

TEST(ResourceSlicesTest, DiffCreatesUpdatesAndDeletesOnlyOurSlices) {
  NodeInventory inv = FourMlx5();
  SliceInput in;
  in.node_name = kNode;
  in.pools = {Pool(DefaultPool(kSharedPool), inv)};  // 256 devices: 2 slices
  std::vector<json> listed = BuildResourceSlices(in).slices;
  listed[0]["metadata"]["resourceVersion"] = "41";
  listed[1]["metadata"]["resourceVersion"] = "42";
  json foreign = listed[1];
  foreign["metadata"]["name"] = "node-a-gpu.nvidia.com-0";
  foreign["spec"]["driver"] = "gpu.nvidia.com";
  json other_node = listed[1];
  other_node["metadata"]["name"] = "node-b-fabric.gpustack.ai-1";
  other_node["spec"]["nodeName"] = "node-b";
  listed.push_back(foreign);
  listed.push_back(other_node);

  // Two devices go away: 128 devices fit one slice; generation 2.
  inv.devices.resize(2);
  in.pools = {Pool(DefaultPool(kSharedPool), inv)};
  in.published = listed;
  ResourceSliceSet set = BuildResourceSlices(in);
  ASSERT_THAT(set.slices, SizeIs(1));
  EXPECT_EQ(set.generation, 2);
  SliceDiff diff = DiffSlices(set.slices, listed, kDriverName, kNode);
  EXPECT_THAT(diff.create, IsEmpty());
  ASSERT_THAT(diff.update, SizeIs(1));
  EXPECT_EQ(diff.update[0]["metadata"]["name"], "node-a-fabric.gpustack.ai-0");
  EXPECT_EQ(diff.update[0]["metadata"]["resourceVersion"], "41");
  EXPECT_EQ(diff.update[0]["spec"]["pool"]["resourceSliceCount"], 1);
  EXPECT_THAT(diff.remove, ElementsAre("node-a-fabric.gpustack.ai-1"));

  // Nothing listed: everything is created.
  SliceDiff fresh = DiffSlices(set.slices, {foreign}, kDriverName, kNode);
  EXPECT_THAT(fresh.create, SizeIs(1));
  EXPECT_THAT(fresh.update, IsEmpty());
  EXPECT_THAT(fresh.remove, IsEmpty());

  // The caller's ownerReferences must be on the server's copy too.
  std::vector<json> owned = set.slices;
  owned[0]["metadata"]["ownerReferences"] =
      json::parse(R"([{"apiVersion":"v1","kind":"Node","name":"node-a","uid":"n-uid"}])");
  std::vector<json> written = set.slices;
  EXPECT_THAT(DiffSlices(owned, written, kDriverName, kNode).update, SizeIs(1));
  EXPECT_TRUE(DiffSlices(owned, owned, kDriverName, kNode).empty());
}

TEST(ResourceSlicesTest, ANodeWithoutDevicesPublishesOneEmptySlice) {
  SliceInput in;
  in.node_name = kNode;
  in.pools = {Pool(DefaultPool(kEfa), NodeInventory{})};
  ResourceSliceSet set = BuildResourceSlices(in);
  ASSERT_THAT(set.slices, SizeIs(1));
  EXPECT_EQ(set.slices[0]["spec"]["devices"], json::array());
  EXPECT_EQ(set.slices[0]["spec"]["pool"]["resourceSliceCount"], 1);
  // The server leaves an empty list out; that is no change.
  json listed = set.slices[0];
  listed["spec"].erase("devices");
  EXPECT_TRUE(DiffSlices(set.slices, {listed}, kDriverName, kNode).empty());
}

TEST(ResourceSlicesTest, AStringOverTheApiLimitIsLeftOutWithAWarning) {
  PoolConfig pool = DefaultPool(kRdmaPool);
  pool.name = "example.com/" + std::string(60, 'r');
  SliceInput in;
  in.node_name = kNode;
  in.pools = {Pool(pool, FourMlx5())};
  ResourceSliceSet set = BuildResourceSlices(in);
  const json* d = DeviceNamed(set, "mlx5-0");
  ASSERT_NE(d, nullptr);
  EXPECT_FALSE((*d)["attributes"].contains("resource"));
  EXPECT_TRUE((*d)["attributes"].contains("rdmaDevice"));
  ASSERT_THAT(set.warnings, SizeIs(4));
  EXPECT_THAT(set.warnings[0], HasSubstr("attribute resource left out (72 bytes"));
}

TEST(ResourceSlicesTest, SliceNamesStayWithinTheObjectNameLimit) {
  EXPECT_EQ(SliceName("node-a", kDriverName, 3), "node-a-fabric.gpustack.ai-3");
  std::string node(240, 'n');
  node[229] = '.';
  const std::string a = SliceName(node, kDriverName, 0);
  const std::string b = SliceName(node + "x", kDriverName, 0);
  EXPECT_LE(a.size(), 253u);
  EXPECT_NE(a, b);
  EXPECT_EQ(a.find(".-"), std::string::npos) << a;
}

TEST(ResourceSlicesTest, RoceSriovGoldenWithTokensAndATaint) {
  const NodeInventory inv = SampleNode("mlx5-roce-sriov");
  ASSERT_THAT(inv.devices, SizeIs(6));
  PoolConfig shared = DefaultPool(kSharedPool);
  shared.tokens_per_device = 4;
  std::map<std::string, DeviceHealth> health = {
      {"mlx5_1", DeviceHealth{false, "port 1 DOWN/Disabled", HealthCause::kPortDown}}};
  SliceInput in;
  in.node_name = "roce-node";
  in.options.taint_unhealthy = true;
  in.pools = {Pool(DefaultPool(kRdmaPool), inv, health), Pool(shared, inv, health),
              Pool(DefaultPool("device.gpustack.ai/rdma.partitioned"), inv, health)};
  ResourceSliceSet set = BuildResourceSlices(in);
  for (const json& d : AllDevices(set)) {
    EXPECT_EQ(d["attributes"][kPcieRootAttribute], json({{"string", "pci0000:3b"}})) << d["name"];
  }
  ExpectGolden(set.slices, "roce-sriov-slices.json");
}

}  // namespace
}  // namespace fabric::dra
