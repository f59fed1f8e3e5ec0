#include "agent/engine_env/engine_env.h"

#include <map>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fabric::engine_env {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;

GidEntry Gid(int index, const std::string& gid, GidType type) { return {index, gid, type, "eth0"}; }

const std::string kLinkLocal = "fe80:0000:0000:0000:5054:00ff:fe12:3456";
// ::ffff:10.0.2.<last> as the kernel prints it.
std::string V4(int last) {
  return absl::StrFormat("0000:0000:0000:0000:0000:ffff:0a00:02%02x", last);
}

RdmaDevice Roce(const std::string& name, std::vector<GidEntry> gids, int ports = 1) {
  RdmaDevice d;
  d.name = name;
  for (int p = 1; p <= ports; ++p) {
    PortInfo port;
    port.number = p;
    port.link_layer = "Ethernet";
    port.gids = gids;
    d.ports.push_back(port);
  }
  return d;
}

RdmaDevice Ib(const std::string& name) {
  RdmaDevice d;
  d.name = name;
  PortInfo port;
  port.number = 1;
  port.link_layer = "InfiniBand";
  port.gids = {{0, kLinkLocal, GidType::kIbRoceV1, ""}};
  d.ports.push_back(port);
  return d;
}

RdmaDevice Efa(const std::string& name) {
  RdmaDevice d = Ib(name);
  d.kind = DeviceKind::kEfa;
  d.ports[0].link_layer = "Unknown";
  return d;
}

std::map<std::string, std::string> Vars(const EngineEnv& e) {
  return std::map<std::string, std::string>(e.vars.begin(), e.vars.end());
}

const std::vector<EnvPreset> kAll = {EnvPreset::kMooncake, EnvPreset::kNccl,
                                     EnvPreset::kNcclGidIndex, EnvPreset::kUcx,
                                     EnvPreset::kLibfabric};

TEST(EngineEnvTest, NoPresetsNoVariables) {
  RdmaDevice rxe =
      Roce("rxe0", {Gid(0, kLinkLocal, GidType::kRoceV2), Gid(1, V4(15), GidType::kRoceV2)});
  EngineEnv e = ForGrant({}, {&rxe});
  EXPECT_THAT(e.vars, IsEmpty());
  EXPECT_THAT(e.notes, IsEmpty());
}

TEST(EngineEnvTest, RoceGrantGetsEveryVariableAndTheIpv4V2Index) {
  // mlx5-style table: v1 and v2 per address; the IPv4 v2 GID is index 3.
  RdmaDevice a =
      Roce("mlx5_0", {Gid(0, kLinkLocal, GidType::kIbRoceV1), Gid(1, kLinkLocal, GidType::kRoceV2),
                      Gid(2, V4(15), GidType::kIbRoceV1), Gid(3, V4(15), GidType::kRoceV2)});
  RdmaDevice b = a;
  b.name = "mlx5_1";
  EngineEnv e = ForGrant(kAll, {&a, &b});
  EXPECT_THAT(
      e.vars,
      ElementsAre(Pair("MOONCAKE_DEVICE", "mlx5_0,mlx5_1"), Pair("MC_MS_FILTERS", "mlx5_0,mlx5_1"),
                  Pair("MC_GID_INDEX", "3"), Pair("NCCL_IB_HCA", "=mlx5_0:1,mlx5_1:1"),
                  Pair("NCCL_IB_GID_INDEX", "3"), Pair("UCX_NET_DEVICES", "mlx5_0:1,mlx5_1:1")));
  EXPECT_THAT(e.notes, ElementsAre(HasSubstr("FI_PROVIDER not set")));
}

TEST(EngineEnvTest, DisagreeingDevicesGetNoGidIndexAndSayWhy) {
  RdmaDevice a =
      Roce("rxe0", {Gid(0, kLinkLocal, GidType::kRoceV2), Gid(1, V4(15), GidType::kRoceV2)});
  RdmaDevice b =
      Roce("rxe1", {Gid(0, kLinkLocal, GidType::kRoceV2), Gid(1, kLinkLocal, GidType::kRoceV2),
                    Gid(2, V4(16), GidType::kRoceV2)});
  EngineEnv e =
      ForGrant({EnvPreset::kMooncake, EnvPreset::kNccl, EnvPreset::kNcclGidIndex}, {&a, &b});
  auto vars = Vars(e);
  EXPECT_EQ(vars.count("MC_GID_INDEX"), 0u);
  EXPECT_EQ(vars.count("NCCL_IB_GID_INDEX"), 0u);
  EXPECT_EQ(vars["MOONCAKE_DEVICE"], "rxe0,rxe1");
  ASSERT_EQ(e.notes.size(), 2u);
  EXPECT_THAT(e.notes[0],
              HasSubstr("MC_GID_INDEX not set: rxe0 port 1: index 1, rxe1 port 1: index 2"));
  EXPECT_THAT(e.notes[0], HasSubstr("disagree"));
  // Each device alone has its own index.
  EXPECT_EQ(Vars(ForGrant({EnvPreset::kMooncake}, {&b}))["MC_GID_INDEX"], "2");
}

