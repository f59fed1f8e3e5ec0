#include "test/testing/fake_sysfs.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "agent/base/file_util.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/status_matchers.h"

namespace fabric::testing {
namespace {

using ::testing::ElementsAreArray;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::StartsWith;

// Contents, or a marker that cannot equal any kernel string.
std::string Read(const std::string& path) {
  auto s = ReadFile(path);
  return s.ok() ? *s : "<" + s.status().ToString() + ">";
}

std::vector<std::string> List(const std::string& path) {
  auto s = ListDir(path);
  return s.ok() ? *s : std::vector<std::string>{"<error>"};
}

bool IsSymlink(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

TEST(PciLocationNameTest, MatchesRdmaRenameExamples) {
  EXPECT_EQ(PciLocationName("rdma", "0000:10:1b.0"), "rdmap16s27");
  EXPECT_EQ(PciLocationName("rdma", "0000:00:06.0"), "rdmap0s6");
  EXPECT_EQ(PciLocationName("rdma", "0000:4f:00.0"), "rdmap79s0");
  EXPECT_EQ(PciLocationName("ib", "0000:00:0c.4"), "ibp0s12f4");
  EXPECT_EQ(PciLocationName("ib", "0000:73:00.0", /*multi_function=*/true), "ibp115s0f0");
  EXPECT_EQ(PciLocationName("rdma", "0001:02:03.0"), "rdmaP1p2s3");
}

TEST(FakeSysfsTest, EfaFilesMatchKernelStrings) {
  FakeSysfs f;
  EXPECT_EQ(f.AddEfa("rdmap79s0", "0000:4f:00.0"), 0);
  const std::string sys = f.sys_root();
  const std::string dev = sys + "/class/infiniband/rdmap79s0";

  EXPECT_EQ(Read(dev + "/node_type"), "7: unspecified\n");
  EXPECT_EQ(Read(dev + "/fw_ver"), "\n");
  EXPECT_EQ(Read(dev + "/node_desc"), "\n");
  EXPECT_EQ(Read(dev + "/sys_image_guid"), "0000:0000:0000:0000\n");
  EXPECT_THAT(Read(dev + "/node_guid"), MatchesRegex("[0-9a-f]{4}(:[0-9a-f]{4}){3}\n"));
  EXPECT_FALSE(PathExists(dev + "/hca_type"));

  const std::string port = dev + "/ports/1";
  EXPECT_EQ(Read(port + "/state"), "4: ACTIVE\n");
  EXPECT_EQ(Read(port + "/phys_state"), "5: LinkUp\n");
  EXPECT_EQ(Read(port + "/link_layer"), "Unknown\n");
  EXPECT_EQ(Read(port + "/rate"), "100 Gb/sec (4X EDR)\n");
  EXPECT_EQ(Read(port + "/lid"), "0x0\n");
  EXPECT_EQ(Read(port + "/lid_mask_count"), "1\n");
  EXPECT_EQ(Read(port + "/cap_mask"), "0x00000000\n");
  EXPECT_EQ(Read(port + "/pkeys/0"), "0xffff\n");
  EXPECT_THAT(Read(port + "/gids/0"), MatchesRegex("fe80:0000:0000:0000(:[0-9a-f]{4}){4}\n"));
  EXPECT_EQ(Read(port + "/gid_attrs/types/0"), "IB/RoCE v1\n");
  // The kernel fails this read with EINVAL (no netdev); the fake omits it.
  EXPECT_FALSE(PathExists(port + "/gid_attrs/ndevs/0"));
  EXPECT_FALSE(PathExists(port + "/counters"));  // EFA has no PMA.

  std::vector<std::string> dev_counters = FakeSysfs::EfaDeviceCounterNames();
  dev_counters.push_back("lifespan");
  std::sort(dev_counters.begin(), dev_counters.end());
  EXPECT_THAT(List(dev + "/hw_counters"), ElementsAreArray(dev_counters));
  EXPECT_EQ(dev_counters.size(), 13u);
  EXPECT_EQ(FakeSysfs::EfaPortCounterNames().size(), 22u);
  EXPECT_EQ(List(port + "/hw_counters").size(), 23u);
  EXPECT_EQ(Read(port + "/hw_counters/lifespan"), "10\n");
  EXPECT_EQ(Read(port + "/hw_counters/rdma_read_bytes"), "0\n");

  // PCI function.
  const std::string pci = dev + "/device";
  EXPECT_EQ(Read(pci + "/vendor"), "0x1d0f\n");
  EXPECT_EQ(Read(pci + "/device"), "0xefa1\n");
  EXPECT_EQ(Read(pci + "/subsystem_device"), "0xefa1\n");
  EXPECT_EQ(Read(pci + "/class"), "0x020000\n");
  EXPECT_EQ(Read(pci + "/numa_node"), "-1\n");
  EXPECT_EQ(Read(pci + "/modalias"), "pci:v00001D0Fd0000EFA1sv00001D0Fsd0000EFA1bc02sc00i00\n");
  EXPECT_THAT(ReadLink(pci + "/driver"), IsOkAndHolds("../../../bus/pci/drivers/efa"));

  // uverbs.
  const std::string uv = sys + "/class/infiniband_verbs";
  EXPECT_EQ(Read(uv + "/abi_version"), "6\n");
  EXPECT_EQ(Read(uv + "/uverbs0/ibdev"), "rdmap79s0\n");
  EXPECT_EQ(Read(uv + "/uverbs0/abi_version"), "1\n");
  EXPECT_EQ(Read(uv + "/uverbs0/dev"), "231:192\n");
  EXPECT_TRUE(IsRegularFile(f.dev_root() + "/infiniband/uverbs0"));
}

TEST(FakeSysfsTest, SymlinksMirrorTheKernelDeviceModel) {
  FakeSysfs f;
  f.AddEfa("rdmap79s0", "0000:4f:00.0");
  const std::string sys = f.sys_root();
  const std::string cls = sys + "/class/infiniband/rdmap79s0";
  ASSERT_TRUE(IsSymlink(cls));
  EXPECT_THAT(ReadLink(cls),
              IsOkAndHolds("../../devices/pci0000:4f/0000:4f:00.0/infiniband/rdmap79s0"));
  EXPECT_THAT(ReadLink(cls + "/device"), IsOkAndHolds("../../../0000:4f:00.0"));
  EXPECT_THAT(RealPath(cls + "/device"),
              IsOkAndHolds(EndsWith("/sys/devices/pci0000:4f/0000:4f:00.0")));
  // Consumers that walk "../.." from the class entry land on the BDF.
  EXPECT_THAT(RealPath(cls + "/../.."), IsOkAndHolds(EndsWith("/0000:4f:00.0")));

  const std::string uv = sys + "/class/infiniband_verbs/uverbs0";
  ASSERT_TRUE(IsSymlink(uv));
  EXPECT_THAT(RealPath(uv),
              IsOkAndHolds(EndsWith("/devices/pci0000:4f/0000:4f:00.0/infiniband_verbs/uverbs0")));
  EXPECT_THAT(RealPath(uv + "/device"), IsOkAndHolds(EndsWith("/0000:4f:00.0")));
  EXPECT_THAT(RealPath(sys + "/bus/pci/devices/0000:4f:00.0"),
              IsOkAndHolds(EndsWith("/sys/devices/pci0000:4f/0000:4f:00.0")));
  EXPECT_THAT(List(sys + "/bus/pci/devices/0000:4f:00.0/infiniband"),
              ElementsAreArray({"rdmap79s0"}));

  // Every symlink is relative and resolves inside the tree.
  for (const auto& e : std::filesystem::recursive_directory_iterator(f.root())) {
    if (!e.is_symlink()) continue;
    const std::string target = std::filesystem::read_symlink(e.path()).string();
    EXPECT_THAT(target, ::testing::Not(StartsWith("/"))) << e.path();
    EXPECT_THAT(RealPath(e.path().string()), IsOkAndHolds(StartsWith(f.root()))) << e.path();
  }
}

TEST(FakeSysfsTest, UverbsBeyond32UseADynamicMajor) {
  FakeSysfs f;
  for (int i = 0; i < 34; ++i) {
    EXPECT_EQ(f.AddEfa(PciLocationName("rdma", fmt::format("0000:{:02x}:00.0", 0x10 + i)),
                       fmt::format("0000:{:02x}:00.0", 0x10 + i)),
              i);
  }
  const std::string uv = f.sys_root() + "/class/infiniband_verbs";
  EXPECT_EQ(Read(uv + "/uverbs31/dev"), "231:223\n");
  EXPECT_EQ(Read(uv + "/uverbs32/dev"), fmt::format("{}:0\n", kFakeDynamicUverbsMajor));
  EXPECT_EQ(Read(uv + "/uverbs33/dev"), fmt::format("{}:1\n", kFakeDynamicUverbsMajor));
  EXPECT_TRUE(IsRegularFile(f.dev_root() + "/infiniband/uverbs33"));
}

TEST(FakeSysfsTest, RemoveDeviceFreesItsIndexLikeHotUnplug) {
  FakeSysfs f;
  f.AddEfa("rdmap16s0", "0000:10:00.0");
  f.AddEfa("rdmap17s0", "0000:11:00.0");
  f.AddEfa("rdmap18s0", "0000:12:00.0");
  f.RemoveDevice("rdmap17s0");
  const std::string sys = f.sys_root();
  EXPECT_FALSE(PathExists(sys + "/class/infiniband/rdmap17s0"));
  EXPECT_FALSE(IsSymlink(sys + "/class/infiniband/rdmap17s0"));
  EXPECT_FALSE(IsSymlink(sys + "/class/infiniband_verbs/uverbs1"));
  EXPECT_FALSE(PathExists(f.dev_root() + "/infiniband/uverbs1"));
  EXPECT_FALSE(PathExists(sys + "/devices/pci0000:11/0000:11:00.0/infiniband"));
  EXPECT_TRUE(PathExists(sys + "/devices/pci0000:11/0000:11:00.0/vendor"));  // PCI fn stays.
  EXPECT_THAT(List(sys + "/class/infiniband"), ElementsAreArray({"rdmap16s0", "rdmap18s0"}));
  // The kernel hands out the first free index again.
  EXPECT_EQ(f.AddEfa("rdmap19s0", "0000:13:00.0"), 1);
  EXPECT_EQ(Read(sys + "/class/infiniband_verbs/uverbs1/ibdev"), "rdmap19s0\n");
}

TEST(FakeSysfsTest, Mlx5InfiniBand) {
  FakeSysfs f;
  Mlx5Options o;
  o.numa_node = 1;
  o.num_ports = 2;
  f.AddMlx5("mlx5_0", "0000:00:0c.4", o);
  const std::string dev = f.IbDevicePath("mlx5_0");
  EXPECT_EQ(Read(dev + "/node_type"), "1: CA\n");
  EXPECT_EQ(Read(dev + "/hca_type"), "MT4123\n");
  EXPECT_EQ(Read(dev + "/fw_ver"), "20.39.1002\n");
  EXPECT_EQ(Read(dev + "/device/class"), "0x020700\n");
  EXPECT_EQ(Read(dev + "/device/numa_node"), "1\n");
  EXPECT_EQ(Read(dev + "/device/modalias"),
            "pci:v000015B3d0000101Bsv000015B3sd00000016bc02sc07i00\n");
  EXPECT_THAT(ReadLink(dev + "/device/driver"), IsOkAndHolds(EndsWith("/drivers/mlx5_core")));
  EXPECT_FALSE(PathExists(dev + "/hw_counters"));  // mlx5 has no device-level stats.
  for (int p : {1, 2}) {
    const std::string port = fmt::format("{}/ports/{}", dev, p);
    EXPECT_EQ(Read(port + "/link_layer"), "InfiniBand\n");
    EXPECT_EQ(Read(port + "/rate"), "200 Gb/sec (4X HDR)\n");
    EXPECT_EQ(Read(port + "/sm_lid"), "0x1\n");
    EXPECT_EQ(Read(port + "/counters/port_xmit_data"), "0\n");
    EXPECT_EQ(Read(port + "/hw_counters/out_of_buffer"), "0\n");
    EXPECT_EQ(Read(port + "/hw_counters/lifespan"), "10\n");
    EXPECT_FALSE(PathExists(port + "/gid_attrs/ndevs/0"));
  }
  const std::string mad = f.sys_root() + "/class/infiniband_mad";
  EXPECT_EQ(Read(mad + "/abi_version"), "5\n");
  EXPECT_EQ(Read(mad + "/umad1/dev"), "231:1\n");
  EXPECT_EQ(Read(mad + "/umad1/port"), "2\n");
  EXPECT_EQ(Read(mad + "/issm1/dev"), "231:65\n");
  EXPECT_TRUE(IsRegularFile(f.dev_root() + "/infiniband/issm1"));
}

TEST(FakeSysfsTest, Mlx5RoceSriov) {
  FakeSysfs f;
  Mlx5Options pf;
  pf.device_id = 0x101d;
  pf.link_layer = "Ethernet";
  pf.netdev = "ens1f0np0";
  pf.sriov_numvfs = 2;
  pf.sriov_totalvfs = 8;
  f.AddMlx5("mlx5_0", "0000:3b:00.0", pf);
  for (int v = 0; v < 2; ++v) {
    Mlx5Options vf = pf;
    vf.device_id = 0x101e;
    vf.netdev = fmt::format("ens1f0v{}", v);
    vf.physfn = "0000:3b:00.0";
    vf.sriov_numvfs = 0;
    vf.sriov_totalvfs = 0;
    f.AddMlx5(fmt::format("mlx5_{}", v + 1), fmt::format("0000:3b:00.{}", v + 2), vf);
  }
  const std::string pci = f.sys_root() + "/bus/pci/devices/";
  EXPECT_EQ(Read(pci + "0000:3b:00.0/sriov_numvfs"), "2\n");
  EXPECT_EQ(Read(pci + "0000:3b:00.0/sriov_totalvfs"), "8\n");
  EXPECT_THAT(RealPath(pci + "0000:3b:00.0/virtfn1"), IsOkAndHolds(EndsWith("/0000:3b:00.3")));
  EXPECT_THAT(ReadLink(pci + "0000:3b:00.3/physfn"), IsOkAndHolds("../0000:3b:00.0"));
  EXPECT_FALSE(PathExists(pci + "0000:3b:00.3/sriov_numvfs"));
  EXPECT_EQ(Read(pci + "0000:3b:00.3/device"), "0x101e\n");
  EXPECT_TRUE(PathExists(pci + "0000:3b:00.0/net/ens1f0np0/address"));
  EXPECT_THAT(RealPath(f.sys_root() + "/class/net/ens1f0v1"),
              IsOkAndHolds(EndsWith("/0000:3b:00.3/net/ens1f0v1")));

  const std::string port = f.IbDevicePath("mlx5_2") + "/ports/1";
  EXPECT_EQ(Read(port + "/link_layer"), "Ethernet\n");
  EXPECT_EQ(Read(port + "/gid_attrs/ndevs/0"), "ens1f0v1\n");
  EXPECT_EQ(Read(port + "/gid_attrs/types/0"), "IB/RoCE v1\n");
  EXPECT_EQ(Read(port + "/gid_attrs/types/1"), "RoCE v2\n");
  EXPECT_EQ(Read(port + "/cap_mask"), "0x00010000\n");
  EXPECT_EQ(Read(f.IbDevicePath("mlx5_2") + "/hca_type"), "MT4126\n");
}

TEST(FakeSysfsTest, RxeMatchesTheTestbedCapture) {
  FakeSysfs f;
  EXPECT_EQ(f.AddRxe("rxe0", "eth0"), 0);
  const std::string sys = f.sys_root();
  const std::string dev = sys + "/class/infiniband/rxe0";
  EXPECT_THAT(ReadLink(dev), IsOkAndHolds("../../devices/virtual/infiniband/rxe0"));
  EXPECT_FALSE(IsSymlink(dev + "/device"));
  EXPECT_FALSE(PathExists(dev + "/hca_type"));
  EXPECT_FALSE(PathExists(dev + "/hw_counters"));
  EXPECT_EQ(Read(dev + "/node_type"), "1: CA\n");
  EXPECT_EQ(Read(dev + "/node_desc"), "rxe\n");
  EXPECT_EQ(Read(dev + "/parent"), "eth0\n");
  EXPECT_EQ(Read(dev + "/node_guid"), "5054:00ff:fe12:3456\n");
  const std::string port = dev + "/ports/1";
  EXPECT_EQ(Read(port + "/link_layer"), "Ethernet\n");
  EXPECT_EQ(Read(port + "/rate"), "2.5 Gb/sec (1X SDR)\n");
  EXPECT_EQ(Read(port + "/cap_mask"), "0x00010000\n");
  EXPECT_EQ(Read(port + "/gids/0"), "fe80:0000:0000:0000:5054:00ff:fe12:3456\n");
  EXPECT_EQ(Read(port + "/gids/1"), "0000:0000:0000:0000:0000:ffff:0a00:020f\n");
  EXPECT_EQ(Read(port + "/gid_attrs/types/0"), "RoCE v2\n");
  EXPECT_EQ(Read(port + "/gid_attrs/ndevs/0"), "eth0\n");
  EXPECT_FALSE(PathExists(port + "/counters"));
  // `ls ports/1/hw_counters` on the testbed's kernel 6.1 rxe0.
  EXPECT_THAT(
      List(port + "/hw_counters"),
      ElementsAreArray({"ack_deferred", "completer_retry_err", "duplicate_request", "lifespan",
                        "link_downed", "out_of_seq_request", "rcvd_pkts", "rcvd_rnr_err",
                        "rcvd_seq_err", "rdma_recvs", "rdma_sends", "retry_exceeded_err",
                        "retry_rnr_exceeded_err", "send_err", "send_rnr_err", "sent_pkts"}));
  const std::string uv = sys + "/class/infiniband_verbs/uverbs0";
  EXPECT_EQ(Read(uv + "/abi_version"), "2\n");
  EXPECT_EQ(Read(uv + "/dev"), "231:192\n");
  EXPECT_THAT(RealPath(uv),
              IsOkAndHolds(EndsWith("/sys/devices/virtual/infiniband_verbs/uverbs0")));
  EXPECT_FALSE(IsSymlink(uv + "/device"));
}

TEST(FakeSysfsTest, RdmaCmAndMutations) {
  FakeSysfs f;
  f.AddRdmaCm(124);
  f.AddEfa("rdmap79s0", "0000:4f:00.0");
  EXPECT_EQ(Read(f.sys_root() + "/class/misc/rdma_cm/dev"), "10:124\n");
  EXPECT_EQ(Read(f.sys_root() + "/class/misc/rdma_cm/abi_version"), "4\n");
  EXPECT_TRUE(IsRegularFile(f.dev_root() + "/infiniband/rdma_cm"));

  const std::string dev = f.IbDevicePath("rdmap79s0");
  f.SetPortState("rdmap79s0", 1, "DOWN", "Disabled");
  EXPECT_EQ(Read(dev + "/ports/1/state"), "1: DOWN\n");
  EXPECT_EQ(Read(dev + "/ports/1/phys_state"), "3: Disabled\n");
  f.SetPortState("rdmap79s0", 1, "2: INIT", "5: LinkUp");
  EXPECT_EQ(Read(dev + "/ports/1/state"), "2: INIT\n");
  f.SetCounter("rdmap79s0", 0, "cmds_err", 3);
  f.SetCounter("rdmap79s0", 1, "tx_bytes", 18446744073709551615ull);
  EXPECT_EQ(Read(dev + "/hw_counters/cmds_err"), "3\n");
  EXPECT_EQ(Read(dev + "/ports/1/hw_counters/tx_bytes"), "18446744073709551615\n");
}

TEST(FakeSysfsTest, PathsAndCleanup) {
  std::string root;
  {
    FakeSysfs f;
    root = f.root();
    HostPaths p = f.paths();
    EXPECT_EQ(p.sysfs_root, root + "/sys");
    EXPECT_EQ(p.dev_root, root + "/dev");
    EXPECT_THAT(p.kubelet_root, StartsWith(root + "/"));
    EXPECT_THAT(p.state_dir, StartsWith(root + "/"));
    EXPECT_THAT(p.cdi_dir, HasSubstr("cdi"));
    f.AddEfa("rdmap79s0", "0000:4f:00.0");
    EXPECT_TRUE(PathExists(root + "/sys/class/infiniband/rdmap79s0"));
  }
  EXPECT_FALSE(PathExists(root));
}

}  // namespace
}  // namespace fabric::testing
