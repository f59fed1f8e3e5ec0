#include "agent/sysfs/sysfs_discovery.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include "absl/strings/str_format.h"
#include "agent/base/file_util.h"
#include "agent/base/utf8.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/fake_sysfs.h"
#include "test/testing/status_matchers.h"
#include "test/testing/test_dirs.h"

namespace fabric {
namespace {

using ::testing::ElementsAre;
using testing::FakeSysfs;
using ::testing::HasSubstr;
using ::testing::SizeIs;

TEST(DiscoveryTest, EmptyNodeIsNotAnError) {
  FakeSysfs fs;
  auto inv = DiscoverNode(fs.paths());
  ASSERT_OK(inv);
  EXPECT_TRUE(inv->devices.empty());
  EXPECT_FALSE(inv->rdma_cm.has_value());
}

TEST(DiscoveryTest, EfaDeviceFullyDescribed) {
  FakeSysfs fs;
  fs.AddEfa("rdmap79s0", "0000:4f:00.0", {.numa_node = 0});
  fs.AddRdmaCm(123);
  auto inv = DiscoverNode(fs.paths());
  ASSERT_OK(inv);
  ASSERT_THAT(inv->devices, SizeIs(1));
  const RdmaDevice& d = inv->devices[0];
  EXPECT_EQ(d.name, "rdmap79s0");
  EXPECT_EQ(d.kind, DeviceKind::kEfa);
  ASSERT_TRUE(d.pci.has_value());
  EXPECT_EQ(d.pci->address, "0000:4f:00.0");
  EXPECT_EQ(d.pci->vendor, 0x1d0fu);
  EXPECT_EQ(d.pci->device, 0xefa1u);
  EXPECT_EQ(d.pci->driver, "efa");
  EXPECT_EQ(d.pci->pcie_root, "pci0000:4f");
  EXPECT_EQ(d.numa_node(), 0);
  EXPECT_EQ(d.uverbs, (CharDevice{"infiniband/uverbs0", 231, 192}));
  ASSERT_THAT(d.ports, SizeIs(1));
  EXPECT_TRUE(d.ports[0].active());
  EXPECT_EQ(d.ports[0].link_layer, "Unknown");
  EXPECT_EQ(d.ports[0].netdev, "");
  ASSERT_TRUE(inv->rdma_cm.has_value());
  EXPECT_EQ(*inv->rdma_cm, (CharDevice{"infiniband/rdma_cm", 10, 123}));
  EXPECT_TRUE(inv->warnings.empty());
}

// Moves a PCI function's directory deeper into sys/devices and leaves a
// symlink where it was, so every link into it resolves to the new place.
void MovePciFunction(const FakeSysfs& fs, const std::string& from_rel, const std::string& to_rel) {
  const std::filesystem::path from = fs.root() + "/" + from_rel, to = fs.root() + "/" + to_rel;
  std::filesystem::create_directories(to.parent_path());
  std::filesystem::rename(from, to);
  std::filesystem::create_symlink(to, from);
}

TEST(DiscoveryTest, PcieRootIsTheFirstComponentBelowSysDevices) {
  FakeSysfs fs;
  fs.AddEfa("rdmap79s0", "0000:4f:00.0");  // behind a bridge
  fs.AddEfa("rdmap80s0", "0000:50:00.0");  // behind a VMD domain (its own pci10000:e0)
  fs.AddEfa("rdmap81s0", "0000:51:00.0");  // under a Hyper-V VMBus: no PCIe root
  MovePciFunction(fs, "sys/devices/pci0000:4f/0000:4f:00.0",
                  "sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0/0000:4f:00.0");
  MovePciFunction(fs, "sys/devices/pci0000:50/0000:50:00.0",
                  "sys/devices/pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:06.0/0000:50:00.0");
  MovePciFunction(fs, "sys/devices/pci0000:51/0000:51:00.0",
                  "sys/devices/LNXSYSTM:00/VMBUS:00/abc/pci0001:00/0000:51:00.0");
  auto inv = DiscoverNode(fs.paths());
  ASSERT_OK(inv);
  ASSERT_THAT(inv->devices, SizeIs(3));
  EXPECT_EQ(inv->Find("rdmap79s0")->pci->pcie_root, "pci0000:40");
  EXPECT_EQ(inv->Find("rdmap80s0")->pci->pcie_root, "pci0000:00");
  EXPECT_EQ(inv->Find("rdmap81s0")->pci->pcie_root, "");
  EXPECT_EQ(inv->Find("rdmap81s0")->pci->address, "0000:51:00.0");
}

TEST(DiscoveryTest, EfaRecognisedByPciIdentityNotName) {
  FakeSysfs fs;
  fs.AddEfa("rdmap16s27", "0000:10:1b.0", {.device_id = 0xefa2});
  // An mlx5 IB device named like an EFA one, and an EFA named like mlx5.
  fs.AddMlx5("rdmap115s0", "0000:73:00.0", {});
  fs.AddEfa("mlx5_9", "0000:20:00.0", {.device_id = 0xefa4});
  auto inv = DiscoverNode(fs.paths());
  ASSERT_OK(inv);
  std::map<std::string, DeviceKind> kinds;
  for (const auto& d : inv->devices) kinds[d.name] = d.kind;
  EXPECT_EQ(kinds["rdmap16s27"], DeviceKind::kEfa);
  EXPECT_EQ(kinds["rdmap115s0"], DeviceKind::kRdma);
  EXPECT_EQ(kinds["mlx5_9"], DeviceKind::kEfa);
}

TEST(DiscoveryTest, Uverbs32AndUpHaveTheirOwnMajorReadFromDev) {
  FakeSysfs fs;
  for (int i = 0; i < 34; ++i) {
    char bdf[32];
    std::snprintf(bdf, sizeof(bdf), "0000:%02x:00.0", 0x40 + i);
    fs.AddEfa("efa_" + std::to_string(i), bdf, {});
  }
  auto inv = DiscoverNode(fs.paths());
  ASSERT_OK(inv);
  ASSERT_THAT(inv->devices, SizeIs(34));
  const RdmaDevice* d33 = inv->Find("efa_33");
  ASSERT_NE(d33, nullptr);
  auto dev = ReadDevNumbers(fs.sys_root() + "/class/infiniband_verbs/uverbs33/dev");
  ASSERT_OK(dev);
  EXPECT_NE(dev->first, 231u);
  EXPECT_EQ(d33->uverbs.major, dev->first);
  EXPECT_EQ(d33->uverbs.minor, dev->second);
  EXPECT_EQ(d33->uverbs.rel_path, "infiniband/uverbs33");
  // Natural order: efa_2 before efa_10.
  EXPECT_EQ(inv->devices[2].name, "efa_2");
}

TEST(DiscoveryTest, RxeHasNoPciParent) {
  FakeSysfs fs;
  fs.AddRxe("rxe0", "eth0");
  auto inv = DiscoverNode(fs.paths());
  ASSERT_OK(inv);
  ASSERT_THAT(inv->devices, SizeIs(1));
  const RdmaDevice& d = inv->devices[0];
  EXPECT_EQ(d.kind, DeviceKind::kRdma);
  EXPECT_FALSE(d.pci.has_value());
  EXPECT_EQ(d.numa_node(), -1);
  EXPECT_EQ(d.LinkLayer(), "Ethernet");
  EXPECT_EQ(d.PrimaryNetdev(), "eth0");
  EXPECT_THAT(d.netdevs, ElementsAre("eth0"));
}

TEST(DiscoveryTest, SriovRolesAndRoceNetdevs) {
  FakeSysfs fs;
  fs.AddMlx5("mlx5_0", "0000:3b:00.0",
             {.numa_node = 1,
              .device_id = 0x101d,
              .link_layer = "Ethernet",
              .netdev = "ens1f0np0",
              .sriov_numvfs = 2,
              .sriov_totalvfs = 8});
  fs.AddMlx5("mlx5_2", "0000:3b:00.2",
             {.numa_node = 1,
              .device_id = 0x101e,
              .link_layer = "Ethernet",
              .netdev = "ens1f0v0",
              .physfn = "0000:3b:00.0"});
  auto inv = DiscoverNode(fs.paths());
  ASSERT_OK(inv);
  const RdmaDevice* pf = inv->Find("mlx5_0");
  const RdmaDevice* vf = inv->Find("mlx5_2");
  ASSERT_TRUE(pf && vf);
  EXPECT_EQ(pf->pci->sriov_numvfs, 2);
  EXPECT_FALSE(pf->pci->is_vf());
  EXPECT_EQ(vf->pci->physfn, "0000:3b:00.0");
  EXPECT_EQ(pf->PrimaryNetdev(), "ens1f0np0");
  EXPECT_EQ(pf->numa_node(), 1);
}

TEST(DiscoveryTest, MalformedFilesSkipOnlyThatDeviceWithOneWarning) {
  FakeSysfs fs;
  fs.AddEfa("rdmap79s0", "0000:4f:00.0", {});
  fs.AddEfa("rdmap80s0", "0000:50:00.0", {});
  fs.AddEfa("rdmap81s0", "0000:51:00.0", {});
  fs.AddEfa("rdmap82s0", "0000:52:00.0", {});
  fs.AddEfa("rdmap83s0", "0000:53:00.0", {});
  // 1: malformed dev numbers; 2: no verbs node; 3: garbage port state; 4: bad numa_node.
  fs.WriteFile("sys/class/infiniband_verbs/uverbs1/dev", "garbage\n");
  fs.Remove("sys/class/infiniband_verbs/uverbs2");
  fs.WriteFile(fs.IbDevicePath("rdmap82s0").substr(fs.root().size() + 1) + "/ports/1/state",
               "ACTIVE\n");
  auto numa = RealPath(fs.sys_root() + "/class/infiniband/rdmap83s0/device");
  ASSERT_OK(numa);
  fs.WriteFile(numa->substr(fs.root().size() + 1) + "/numa_node", "zero\n");

  auto inv = DiscoverNode(fs.paths());
  ASSERT_OK(inv);
  ASSERT_THAT(inv->devices, SizeIs(1));
  EXPECT_EQ(inv->devices[0].name, "rdmap79s0");
  // Each problem is reported once and names the file at fault.
  std::string all;
  for (const auto& w : inv->warnings) all += w + "\n";
  EXPECT_THAT(all, HasSubstr("uverbs1/dev"));
  EXPECT_THAT(all, HasSubstr("skipping RDMA device rdmap80s0: no verbs node"));
  EXPECT_THAT(all, HasSubstr("ports/1/state"));
  EXPECT_THAT(all, HasSubstr("numa_node"));
  EXPECT_THAT(inv->warnings, SizeIs(5));  // uverbs1 ignored + 4 skipped devices
  // The inventory looks again at what it skipped (the file may heal).
  EXPECT_THAT(inv->skipped, ElementsAre("rdmap80s0", "rdmap81s0", "rdmap82s0", "rdmap83s0"));
}

// numa_node and sriov_numvfs are ints: a number outside int (or a negative
// VF count) is as malformed as a word, not wrapped into a plausible value
// (2147483648 read as NUMA node -2147483648, 4294967296 as node 0, -3 VFs).
// Found by test/fuzz/sysfs_fuzzer.
TEST(DiscoveryTest, OutOfRangeNumbersAreMalformed) {
  FakeSysfs fs;
  const std::map<std::string, std::pair<std::string, std::string>> cases = {
      {"rdmap79s0", {"numa_node", "2147483648\n"}},
      {"rdmap80s0", {"numa_node", "4294967296\n"}},
      {"rdmap81s0", {"sriov_numvfs", "-3\n"}},
      {"rdmap82s0", {"sriov_numvfs", "4294967298\n"}},
  };
  int bus = 0x4f;
  for (const auto& [name, file] : cases) {
    fs.AddEfa(name, absl::StrFormat("0000:%02x:00.0", bus++), {});
    auto pci = RealPath(fs.sys_root() + "/class/infiniband/" + name + "/device");
    ASSERT_OK(pci);
    fs.WriteFile(pci->substr(fs.root().size() + 1) + "/" + file.first, file.second);
  }
  fs.AddEfa("rdmap83s0", "0000:60:00.0", {.numa_node = 1});
  auto inv = DiscoverNode(fs.paths());
  ASSERT_OK(inv);
  ASSERT_THAT(inv->devices, SizeIs(1));
  EXPECT_EQ(inv->devices[0].name, "rdmap83s0");
  EXPECT_EQ(inv->devices[0].numa_node(), 1);
  EXPECT_THAT(inv->skipped, ElementsAre("rdmap79s0", "rdmap80s0", "rdmap81s0", "rdmap82s0"));
  std::string all;
  for (const auto& w : inv->warnings) all += w + "\n";
  EXPECT_THAT(all, HasSubstr("numa_node: out of range: '2147483648'"));
  EXPECT_THAT(all, HasSubstr("sriov_numvfs: out of range: '-3'"));
}

// A garbage file is quoted in the warning (and so the log) only in part, and
// escaped: 64 KiB of it, newlines included, make one short line.
TEST(DiscoveryTest, GarbageIsQuotedShortAndOnOneLine) {
  FakeSysfs fs;
  fs.AddEfa("rdmap79s0", "0000:4f:00.0", {});
  fs.WriteFile(fs.IbDevicePath("rdmap79s0").substr(fs.root().size() + 1) + "/ports/1/state",
               "ACTIVE\n" + std::string(64 * 1024, 'x') + "\n");
  auto inv = DiscoverNode(fs.paths());
  ASSERT_OK(inv);
  ASSERT_THAT(inv->warnings, SizeIs(1));
  const std::string& w = inv->warnings[0];
  EXPECT_THAT(w, HasSubstr("ports/1/state: expected '<n>: <NAME>', got 'ACTIVE\\nxxx"));
  EXPECT_THAT(w, HasSubstr("...' (65543 bytes)"));
  EXPECT_EQ(w.find('\n'), std::string::npos);
  EXPECT_LT(w.size(), 300u);
}

// Issue 19: names are whatever bytes root gave them, and a name that is not
// UTF-8 reached nlohmann's dump() (type_error.316: the state file, the CDI
// spec and /v1/node threw). A device with such a name is not advertised
// (its name is its ID everywhere), with one warning naming it escaped; a bad
// netdev name only drops that netdev.
TEST(DiscoveryTest, NamesThatAreNotUsableTextAreRefusedWhereTheyEnter) {
  FakeSysfs fs;
  fs.AddMlx5("mlx5_\xff\xfe", "0000:3b:00.0", {});
  fs.AddMlx5("mlx5_1", "0000:3b:00.1", {.link_layer = "Ethernet", .netdev = "eth\xc0"});
  fs.AddMlx5("mlx5_\x1b[2J", "0000:3b:00.2", {});  // an escape sequence for the log
  fs.AddRxe("rxe0", "e\x7f");
  fs.AddMlx5("mlx5_3", "0000:3b:00.3", {.link_layer = "Ethernet", .netdev = "eth3"});
  auto inv = DiscoverNode(fs.paths());
  ASSERT_OK(inv);
  std::vector<std::string> names;
  for (const RdmaDevice& d : inv->devices) names.push_back(d.name);
  EXPECT_THAT(names, ElementsAre("mlx5_1", "mlx5_3", "rxe0"));
  // Permanent until renamed (which changes the listing): not retried.
  EXPECT_TRUE(inv->skipped.empty());
  for (const RdmaDevice& d : inv->devices) {
    if (d.name == "mlx5_3") {
      EXPECT_THAT(d.netdevs, ElementsAre("eth3"));
      continue;
    }
    EXPECT_TRUE(d.netdevs.empty()) << d.name;
    for (const PortInfo& p : d.ports) EXPECT_EQ(p.netdev, "") << d.name;
  }
  std::string all;
  for (const std::string& w : inv->warnings) {
    EXPECT_TRUE(IsValidUtf8(w)) << w;
    EXPECT_EQ(w.find('\x1b'), std::string::npos) << w;
    all += w + "\n";
  }
  EXPECT_THAT(all, HasSubstr("RDMA device name \"mlx5_\\xff\\xfe\" is not valid UTF-8"));
  EXPECT_THAT(all, HasSubstr("\"mlx5_\\x1b[2J\" contains a control character"));
  EXPECT_THAT(all, HasSubstr("RDMA device mlx5_1: ignoring a netdev: netdev name \"eth\\xc0\""));
  EXPECT_THAT(all, HasSubstr("RDMA device rxe0: ignoring a netdev"));
}

TEST(DiscoveryTest, MissingDeviceNodeSkippedWhenDevIsVisible) {
  FakeSysfs fs;
  fs.AddEfa("rdmap79s0", "0000:4f:00.0", {});
  fs.AddEfa("rdmap80s0", "0000:50:00.0", {});
  fs.Remove("dev/infiniband/uverbs1");
  auto inv = DiscoverNode(fs.paths());
  ASSERT_OK(inv);
  ASSERT_THAT(inv->devices, SizeIs(1));
  EXPECT_THAT(inv->warnings[0], HasSubstr("uverbs1 is missing"));

  // Without a /dev view at all, nodes are not checked.
  HostPaths no_dev = fs.paths();
  no_dev.dev_root = fs.root() + "/nodev";
  auto inv2 = DiscoverNode(no_dev);
  ASSERT_OK(inv2);
  EXPECT_THAT(inv2->devices, SizeIs(2));
}

TEST(DiscoveryTest, PortDownIsReported) {
  FakeSysfs fs;
  fs.AddMlx5("mlx5_0", "0000:3b:00.0", {.link_layer = "Ethernet", .netdev = "eth2"});
  fs.SetPortState("mlx5_0", 1, "1: DOWN", "3: Disabled");
  auto inv = DiscoverNode(fs.paths());
  ASSERT_OK(inv);
  ASSERT_THAT(inv->devices, SizeIs(1));
  EXPECT_FALSE(inv->devices[0].ports[0].active());
  EXPECT_EQ(inv->devices[0].ports[0].state, "DOWN");
  EXPECT_EQ(inv->devices[0].ports[0].phys_state_code, 3);
}

// Issue 11 item 2: an unreadable class/infiniband_verbs is an error, not a node
// without devices (every device would then be "removed"). A symlink loop gives
// ELOOP even to root, like EMFILE/ENOMEM would: an errno other than ENOENT.
TEST(DiscoveryTest, UnreadableVerbsClassIsAnErrorNotAnEmptyNode) {
  FakeSysfs fs;
  fs.AddEfa("rdmap79s0", "0000:4f:00.0", {});
  fs.Remove("sys/class/infiniband_verbs");
  ASSERT_EQ(::symlink("infiniband_verbs", (fs.sys_root() + "/class/infiniband_verbs").c_str()), 0);
  auto inv = DiscoverNode(fs.paths());
  ASSERT_FALSE(inv.ok()) << inv->devices.size() << " device(s)";
  EXPECT_THAT(std::string(inv.status().message()), HasSubstr("infiniband_verbs"));

  // Absent (ib_uverbs not loaded) is not an error: devices are skipped.
  fs.Remove("sys/class/infiniband_verbs");
  auto none = DiscoverNode(fs.paths());
  ASSERT_OK(none);
  EXPECT_TRUE(none->devices.empty());
}

// A resource error on one device's required file fails the pass (the caller
// keeps its last good inventory and retries) instead of dropping the device.
TEST(DiscoveryTest, TransientErrorClassification) {
  EXPECT_TRUE(IsTransientReadError(absl::ResourceExhaustedError("open: Too many open files")));
  EXPECT_TRUE(IsTransientReadError(absl::UnavailableError("EAGAIN")));
  EXPECT_FALSE(IsTransientReadError(absl::NotFoundError("gone")));
  EXPECT_FALSE(IsTransientReadError(absl::InvalidArgumentError("garbage")));
}

// The checked-in sample trees (test/testdata/nodes).
std::string SampleNode(const std::string& name) {
  return testing::TestDataDir() + "/nodes/" + name;
}

HostPaths SamplePaths(const std::string& name) {
  HostPaths p = HostPaths::Defaults();
  p.sysfs_root = SampleNode(name) + "/sys";
  p.dev_root = SampleNode(name) + "/dev";
  return p;
}

TEST(SampleNodesTest, P5HasThirtyTwoEfaOnTwoNumaNodes) {
  if (!IsDirectory(SampleNode("p5.48xlarge"))) GTEST_SKIP() << "sample tree not present";
  auto inv = DiscoverNode(SamplePaths("p5.48xlarge"));
  ASSERT_OK(inv);
  ASSERT_THAT(inv->devices, SizeIs(32));
  std::map<int, int> per_numa;
  for (const auto& d : inv->devices) {
    EXPECT_EQ(d.kind, DeviceKind::kEfa) << d.name;
    per_numa[d.numa_node()]++;
  }
  EXPECT_EQ(per_numa, (std::map<int, int>{{0, 16}, {1, 16}}));
  // Each EFA's root is the pci* directory its class link goes through.
  for (const auto& d : inv->devices) {
    auto link = ReadLink(SamplePaths("p5.48xlarge").sysfs_root + "/class/infiniband/" + d.name);
    ASSERT_OK(link);
    const std::string root = link->substr(std::string("../../devices/").size(), 10);
    EXPECT_EQ(d.pci->pcie_root, root) << d.name;
    EXPECT_EQ(d.pci->pcie_root, "pci0000:" + d.pci->address.substr(5, 2)) << d.name;
  }
  EXPECT_EQ(inv->Find("rdmap79s0")->pci->pcie_root, "pci0000:4f");
  EXPECT_TRUE(inv->rdma_cm.has_value());
  EXPECT_TRUE(inv->warnings.empty());
}

TEST(SampleNodesTest, P6B200HasEightEfaAndTwoMlx5) {
  if (!IsDirectory(SampleNode("p6-b200.48xlarge"))) GTEST_SKIP() << "sample tree not present";
  auto inv = DiscoverNode(SamplePaths("p6-b200.48xlarge"));
  ASSERT_OK(inv);
  int efa = 0, rdma = 0;
  for (const auto& d : inv->devices) (d.kind == DeviceKind::kEfa ? efa : rdma)++;
  EXPECT_EQ(efa, 8);
  EXPECT_EQ(rdma, 2);
}

TEST(SampleNodesTest, RoceSriovAndRxe) {
  if (!IsDirectory(SampleNode("mlx5-roce-sriov"))) GTEST_SKIP() << "sample tree not present";
  auto inv = DiscoverNode(SamplePaths("mlx5-roce-sriov"));
  ASSERT_OK(inv);
  int vfs = 0, pfs_with_vfs = 0;
  for (const auto& d : inv->devices) {
    ASSERT_TRUE(d.pci.has_value());
    if (d.pci->is_vf()) vfs++;
    if (d.pci->sriov_numvfs > 0) pfs_with_vfs++;
    EXPECT_EQ(d.LinkLayer(), "Ethernet");
    EXPECT_FALSE(d.PrimaryNetdev().empty()) << d.name;
    EXPECT_EQ(d.pci->pcie_root, "pci0000:3b") << d.name;  // VFs sit under their PF's root
  }
  EXPECT_EQ(vfs, 4);
  EXPECT_EQ(pfs_with_vfs, 1);
  EXPECT_THAT(inv->devices, SizeIs(6));

  auto rxe = DiscoverNode(SamplePaths("rxe"));
  ASSERT_OK(rxe);
  ASSERT_THAT(rxe->devices, SizeIs(1));
  EXPECT_FALSE(rxe->devices[0].pci.has_value());
}

}  // namespace
}  // namespace fabric