TEST(EngineEnvTest, APortWithoutIpv4V2GidBlocksTheIndex) {
  RdmaDevice a =
      Roce("rxe0", {Gid(0, kLinkLocal, GidType::kRoceV2), Gid(1, V4(15), GidType::kRoceV2)});
  RdmaDevice v6only = Roce("rxe1", {Gid(0, kLinkLocal, GidType::kRoceV2)});
  EngineEnv e = ForGrant({EnvPreset::kNcclGidIndex}, {&a, &v6only});
  EXPECT_EQ(Vars(e).count("NCCL_IB_GID_INDEX"), 0u);
  ASSERT_EQ(e.notes.size(), 1u);
  EXPECT_THAT(e.notes[0], HasSubstr("rxe1 port 1: no RoCE v2 GID with an IPv4 address"));
}

TEST(EngineEnvTest, DualPortDeviceListsBothPortsAndNeedsBothToAgree) {
  RdmaDevice d =
      Roce("mlx5_0", {Gid(0, kLinkLocal, GidType::kRoceV2), Gid(1, V4(15), GidType::kRoceV2)}, 2);
  EngineEnv e = ForGrant({EnvPreset::kNccl, EnvPreset::kNcclGidIndex, EnvPreset::kUcx}, {&d});
  auto vars = Vars(e);
  EXPECT_EQ(vars["NCCL_IB_HCA"], "=mlx5_0:1,mlx5_0:2");
  EXPECT_EQ(vars["UCX_NET_DEVICES"], "mlx5_0:1,mlx5_0:2");
  EXPECT_EQ(vars["NCCL_IB_GID_INDEX"], "1");
  d.ports[1].gids.pop_back();
  EXPECT_EQ(Vars(ForGrant({EnvPreset::kNcclGidIndex}, {&d})).count("NCCL_IB_GID_INDEX"), 0u);
}

TEST(EngineEnvTest, InfinibandGrantHasNoGidIndex) {
  RdmaDevice ib = Ib("mlx5_0");
  EngineEnv e = ForGrant(kAll, {&ib});
  auto vars = Vars(e);
  EXPECT_EQ(vars["NCCL_IB_HCA"], "=mlx5_0:1");
  EXPECT_EQ(vars["MOONCAKE_DEVICE"], "mlx5_0");
  EXPECT_EQ(vars.count("MC_GID_INDEX"), 0u);
  EXPECT_THAT(e.notes, Contains(HasSubstr("InfiniBand port")));
}

TEST(EngineEnvTest, EfaGrant) {
  RdmaDevice a = Efa("rdmap79s0"), b = Efa("rdmap80s0");
  EngineEnv e = ForGrant(kAll, {&a, &b});
  EXPECT_THAT(e.vars, ElementsAre(Pair("MOONCAKE_DEVICE", "rdmap79s0,rdmap80s0"),
                                  Pair("MC_MS_FILTERS", "rdmap79s0,rdmap80s0"),
                                  Pair("UCX_NET_DEVICES", "rdmap79s0:1,rdmap80s0:1"),
                                  Pair("FI_PROVIDER", "efa")));
  EXPECT_THAT(e.notes, Contains(HasSubstr("NCCL_IB_HCA not set: EFA grant")));
  EXPECT_THAT(e.notes, Contains(HasSubstr("MC_GID_INDEX not set: rdmap79s0 port 1: EFA")));
  // libfabric alone on an EFA grant: exactly FI_PROVIDER.
  EXPECT_THAT(ForGrant({EnvPreset::kLibfabric}, {&a}).vars,
              ElementsAre(Pair("FI_PROVIDER", "efa")));
}

// Issue 32, item 11: the index is the port's own netdev's (the device's
// netdevs: its PCI function's net/*, rxe's parent), not a VLAN's below it;
// a bonded port's addresses are on the bond, an upper device: no index.
TEST(EngineEnvTest, TheGidIndexIsThePortsOwnNetdevs) {
  RdmaDevice vlan = Roce("mlx5_0", {{0, kLinkLocal, GidType::kRoceV2, "eth0"},
                                    {2, V4(100), GidType::kRoceV2, "eth0.100"},
                                    {3, V4(15), GidType::kRoceV2, "eth0"}});
  vlan.netdevs = {"eth0"};
  EXPECT_EQ(Vars(ForGrant({EnvPreset::kMooncake}, {&vlan}))["MC_GID_INDEX"], "3");
  // A bond slave: the kernel gives the default GID and the addresses to bond0.
  RdmaDevice bonded = Roce("mlx5_1", {{0, kLinkLocal, GidType::kRoceV2, "bond0"},
                                      {1, V4(15), GidType::kRoceV2, "bond0"}});
  bonded.netdevs = {"ens1f1np1"};
  EngineEnv e = ForGrant({EnvPreset::kMooncake}, {&bonded});
  EXPECT_EQ(Vars(e).count("MC_GID_INDEX"), 0u);
  EXPECT_THAT(e.notes, ElementsAre(AllOf(HasSubstr("no RoCE v2 IPv4 GID on ens1f1np1"),
                                         HasSubstr("index 1 (10.0.2.15 on bond0)"))));
}

