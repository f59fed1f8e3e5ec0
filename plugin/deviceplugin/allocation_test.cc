#include "plugin/deviceplugin/allocation.h"

#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/status_matchers.h"

namespace fabric {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

RdmaDevice Dev(const std::string& name, DeviceKind kind, int numa, int uverbs) {
  RdmaDevice d;
  d.name = name;
  d.kind = kind;
  d.pci = PciInfo{"0000:00:00.0",
                  kind == DeviceKind::kEfa ? 0x1d0fu : 0x15b3u,
                  kind == DeviceKind::kEfa ? 0xefa1u : 0x101bu,
                  "",
                  numa,
                  "",
                  0};
  d.uverbs = CharDevice{"infiniband/uverbs" + std::to_string(uverbs), 231,
                        static_cast<uint32_t>(192 + uverbs)};
  return d;
}

struct Fixture {
  PoolConfig pool;
  SnapshotInputs in;
  std::shared_ptr<const PoolSnapshot> snap;

  Fixture(PoolMode mode, std::vector<RdmaDevice> devices, int tokens = 4) {
    pool.name =
        mode == PoolMode::kShared ? "device.gpustack.ai/rdma.shared" : "vpc.amazonaws.com/efa";
    pool.mode = mode;
    pool.tokens_per_device = tokens;
    in.pool = &pool;
    in.devices = std::move(devices);
    in.rdma_cm = CharDevice{"infiniband/rdma_cm", 10, 120};
    Rebuild();
  }
  void Rebuild() { snap = BuildSnapshot(in); }
};

v1beta1::ContainerAllocateRequest Req(std::vector<std::string> ids) {
  v1beta1::ContainerAllocateRequest r;
  for (auto& id : ids) r.add_devices_ids(id);
  return r;
}

std::vector<std::string> Paths(const v1beta1::ContainerAllocateResponse& r) {
  std::vector<std::string> out;
  for (const auto& d : r.devices()) {
    EXPECT_EQ(d.host_path(), d.container_path());
    EXPECT_EQ(d.permissions(), "rw");
    out.push_back(d.host_path());
  }
  return out;
}

TEST(AllocateTest, EfaGrantsExactlyTheVerbsNodesWithoutRdmaCm) {
  Fixture f(PoolMode::kExclusive,
            {Dev("rdmap79s0", DeviceKind::kEfa, 0, 0), Dev("rdmap80s0", DeviceKind::kEfa, 0, 1),
             Dev("rdmap81s0", DeviceKind::kEfa, 1, 2)});
  auto r = AllocateContainer(*f.snap, Req({"rdmap81s0", "rdmap79s0"}));
  ASSERT_OK(r);
  EXPECT_THAT(Paths(r->response),
              ElementsAre("/dev/infiniband/uverbs2", "/dev/infiniband/uverbs0"));
  EXPECT_THAT(r->response.envs(), UnorderedElementsAre(Pair("FABRIC_DEVICES_VPC_AMAZONAWS_COM_EFA",
                                                            "rdmap81s0,rdmap79s0")));
  EXPECT_TRUE(r->response.mounts().empty());
  EXPECT_TRUE(r->response.cdi_devices().empty());
}

TEST(AllocateTest, RdmaAddsRdmaCmOnceAndNcclHca) {
  Fixture f(PoolMode::kExclusive,
            {Dev("mlx5_0", DeviceKind::kRdma, 0, 0), Dev("mlx5_1", DeviceKind::kRdma, 0, 1)});
  f.pool.name = "device.gpustack.ai/rdma";
  f.Rebuild();
  auto r = AllocateContainer(*f.snap, Req({"mlx5_0", "mlx5_1"}));
  ASSERT_OK(r);
  EXPECT_THAT(Paths(r->response), ElementsAre("/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1",
                                              "/dev/infiniband/rdma_cm"));
  EXPECT_EQ(r->response.envs().at("NCCL_IB_HCA"), "=mlx5_0,mlx5_1");
  EXPECT_EQ(r->response.envs().at("FABRIC_DEVICES_DEVICE_GPUSTACK_AI_RDMA"), "mlx5_0,mlx5_1");
}

TEST(AllocateTest, NoRdmaCmWhenTheNodeHasNone) {
  Fixture f(PoolMode::kExclusive, {Dev("mlx5_0", DeviceKind::kRdma, 0, 0)});
  f.in.rdma_cm.reset();
  f.Rebuild();
  auto r = AllocateContainer(*f.snap, Req({"mlx5_0"}));
  ASSERT_OK(r);
  EXPECT_THAT(Paths(r->response), ElementsAre("/dev/infiniband/uverbs0"));
}

TEST(AllocateTest, SharedTokensMapToTheirDevice) {
  Fixture f(PoolMode::kShared,
            {Dev("mlx5_0", DeviceKind::kRdma, 0, 3), Dev("mlx5_1", DeviceKind::kRdma, 1, 4)},
            /*tokens=*/64);
  ASSERT_EQ(f.snap->units.size(), 128u);
  EXPECT_EQ(f.snap->units[0].id, "mlx5_0.t00");
  EXPECT_EQ(f.snap->units[63].id, "mlx5_0.t63");
  auto r = AllocateContainer(*f.snap, Req({"mlx5_1.t07", "mlx5_1.t08"}));
  ASSERT_OK(r);
  EXPECT_THAT(Paths(r->response),
              ElementsAre("/dev/infiniband/uverbs4", "/dev/infiniband/rdma_cm"));
  EXPECT_EQ(r->response.envs().at("NCCL_IB_HCA"), "=mlx5_1");
}

TEST(AllocateTest, UnknownUnhealthyAndDuplicateIdsAreRefusedNamingTheId) {
  Fixture f(PoolMode::kExclusive,
            {Dev("rdmap79s0", DeviceKind::kEfa, 0, 0), Dev("rdmap80s0", DeviceKind::kEfa, 0, 1)});
  f.in.health["rdmap80s0"] = DeviceHealth{false, "device removed"};
  f.Rebuild();
  auto unknown = AllocateContainer(*f.snap, Req({"rdmap79s0", "nope0"}));
  EXPECT_THAT(unknown, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("nope0"));
  auto sick = AllocateContainer(*f.snap, Req({"rdmap80s0"}));
  EXPECT_THAT(sick, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(sick.status().message()), HasSubstr("rdmap80s0"));
  EXPECT_THAT(std::string(sick.status().message()), HasSubstr("device removed"));
  EXPECT_THAT(AllocateContainer(*f.snap, Req({"rdmap79s0", "rdmap79s0"})),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(AllocateContainer(*f.snap, Req({})), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(AllocateTest, CdiNamesWhenEnabled) {
  Fixture f(PoolMode::kExclusive, {Dev("rdmap79s0", DeviceKind::kEfa, 0, 0)});
  f.in.cdi_kind = "vpc.amazonaws.com/efa";
  f.Rebuild();
  auto r = AllocateContainer(*f.snap, Req({"rdmap79s0"}));
  ASSERT_OK(r);
  ASSERT_EQ(r->response.cdi_devices_size(), 1);
  EXPECT_EQ(r->response.cdi_devices(0).name(), "vpc.amazonaws.com/efa=rdmap79s0");
}

// ---- Env presets, per pool and mode.

RdmaDevice Rxe(const std::string& name, int uverbs, int ipv4_index) {
  RdmaDevice d = Dev(name, DeviceKind::kRdma, -1, uverbs);
  d.pci.reset();
  PortInfo p;
  p.number = 1;
  p.link_layer = "Ethernet";
  p.gids.push_back({0, "fe80:0000:0000:0000:5054:00ff:fe12:3456", GidType::kRoceV2, "eth0"});
  p.gids.push_back(
      {ipv4_index, "0000:0000:0000:0000:0000:ffff:0a00:020f", GidType::kRoceV2, "eth0"});
  d.ports = {p};
  return d;
}

TEST(AllocateEnvTest, ExclusivePoolWithMooncakeNcclUcx) {
  Fixture f(PoolMode::kExclusive, {Rxe("rxe0", 0, 1), Rxe("rxe1", 1, 1)});
  f.pool.name = "device.gpustack.ai/rdma";
  f.pool.env = {EnvPreset::kMooncake, EnvPreset::kNccl, EnvPreset::kNcclGidIndex, EnvPreset::kUcx};
  f.Rebuild();
  auto r = AllocateContainer(*f.snap, Req({"rxe1", "rxe0"}));
  ASSERT_OK(r);
  EXPECT_THAT(
      r->response.envs(),
      UnorderedElementsAre(Pair("FABRIC_DEVICES_DEVICE_GPUSTACK_AI_RDMA", "rxe1,rxe0"),
                           Pair("MOONCAKE_DEVICE", "rxe1,rxe0"), Pair("MC_MS_FILTERS", "rxe1,rxe0"),
                           Pair("MC_GID_INDEX", "1"),
                           // the preset's form: ports named, exact match
                           Pair("NCCL_IB_HCA", "=rxe1:1,rxe0:1"), Pair("NCCL_IB_GID_INDEX", "1"),
                           Pair("UCX_NET_DEVICES", "rxe1:1,rxe0:1")));
  EXPECT_TRUE(r->notes.empty());
  // What the index variables named, per port, for the pool's GID ledger.
  ASSERT_EQ(r->given.size(), 2u);
  EXPECT_EQ(r->given[0].device, "rxe1");
  EXPECT_EQ(r->given[0].index, 1);
}

TEST(AllocateEnvTest, DisagreeingDevicesLeaveTheIndexOutAndSayWhy) {
  Fixture f(PoolMode::kExclusive, {Rxe("rxe0", 0, 1), Rxe("rxe1", 1, 2)});
  f.pool.name = "device.gpustack.ai/rdma";
  f.pool.env = {EnvPreset::kMooncake};
  f.Rebuild();
  auto both = AllocateContainer(*f.snap, Req({"rxe0", "rxe1"}));
  ASSERT_OK(both);
  EXPECT_EQ(both->response.envs().count("MC_GID_INDEX"), 0u);
  ASSERT_EQ(both->notes.size(), 1u);
  EXPECT_THAT(both->notes[0], HasSubstr("rxe0 port 1: index 1, rxe1 port 1: index 2"));
  auto one = AllocateContainer(*f.snap, Req({"rxe1"}));
  ASSERT_OK(one);
  EXPECT_EQ(one->response.envs().at("MC_GID_INDEX"), "2");
}

TEST(AllocateEnvTest, SharedTokensNameTheirDeviceOnce) {
  Fixture f(PoolMode::kShared, {Rxe("rxe0", 0, 1)}, /*tokens=*/8);
  f.pool.env = {EnvPreset::kUcx, EnvPreset::kNccl};
  f.Rebuild();
  auto r = AllocateContainer(*f.snap, Req({"rxe0.t3", "rxe0.t5"}));
  ASSERT_OK(r);
  EXPECT_EQ(r->response.envs().at("UCX_NET_DEVICES"), "rxe0:1");
  EXPECT_EQ(r->response.envs().at("NCCL_IB_HCA"), "=rxe0:1");
  // `nccl` leaves the index to NCCL's own selection (2.21+).
  EXPECT_EQ(r->response.envs().count("NCCL_IB_GID_INDEX"), 0u);
}

TEST(AllocateEnvTest, EfaPoolWithLibfabricAndNoPresetsAtAll) {
  Fixture f(PoolMode::kExclusive, {Dev("rdmap79s0", DeviceKind::kEfa, 0, 0)});
  f.pool.env = {EnvPreset::kLibfabric};
  f.Rebuild();
  auto r = AllocateContainer(*f.snap, Req({"rdmap79s0"}));
  ASSERT_OK(r);
  EXPECT_THAT(r->response.envs(),
              UnorderedElementsAre(Pair("FABRIC_DEVICES_VPC_AMAZONAWS_COM_EFA", "rdmap79s0"),
                                   Pair("FI_PROVIDER", "efa")));
  // The default (no `env:`): what a grant always carried, nothing more.
  f.pool.env.clear();
  f.Rebuild();
  auto plain = AllocateContainer(*f.snap, Req({"rdmap79s0"}));
  ASSERT_OK(plain);
  EXPECT_EQ(plain->response.envs_size(), 1);
}

std::vector<RdmaDevice> TwoNumaEfa(int per_numa) {
  std::vector<RdmaDevice> out;
  for (int i = 0; i < 2 * per_numa; ++i) {
    out.push_back(Dev("efa" + std::to_string(i), DeviceKind::kEfa, i / per_numa, i));
  }
  return out;
}

std::vector<std::string> Ids(const PoolSnapshot& s) {
  std::vector<std::string> out;
  for (const auto& u : s.units) out.push_back(u.id);
  return out;
}

std::set<int> NumaOf(const PoolSnapshot& s, const std::vector<std::string>& ids) {
  std::set<int> out;
  for (const auto& id : ids) out.insert(s.FindUnit(id)->numa_node);
  return out;
}

TEST(PreferredTest, ExclusiveStaysOnOneNumaNodeWhenItFits) {
  Fixture f(PoolMode::kExclusive, TwoNumaEfa(4));
  // Node 0 has 1 free device left, node 1 has 4: a request for 3 goes to node 1.
  std::vector<std::string> avail = {"efa3", "efa4", "efa5", "efa6", "efa7"};
  auto got = PreferredAllocation(*f.snap, avail, {}, 3);
  EXPECT_THAT(got, ElementsAre("efa4", "efa5", "efa6"));
  // Best fit: a request for 1 takes the lone device on node 0 and keeps node 1 whole.
  EXPECT_THAT(PreferredAllocation(*f.snap, avail, {}, 1), ElementsAre("efa3"));
}

TEST(PreferredTest, MustIncludeComesFirstAndPullsItsNumaNode) {
  Fixture f(PoolMode::kExclusive, TwoNumaEfa(4));
  auto got = PreferredAllocation(*f.snap, Ids(*f.snap), {"efa5"}, 3);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], "efa5");
  EXPECT_EQ(NumaOf(*f.snap, got), std::set<int>{1});
}

TEST(PreferredTest, SpansTheFewestNumaNodes) {
  Fixture f(PoolMode::kExclusive, TwoNumaEfa(16));
  auto got = PreferredAllocation(*f.snap, Ids(*f.snap), {}, 16);
  EXPECT_EQ(NumaOf(*f.snap, got).size(), 1u);
  got = PreferredAllocation(*f.snap, Ids(*f.snap), {}, 20);
  EXPECT_EQ(got.size(), 20u);
  EXPECT_EQ(NumaOf(*f.snap, got).size(), 2u);
}

TEST(PreferredTest, IgnoresUnknownAndUnhealthyCandidates) {
  Fixture f(PoolMode::kExclusive, TwoNumaEfa(2));
  f.in.health["efa0"] = DeviceHealth{false, "port down"};
  f.Rebuild();
  auto got = PreferredAllocation(*f.snap, {"efa0", "bogus", "efa1", "efa2"}, {}, 2);
  EXPECT_THAT(got, UnorderedElementsAre("efa1", "efa2"));
}

TEST(PreferredTest, SharedSpreadsOverDistinctDevices) {
  Fixture f(PoolMode::kShared,
            {Dev("mlx5_0", DeviceKind::kRdma, 0, 0), Dev("mlx5_1", DeviceKind::kRdma, 0, 1),
             Dev("mlx5_2", DeviceKind::kRdma, 1, 2)},
            /*tokens=*/4);
  auto got = PreferredAllocation(*f.snap, Ids(*f.snap), {}, 3);
  std::set<std::string> devices;
  for (const auto& id : got) devices.insert(f.snap->FindUnit(id)->device);
  EXPECT_EQ(devices.size(), 3u);
  // must_include's device is not picked again while others are free.
  got = PreferredAllocation(*f.snap, Ids(*f.snap), {"mlx5_1.t2"}, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], "mlx5_1.t2");
  EXPECT_NE(f.snap->FindUnit(got[1])->device, "mlx5_1");
  // More tokens than devices: devices repeat only after each was used once.
  got = PreferredAllocation(*f.snap, Ids(*f.snap), {}, 5);
  std::map<std::string, int> uses;
  for (const auto& id : got) uses[f.snap->FindUnit(id)->device]++;
  EXPECT_EQ(uses.size(), 3u);
  for (auto& [d, n] : uses) EXPECT_LE(n, 2) << d;
}

TEST(DeviceListTest, TopologyOnlyWhenNumaIsKnown) {
  Fixture f(PoolMode::kExclusive,
            {Dev("a", DeviceKind::kEfa, -1, 0), Dev("b", DeviceKind::kEfa, 1, 1)});
  f.in.health["b"] = DeviceHealth{false, "x"};
  f.Rebuild();
  auto msg = MakeDeviceList(*f.snap);
  ASSERT_EQ(msg->devices_size(), 2);
  EXPECT_FALSE(msg->devices(0).has_topology());
  EXPECT_EQ(msg->devices(0).health(), "Healthy");
  ASSERT_TRUE(msg->devices(1).has_topology());
  EXPECT_EQ(msg->devices(1).topology().nodes(0).id(), 1);
  EXPECT_EQ(msg->devices(1).health(), "Unhealthy");
}

}  // namespace
}  // namespace fabric
