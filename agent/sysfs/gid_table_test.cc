#include "agent/sysfs/gid_table.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/fake_sysfs.h"
#include "test/testing/status_matchers.h"

namespace fabric::gid {
namespace {

using ::testing::ElementsAre;
using testing::FakeSysfs;
using ::testing::HasSubstr;

constexpr char kLinkLocal[] = "fe80:0000:0000:0000:5054:00ff:fe12:3456";
constexpr char kIpv6Global[] = "fd00:0000:0000:0000:5054:00ff:fe12:3456";

std::vector<int> Indexes(const std::vector<GidEntry>& entries) {
  std::vector<int> out;
  for (const GidEntry& e : entries) out.push_back(e.index);
  return out;
}

PortInfo RocePort(std::vector<GidEntry> gids) {
  PortInfo p;
  p.number = 1;
  p.link_layer = "Ethernet";
  p.gids = std::move(gids);
  return p;
}

TEST(GidTextTest, ParsesTheKernelFormatOnly) {
  auto g = ParseGid("0000:0000:0000:0000:0000:ffff:0a00:020f");
  ASSERT_OK(g);
  EXPECT_TRUE(IsIpv4Mapped(*g));
  EXPECT_EQ(Ipv4Text(*g), "10.0.2.15");
  EXPECT_FALSE(IsZero(*g));
  auto upper = ParseGid("FE80:0000:0000:0000:5054:00FF:FE12:3456");
  ASSERT_OK(upper);
  EXPECT_FALSE(IsIpv4Mapped(*upper));
  EXPECT_EQ(Ipv4Text(*upper), "");
  auto zero = ParseGid("0000:0000:0000:0000:0000:0000:0000:0000");
  ASSERT_OK(zero);
  EXPECT_TRUE(IsZero(*zero));
  // The compressed form is never what sysfs prints: a fake tree writing it is wrong.
  EXPECT_THAT(ParseGid("::ffff:10.0.2.15"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseGid("fe80:0:0:0:5054:ff:fe12:3456"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseGid("fe80:0000:0000:0000:5054:00ff:fe12:345g"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseGid("fe80-0000:0000:0000:5054:00ff:fe12:3456"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // Not IPv4-mapped: ::ffff:0:0/96 needs ffff in bytes 10-11 and zeros before.
  auto v4compat = ParseGid("0000:0000:0000:0000:0001:ffff:0a00:020f");
  ASSERT_OK(v4compat);
  EXPECT_FALSE(IsIpv4Mapped(*v4compat));
}

TEST(GidTextTest, Types) {
  EXPECT_EQ(ParseGidType("RoCE v2"), GidType::kRoceV2);
  EXPECT_EQ(ParseGidType("IB/RoCE v1\n"), GidType::kIbRoceV1);
  EXPECT_EQ(ParseGidType("RoCE v3"), GidType::kOther);
  EXPECT_EQ(GidTypeName(GidType::kRoceV2), "RoCE v2");
}

// rxe installs RoCE v2 entries only: the link-local one, then each address.
TEST(GidTableTest, RxeFullLengthTable) {
  FakeSysfs fs;
  fs.AddRxe("rxe0", "eth0");
  fs.SetGidTableLength("rxe0", 1, 1024);
  const SysfsLayout layout(fs.paths());
  auto t = ReadGidTable(layout, "rxe0", 1);
  ASSERT_OK(t);
  EXPECT_THAT(Indexes(*t), ElementsAre(0, 1));
  EXPECT_EQ((*t)[1].gid, "0000:0000:0000:0000:0000:ffff:0a00:020f");
  EXPECT_EQ((*t)[1].type, GidType::kRoceV2);
  EXPECT_EQ((*t)[1].netdev, "eth0");
  PortInfo port = RocePort(*t);
  RoceV2Ipv4 c = FindRoceV2Ipv4(port, false);
  ASSERT_TRUE(c.index.has_value());
  EXPECT_EQ(*c.index, 1);
  EXPECT_EQ(c.ipv4, "10.0.2.15");
  EXPECT_EQ(c.netdev, "eth0");
  EXPECT_EQ(c.candidates, 1);
}

// mlx5 RoCE: each address as v1 and v2, so the first IPv4 v2 GID is the
// "index 3" operators hand-write; an IPv6 address after it changes nothing.
TEST(GidTableTest, Mlx5RoceV1AndV2Ipv4AndIpv6) {
  FakeSysfs fs;
  fs.AddMlx5("mlx5_0", "0000:3b:00.0", {.link_layer = "Ethernet", .netdev = "ens1f0np0"});
  fs.SetGidTableLength("mlx5_0", 1, 256);
  const std::string v4 = FakeSysfs::Ipv4Gid("192.168.100.1");
  fs.SetGid("mlx5_0", 1, 2, v4, "IB/RoCE v1", "ens1f0np0");
  fs.SetGid("mlx5_0", 1, 3, v4, "RoCE v2", "ens1f0np0");
  fs.SetGid("mlx5_0", 1, 4, kIpv6Global, "IB/RoCE v1", "ens1f0np0");
  fs.SetGid("mlx5_0", 1, 5, kIpv6Global, "RoCE v2", "ens1f0np0");
  auto t = ReadGidTable(SysfsLayout(fs.paths()), "mlx5_0", 1);
  ASSERT_OK(t);
  EXPECT_THAT(Indexes(*t), ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_EQ((*t)[2].type, GidType::kIbRoceV1);
  RoceV2Ipv4 c = FindRoceV2Ipv4(RocePort(*t), false);
  ASSERT_TRUE(c.index.has_value());
  EXPECT_EQ(*c.index, 3);
  EXPECT_EQ(c.ipv4, "192.168.100.1");
}

// An address removed leaves a hole; the next one added fills the lowest free
// slot; the choice follows.
TEST(GidTableTest, HolesAndAChangingTable) {
  FakeSysfs fs;
  fs.AddMlx5("mlx5_0", "0000:3b:00.0", {.link_layer = "Ethernet", .netdev = "ens1f0np0"});
  fs.SetGidTableLength("mlx5_0", 1, 256);
  const SysfsLayout layout(fs.paths());
  const std::string a = FakeSysfs::Ipv4Gid("10.1.0.5"), b = FakeSysfs::Ipv4Gid("10.2.0.5");
  fs.SetGid("mlx5_0", 1, 2, a, "IB/RoCE v1", "ens1f0np0");
  fs.SetGid("mlx5_0", 1, 3, a, "RoCE v2", "ens1f0np0");
  fs.SetGid("mlx5_0", 1, 4, b, "IB/RoCE v1", "ens1f0np0");
  fs.SetGid("mlx5_0", 1, 5, b, "RoCE v2", "ens1f0np0");
  auto before = ReadGidTable(layout, "mlx5_0", 1);
  ASSERT_OK(before);
  // Two addresses on the port's own netdev: which one the peers reach cannot
  // be told (a secondary address, a VIP), so none is chosen, and why is said.
  RoceV2Ipv4 two = FindRoceV2Ipv4(RocePort(*before), false, {"ens1f0np0"});
  EXPECT_FALSE(two.index.has_value());
  EXPECT_EQ(two.candidates, 2);
  EXPECT_THAT(two.reason, HasSubstr("ens1f0np0 has 2 RoCE v2 IPv4 GIDs (index 3 (10.1.0.5), "
                                    "index 5 (10.2.0.5))"));

  fs.ClearGid("mlx5_0", 1, 2);  // 10.1.0.5 removed
  fs.ClearGid("mlx5_0", 1, 3);
  auto holed = ReadGidTable(layout, "mlx5_0", 1);
  ASSERT_OK(holed);
  EXPECT_THAT(Indexes(*holed), ElementsAre(0, 1, 4, 5));
  RoceV2Ipv4 c = FindRoceV2Ipv4(RocePort(*holed), false);
  EXPECT_EQ(*c.index, 5);
  EXPECT_EQ(c.ipv4, "10.2.0.5");

  // A bounded scan sees the next address in the lowest free slot.
  const int limit = ScanLimit(*holed);
  EXPECT_EQ(limit, 7);
  fs.SetGid("mlx5_0", 1, 2, FakeSysfs::Ipv4Gid("10.3.0.5"), "IB/RoCE v1", "ens1f0np0");
  fs.SetGid("mlx5_0", 1, 3, FakeSysfs::Ipv4Gid("10.3.0.5"), "RoCE v2", "ens1f0np0");
  auto quick = ReadGidTable(layout, "mlx5_0", 1, GidScan{limit});
  ASSERT_OK(quick);
  EXPECT_THAT(Indexes(*quick), ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_EQ(FindRoceV2Ipv4(RocePort(*quick), false).candidates, 2);
  EXPECT_EQ((*quick)[3].gid, FakeSysfs::Ipv4Gid("10.3.0.5"));
  // Slots at or past the limit are not read.
  fs.SetGid("mlx5_0", 1, 200, FakeSysfs::Ipv4Gid("10.9.0.5"), "RoCE v2", "ens1f0np0");
  auto bounded = ReadGidTable(layout, "mlx5_0", 1, GidScan{limit});
  ASSERT_OK(bounded);
  EXPECT_EQ(bounded->size(), 6u);
  auto full = ReadGidTable(layout, "mlx5_0", 1);
  ASSERT_OK(full);
  EXPECT_EQ(full->back().index, 200);
}

// Issue 32, item 11: the kernel adds the addresses of a RoCE netdev's upper
// devices (VLANs, macvlans, bond masters) to its port's table. A VLAN's
// address at a lower index than the port's own must not be chosen.
TEST(GidTableTest, AVlanAddressBelowThePortsOwnIsNotChosen) {
  FakeSysfs fs;
  fs.AddRxe("rxe0", "eth0");
  fs.SetGidTableLength("rxe0", 1, 1024);
  fs.ClearGid("rxe0", 1, 1);
  fs.SetGid("rxe0", 1, 2, FakeSysfs::Ipv4Gid("10.0.100.5"), "RoCE v2", "eth0.100");
  fs.SetGid("rxe0", 1, 3, FakeSysfs::Ipv4Gid("10.0.2.15"), "RoCE v2", "eth0");
  auto t = ReadGidTable(SysfsLayout(fs.paths()), "rxe0", 1);
  ASSERT_OK(t);
  EXPECT_THAT(Indexes(*t), ElementsAre(0, 2, 3));
  EXPECT_EQ((*t)[1].netdev, "eth0.100");
  // The port's own netdev from the default GID (index 0), as fabricctl has it.
  RoceV2Ipv4 c = FindRoceV2Ipv4(RocePort(*t), false);
  ASSERT_TRUE(c.index.has_value()) << c.reason;
  EXPECT_EQ(*c.index, 3);
  EXPECT_EQ(c.ipv4, "10.0.2.15");
  EXPECT_EQ(c.netdev, "eth0");
  EXPECT_EQ(c.candidates, 1);
}

// The port's own netdev is the device's (the PCI function's net/*, rxe's
// parent) when discovery has it. Only an upper device's addresses: no index,
// and the reason names them. A macvlan's address, even alone, is not chosen.
TEST(GidTableTest, OnlyUpperDevicesAddressesGiveNoIndex) {
  std::vector<GidEntry> t = {
      {0, kLinkLocal, GidType::kIbRoceV1, "ens1f0np0"},
      {1, kLinkLocal, GidType::kRoceV2, "ens1f0np0"},
      {2, "0000:0000:0000:0000:0000:ffff:0a00:6405", GidType::kIbRoceV1, "ens1f0np0.100"},
      {3, "0000:0000:0000:0000:0000:ffff:0a00:6405", GidType::kRoceV2, "ens1f0np0.100"},
      {4, "0000:0000:0000:0000:0000:ffff:0a00:0709", GidType::kRoceV2, "mvl-pod1"}};
  RoceV2Ipv4 c = FindRoceV2Ipv4(RocePort(t), false, {"ens1f0np0"});
  EXPECT_FALSE(c.index.has_value());
  EXPECT_EQ(c.candidates, 0);
  EXPECT_EQ(c.on_upper, 2);
  EXPECT_THAT(c.reason,
              HasSubstr("no RoCE v2 IPv4 GID on ens1f0np0; only on devices on top of it"));
  EXPECT_THAT(c.reason, HasSubstr("index 3 (10.0.100.5 on ens1f0np0.100)"));
  EXPECT_THAT(c.reason, HasSubstr("index 4 (10.0.7.9 on mvl-pod1)"));
  // The port's own address added: that one, whatever sits below it.
  t.push_back({5, "0000:0000:0000:0000:0000:ffff:0a00:020f", GidType::kRoceV2, "ens1f0np0"});
  c = FindRoceV2Ipv4(RocePort(t), false, {"ens1f0np0"});
  ASSERT_TRUE(c.index.has_value());
  EXPECT_EQ(*c.index, 5);
  EXPECT_EQ(c.netdev, "ens1f0np0");
  EXPECT_EQ(c.candidates, 1);
  EXPECT_EQ(c.on_upper, 2);
}

TEST(GidTableTest, IpvSixOnlyOrVersionOneOnlyHasNoIndex) {
  std::vector<GidEntry> v6 = {{0, kLinkLocal, GidType::kRoceV2, "eth0"},
                              {1, kIpv6Global, GidType::kRoceV2, "eth0"}};
  RoceV2Ipv4 c = FindRoceV2Ipv4(RocePort(v6), false);
  EXPECT_FALSE(c.index.has_value());
  EXPECT_THAT(c.reason, HasSubstr("no RoCE v2 GID with an IPv4 address"));
  std::vector<GidEntry> v1 = {
      {0, kLinkLocal, GidType::kIbRoceV1, "eth0"},
      {1, "0000:0000:0000:0000:0000:ffff:0a00:020f", GidType::kIbRoceV1, "eth0"}};
  c = FindRoceV2Ipv4(RocePort(v1), false);
  EXPECT_FALSE(c.index.has_value());
  EXPECT_THAT(c.reason, HasSubstr("no RoCE v2 GID in the table"));
}

TEST(GidTableTest, InfinibandAndEfaHaveNoRoceGid) {
  FakeSysfs fs;
  fs.AddMlx5("mlx5_0", "0000:3b:00.0", {});
  fs.AddEfa("rdmap79s0", "0000:4f:00.0");
  const SysfsLayout layout(fs.paths());
  auto ib = ReadGidTable(layout, "mlx5_0", 1);
  ASSERT_OK(ib);
  ASSERT_EQ(ib->size(), 1u);
  EXPECT_EQ((*ib)[0].type, GidType::kIbRoceV1);
  EXPECT_EQ((*ib)[0].netdev, "");  // the kernel's EINVAL
  PortInfo port;
  port.link_layer = "InfiniBand";
  port.gids = *ib;
  EXPECT_THAT(FindRoceV2Ipv4(port, false).reason, HasSubstr("InfiniBand port"));
  auto efa = ReadGidTable(layout, "rdmap79s0", 1);
  ASSERT_OK(efa);
  port.link_layer = "Unknown";
  port.gids = *efa;
  EXPECT_THAT(FindRoceV2Ipv4(port, true).reason, HasSubstr("EFA"));
}

TEST(GidTableTest, GarbageIsAnErrorNamingTheFile) {
  FakeSysfs fs;
  fs.AddRxe("rxe0", "eth0");
  fs.WriteFile("sys/devices/virtual/infiniband/rxe0/ports/1/gids/1", "::ffff:10.0.2.15\n");
  auto t = ReadGidTable(SysfsLayout(fs.paths()), "rxe0", 1);
  EXPECT_THAT(t, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("gids/1"));
  EXPECT_THAT(ReadGidTable(SysfsLayout(fs.paths()), "rxe0", 2),
              StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace fabric::gid