// Issue 32, item 14: NCCL_IB_HCA leaves the EFA device out (NCCL reaches EFA
// through aws-ofi-nccl, which ignores the GID index), so the EFA port's
// missing RoCE GID must not cost the RoCE port its NCCL_IB_GID_INDEX.
TEST(EngineEnvTest, MixedEfaAndRoceGrantKeepsTheRocePortsNcclGidIndex) {
  RdmaDevice efa = Efa("rdmap79s0");
  RdmaDevice roce =
      Roce("mlx5_0", {Gid(0, kLinkLocal, GidType::kRoceV2), Gid(1, V4(15), GidType::kRoceV2)});
  EngineEnv e = ForGrant({EnvPreset::kNccl, EnvPreset::kNcclGidIndex}, {&efa, &roce});
  auto vars = Vars(e);
  EXPECT_EQ(vars["NCCL_IB_HCA"], "=mlx5_0:1");
  EXPECT_EQ(vars["NCCL_IB_GID_INDEX"], "1") << ::testing::PrintToString(e.notes);
  // Mooncake opens every device it is given, the EFA one too: one index for
  // all of them cannot be given, so it selects per device itself.
  EngineEnv m = ForGrant({EnvPreset::kMooncake}, {&efa, &roce});
  EXPECT_EQ(Vars(m).count("MC_GID_INDEX"), 0u);
  EXPECT_THAT(m.notes, ElementsAre(HasSubstr("rdmap79s0 port 1: EFA")));
}

// Issue 32, item 13: since NCCL 2.21 (NCCL_IB_GID_INDEX=-1 by default) NCCL
// picks the RoCE v2 IPv4 GID itself, when it starts, from the live table
// (NCCL_IB_ROCE_VERSION_NUM, NCCL_IB_ADDR_FAMILY, NCCL_IB_ADDR_RANGE); a set
// index turns that off and is fixed at Allocate. `nccl` leaves it to NCCL,
// `nccl-gid-index` sets it (NCCL before 2.21 used index 0).
TEST(EngineEnvTest, NcclLeavesTheGidIndexToNcclUnlessAsked) {
  RdmaDevice a =
      Roce("mlx5_0", {Gid(0, kLinkLocal, GidType::kIbRoceV1), Gid(1, kLinkLocal, GidType::kRoceV2),
                      Gid(2, V4(15), GidType::kIbRoceV1), Gid(3, V4(15), GidType::kRoceV2)});
  EngineEnv e = ForGrant({EnvPreset::kNccl}, {&a});
  EXPECT_THAT(e.vars, ElementsAre(Pair("NCCL_IB_HCA", "=mlx5_0:1")));
  EXPECT_THAT(e.notes, IsEmpty());
  EXPECT_THAT(ForGrant({EnvPreset::kNccl, EnvPreset::kNcclGidIndex}, {&a}).vars,
              ElementsAre(Pair("NCCL_IB_HCA", "=mlx5_0:1"), Pair("NCCL_IB_GID_INDEX", "3")));
  EXPECT_THAT(ForGrant({EnvPreset::kNcclGidIndex}, {&a}).vars,
              ElementsAre(Pair("NCCL_IB_GID_INDEX", "3")));
}

// What each port's GID index variables named, for the ledger (item 12).
TEST(EngineEnvTest, TheGivenGidsArePerPortWithTheirVariables) {
  RdmaDevice a =
      Roce("rxe0", {Gid(0, kLinkLocal, GidType::kRoceV2), Gid(1, V4(15), GidType::kRoceV2)});
  RdmaDevice efa = Efa("rdmap79s0");
  EngineEnv e = ForGrant({EnvPreset::kMooncake, EnvPreset::kNcclGidIndex}, {&a});
  ASSERT_EQ(e.given.size(), 1u);
  EXPECT_EQ(e.given[0].device, "rxe0");
  EXPECT_EQ(e.given[0].port, 1);
  EXPECT_EQ(e.given[0].index, 1);
  EXPECT_EQ(e.given[0].gid, V4(15));
  EXPECT_EQ(e.given[0].ipv4, "10.0.2.15");
  EXPECT_EQ(e.given[0].netdev, "eth0");
  EXPECT_THAT(e.given[0].variables, ElementsAre("MC_GID_INDEX", "NCCL_IB_GID_INDEX"));
  // No index set: nothing was given.
  EXPECT_THAT(ForGrant({EnvPreset::kMooncake}, {&a, &efa}).given, IsEmpty());
  EXPECT_THAT(ForGrant({EnvPreset::kUcx}, {&a}).given, IsEmpty());
}

TEST(EngineEnvTest, UnreadableGidTableIsTheReason) {
  RdmaDevice a = Roce("rxe0", {});
  a.ports[0].gid_error = "gids/1: expected a GID as eight 4-digit hex groups";
  EngineEnv e = ForGrant({EnvPreset::kMooncake}, {&a});
  EXPECT_THAT(e.notes, ElementsAre(HasSubstr("GID table not readable")));
}

}  // namespace
}  // namespace fabric::engine_env
