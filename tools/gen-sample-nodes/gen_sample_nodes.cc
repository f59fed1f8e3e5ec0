// gen-sample-nodes: writes the sample node trees of test/testdata/nodes
// (<name>/{sys,dev}) with FakeSysfs.
//
//   gen-sample-nodes <out_dir> [name...]   (default: every tree)
//   gen-sample-nodes --list
//
// Each <out_dir>/<name> is deleted and rewritten, so regenerating into the
// checkout is idempotent. Most trees are checked in; those named in
// test/testdata/nodes/generated.manifest (p5-128) are written into the build
// tree instead. sample_nodes_test diffs a fresh run against the checked-in
// copies and compares the others with their manifest lines.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "test/testing/fake_sysfs.h"

namespace fabric::testing {
namespace {

// p5.48xlarge and p6-b200.48xlarge: 192 vCPUs on 2 sockets (SMT siblings
// numbered after all cores).
std::string TwoSocketCpus(int numa) { return numa == 0 ? "0-47,96-143" : "48-95,144-191"; }

std::string EfaBdf(int bus) { return fmt::format("0000:{:02x}:00.0", bus); }

// 32 EFAs in 8 groups of 4 (one PCIe switch per GPU), groups 17 buses apart
// starting at 0x4f; this reproduces the names seen in EKS logs (rdmap79s0,
// rdmap115s0 ... rdmap182s0). Groups 0-3 on NUMA 0, 4-7 on NUMA 1.
void P5(FakeSysfs& f) {
  for (int group = 0; group < 8; ++group) {
    for (int i = 0; i < 4; ++i) {
      const int bus = 79 + 17 * group + i;
      EfaOptions o;
      o.numa_node = group < 4 ? 0 : 1;
      o.device_id = 0xefa1;
      o.rate = "100 Gb/sec (4X EDR)";
      o.local_cpulist = TwoSocketCpus(o.numa_node);
      f.AddEfa(PciLocationName("rdma", EfaBdf(bus)), EfaBdf(bus), o);
    }
  }
  f.AddRdmaCm(121);
}

// 8 x 400G EFA (0xefa2) plus the two mlx5 InfiniBand functions on the HGX
// baseboard (ibp115s0f0, ibp116s0f0) that are NOT EFA. Devices register in
// PCI order, so the mlx5 ones take uverbs4/5 between the EFAs.
void P6B200(FakeSysfs& f) {
  const int efa_buses[] = {0x18, 0x29, 0x3a, 0x4b, 0x98, 0xa9, 0xba, 0xcb};
  auto add_efa = [&](int bus) {
    EfaOptions o;
    o.numa_node = bus < 0x80 ? 0 : 1;
    o.device_id = 0xefa2;
    o.rate = "400 Gb/sec (8X HDR)";
    o.local_cpulist = TwoSocketCpus(o.numa_node);
    f.AddEfa(PciLocationName("rdma", EfaBdf(bus)), EfaBdf(bus), o);
  };
  for (int i = 0; i < 4; ++i) add_efa(efa_buses[i]);
  for (int bus : {0x73, 0x74}) {
    const std::string bdf = fmt::format("0000:{:02x}:00.0", bus);
    Mlx5Options o;
    o.numa_node = 0;
    o.device_id = 0x1021;  // ConnectX-7
    o.link_layer = "InfiniBand";
    o.rate = "400 Gb/sec (4X NDR)";
    o.fw_ver = "28.39.1002";
    o.board_id = "MT_0000000838";
    o.local_cpulist = TwoSocketCpus(0);
    f.AddMlx5(PciLocationName("ib", bdf, /*multi_function=*/true), bdf, o);
  }
  for (int i = 4; i < 8; ++i) add_efa(efa_buses[i]);
  f.AddRdmaCm(120);
}

// One dual-port ConnectX-6 Dx in RoCE mode: PF0 with 4 VFs, PF1 without.
void Mlx5RoceSriov(FakeSysfs& f) {
  auto base = [] {
    Mlx5Options o;
    o.numa_node = 0;
    o.link_layer = "Ethernet";
    o.rate = "100 Gb/sec (4X EDR)";
    o.fw_ver = "22.39.1002";
    o.board_id = "MT_0000000359";
    o.local_cpulist = "0-15";
    return o;
  };
  Mlx5Options pf0 = base();
  pf0.device_id = 0x101d;
  pf0.netdev = "ens1f0np0";
  pf0.sriov_numvfs = 4;
  pf0.sriov_totalvfs = 8;
  f.AddMlx5("mlx5_0", "0000:3b:00.0", pf0);
  Mlx5Options pf1 = base();
  pf1.device_id = 0x101d;
  pf1.netdev = "ens1f1np1";
  pf1.sriov_totalvfs = 8;
  f.AddMlx5("mlx5_1", "0000:3b:00.1", pf1);
  for (int v = 0; v < 4; ++v) {
    Mlx5Options vf = base();
    vf.device_id = 0x101e;
    vf.netdev = fmt::format("ens1f0v{}", v);
    vf.physfn = "0000:3b:00.0";
    f.AddMlx5(fmt::format("mlx5_{}", 2 + v), fmt::format("0000:3b:00.{}", 2 + v), vf);
  }
  f.AddRdmaCm(123);
}

void Rxe(FakeSysfs& f) {
  f.AddRxe("rxe0", "eth0");
  f.AddRdmaCm(124);
}

// Synthetic: 128 EFAs on 4 NUMA nodes (32 each), buses 0x10..0x8f. uverbs32+
// use a dynamic major, which real nodes with > 32 devices also see.
void P5x128(FakeSysfs& f) {
  for (int i = 0; i < 128; ++i) {
    const int bus = 0x10 + i;
    EfaOptions o;
    o.numa_node = i / 32;
    o.local_cpulist = fmt::format("{}-{}", 48 * o.numa_node, 48 * o.numa_node + 47);
    f.AddEfa(PciLocationName("rdma", EfaBdf(bus)), EfaBdf(bus), o);
  }
  f.AddRdmaCm(119);
}

struct Sample {
  const char* name;
  std::function<void(FakeSysfs&)> build;
};

const std::vector<Sample>& Samples() {
  static const auto* samples = new std::vector<Sample>{{"p5.48xlarge", P5},
                                                       {"p6-b200.48xlarge", P6B200},
                                                       {"mlx5-roce-sriov", Mlx5RoceSriov},
                                                       {"rxe", Rxe},
                                                       {"p5-128", P5x128}};
  return *samples;
}

int Main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--list") == 0) {
    for (const auto& s : Samples()) std::printf("%s\n", s.name);
    return 0;
  }
  if (argc < 2 || argv[1][0] == '-') {
    std::fprintf(stderr, "usage: %s <out_dir> [name...] | --list\n", argv[0]);
    return 2;
  }
  const std::filesystem::path out = argv[1];
  std::vector<std::string> wanted(argv + 2, argv + argc);
  int written = 0;
  for (const auto& s : Samples()) {
    if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), s.name) == wanted.end()) {
      continue;
    }
    const std::filesystem::path dir = out / s.name;
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    if (ec) {
      std::fprintf(stderr, "cannot remove %s: %s\n", dir.c_str(), ec.message().c_str());
      return 1;
    }
    FakeSysfs f(dir.string(), /*owned=*/false);
    s.build(f);
    ++written;
  }
  if (written != static_cast<int>(wanted.empty() ? Samples().size() : wanted.size())) {
    std::fprintf(stderr, "unknown sample name; see --list\n");
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace fabric::testing

int main(int argc, char** argv) { return fabric::testing::Main(argc, argv); }
