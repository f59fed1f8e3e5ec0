#include "test/testing/fake_sysfs.h"

#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <utility>

#include "fmt/format.h"

namespace fabric::testing {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "FakeSysfs: %s\n", what.c_str());
  std::abort();
}

void MakeDirs(const fs::path& p) {
  std::error_code ec;
  fs::create_directories(p, ec);
  if (ec) Die(fmt::format("mkdir -p {}: {}", p.string(), ec.message()));
}

// Stable pseudo-random bits per name so that regenerated trees are identical.
uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// Kernel GUID format: four 16-bit groups, lowercase hex.
std::string FormatGuid(uint64_t g) {
  return fmt::format("{:04x}:{:04x}:{:04x}:{:04x}", (g >> 48) & 0xffff, (g >> 32) & 0xffff,
                     (g >> 16) & 0xffff, g & 0xffff);
}

// Kernel %pI6 format: eight uncompressed 4-digit groups.
std::string FormatGid(uint64_t prefix, uint64_t iface_id) {
  return FormatGuid(prefix) + ":" + FormatGuid(iface_id);
}

std::string FormatMac(uint64_t mac48) {
  return fmt::format("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", (mac48 >> 40) & 0xff,
                     (mac48 >> 32) & 0xff, (mac48 >> 24) & 0xff, (mac48 >> 16) & 0xff,
                     (mac48 >> 8) & 0xff, mac48 & 0xff);
}

// EUI-48 -> modified EUI-64 (flip U/L bit, insert ff:fe), as rxe and the
// IPv6 link-local GID do.
uint64_t Eui64FromMac(uint64_t mac48) {
  uint64_t hi = (mac48 >> 24) ^ 0x020000;
  uint64_t lo = mac48 & 0xffffff;
  return (hi << 40) | (0xfffeull << 24) | lo;
}

// Mellanox-style GUID from a MAC: OUI + 03:00 + NIC-specific 24 bits.
uint64_t MellanoxGuidFromMac(uint64_t mac48) {
  return ((mac48 >> 24) << 40) | (0x0300ull << 24) | (mac48 & 0xffffff);
}

constexpr uint64_t kLinkLocalPrefix = 0xfe80000000000000ull;

struct ParsedBdf {
  uint32_t domain = 0, bus = 0, slot = 0, func = 0;
};

ParsedBdf ParseBdf(const std::string& bdf) {
  ParsedBdf p;
  if (std::sscanf(bdf.c_str(), "%x:%x:%x.%x", &p.domain, &p.bus, &p.slot, &p.func) != 4) {
    Die("bad BDF " + bdf);
  }
  return p;
}

// Host bridges are modelled one per bus: sys/devices/pci<dom>:<bus>/<bdf>.
std::string PciDirFor(const std::string& bdf) {
  return fmt::format("sys/devices/pci{}/{}", bdf.substr(0, 7), bdf);
}

std::string WithCode(const std::string& s, bool phys) {
  if (s.find(':') != std::string::npos) return s;
  static const std::map<std::string, int> kState = {
      {"NOP", 0}, {"DOWN", 1}, {"INIT", 2}, {"ARMED", 3}, {"ACTIVE", 4}, {"ACTIVE_DEFER", 5}};
  static const std::map<std::string, int> kPhys = {
      {"Sleep", 1},  {"Polling", 2},           {"Disabled", 3}, {"PortConfigurationTraining", 4},
      {"LinkUp", 5}, {"LinkErrorRecovery", 6}, {"Phy Test", 7}};
  const auto& table = phys ? kPhys : kState;
  auto it = table.find(s);
  if (it == table.end()) Die("unknown port state name " + s);
  return fmt::format("{}: {}", it->second, s);
}

struct GidEntry {
  std::string gid;
  std::string type;  // "IB/RoCE v1" | "RoCE v2"
  std::string ndev;  // "" -> no ndevs file (the kernel's EINVAL)
};

struct PortSpec {
  std::string state = "4: ACTIVE";
  std::string phys_state = "5: LinkUp";
  std::string link_layer;
  std::string rate;
  std::string lid = "0x0";
  std::string sm_lid = "0x0";
  int lid_mask_count = 0;
  int sm_sl = 0;
  uint32_t cap_mask = 0;
  std::vector<GidEntry> gids;
  const std::vector<std::string>* hw_counters = nullptr;
  const std::vector<std::string>* pma_counters = nullptr;
};

}  // namespace

std::string PciLocationName(const std::string& prefix, const std::string& bdf,
                            bool multi_function) {
  ParsedBdf p = ParseBdf(bdf);
  std::string name = prefix;
  if (p.domain > 0) name += fmt::format("P{}", p.domain);
  name += fmt::format("p{}s{}", p.bus, p.slot);
  if (p.func > 0 || multi_function) name += fmt::format("f{}", p.func);
  return name;
}

// --- counter name tables (kernel order) -----------------------------------

const std::vector<std::string>& FakeSysfs::EfaDeviceCounterNames() {
  static const auto* names = new std::vector<std::string>{
      "submitted_cmds",  "completed_cmds",     "cmds_err",      "no_completion_cmds",
      "keep_alive_rcvd", "alloc_pd_err",       "create_qp_err", "create_cq_err",
      "reg_mr_err",      "alloc_ucontext_err", "create_ah_err", "mmap_err"};
  return *names;
}

const std::vector<std::string>& FakeSysfs::EfaPortCounterNames() {
  static const auto* names = new std::vector<std::string>{"tx_bytes",
                                                          "tx_pkts",
                                                          "rx_bytes",
                                                          "rx_pkts",
                                                          "rx_drops",
                                                          "send_bytes",
                                                          "send_wrs",
                                                          "recv_bytes",
                                                          "recv_wrs",
                                                          "rdma_read_wrs",
                                                          "rdma_read_bytes",
                                                          "rdma_read_wr_err",
                                                          "rdma_read_resp_bytes",
                                                          "rdma_write_wrs",
                                                          "rdma_write_bytes",
                                                          "rdma_write_wr_err",
                                                          "rdma_write_recv_bytes",
                                                          "retrans_bytes",
                                                          "retrans_pkts",
                                                          "retrans_timeout_events",
                                                          "unresponsive_remote_events",
                                                          "impaired_remote_conn_events"};
  return *names;
}

const std::vector<std::string>& FakeSysfs::Mlx5PortCounterNames() {
  static const auto* names = new std::vector<std::string>{"rx_write_requests",
                                                          "rx_read_requests",
                                                          "rx_atomic_requests",
                                                          "rx_dct_connect",
                                                          "out_of_buffer",
                                                          "out_of_sequence",
                                                          "duplicate_request",
                                                          "rnr_nak_retry_err",
                                                          "packet_seq_err",
                                                          "implied_nak_seq_err",
                                                          "local_ack_timeout_err",
                                                          "resp_local_length_error",
                                                          "resp_cqe_error",
                                                          "req_cqe_error",
                                                          "req_remote_invalid_request",
                                                          "req_remote_access_errors",
                                                          "resp_remote_access_errors",
                                                          "resp_cqe_flush_error",
                                                          "req_cqe_flush_error",
                                                          "roce_adp_retrans",
                                                          "roce_adp_retrans_to",
                                                          "roce_slow_restart",
                                                          "roce_slow_restart_cnps",
                                                          "roce_slow_restart_trans",
                                                          "rp_cnp_ignored",
                                                          "rp_cnp_handled",
                                                          "np_ecn_marked_roce_packets",
                                                          "np_cnp_sent",
                                                          "rx_icrc_encapsulated"};
  return *names;
}

const std::vector<std::string>& FakeSysfs::Mlx5PmaCounterNames() {
  static const auto* names = new std::vector<std::string>{"symbol_error",
                                                          "link_error_recovery",
                                                          "link_downed",
                                                          "port_rcv_errors",
                                                          "port_rcv_remote_physical_errors",
                                                          "port_rcv_switch_relay_errors",
                                                          "port_xmit_discards",
                                                          "port_xmit_constraint_errors",
                                                          "port_rcv_constraint_errors",
                                                          "local_link_integrity_errors",
                                                          "excessive_buffer_overrun_errors",
                                                          "VL15_dropped",
                                                          "port_xmit_data",
                                                          "port_rcv_data",
                                                          "port_xmit_packets",
                                                          "port_rcv_packets",
                                                          "port_xmit_wait",
                                                          "unicast_xmit_packets",
                                                          "unicast_rcv_packets",
                                                          "multicast_xmit_packets",
                                                          "multicast_rcv_packets"};
  return *names;
}

const std::vector<std::string>& FakeSysfs::RxePortCounterNames() {
  static const auto* names =
      new std::vector<std::string>{"sent_pkts",           "rcvd_pkts",
                                   "duplicate_request",   "out_of_seq_request",
                                   "rcvd_rnr_err",        "send_rnr_err",
                                   "rcvd_seq_err",        "ack_deferred",
                                   "retry_exceeded_err",  "retry_rnr_exceeded_err",
                                   "completer_retry_err", "send_err",
                                   "link_downed",         "rdma_sends",
                                   "rdma_recvs"};
  return *names;
}

// --- construction ----------------------------------------------------------

FakeSysfs::FakeSysfs() : owned_(true) {
  char tmpl[] = "/tmp/fabric-sysfs-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) Die("mkdtemp failed");
  root_ = tmpl;
  MakeDirs(sys_root());
  MakeDirs(dev_root());
}

FakeSysfs::FakeSysfs(std::string root, bool owned) : root_(std::move(root)), owned_(owned) {
  MakeDirs(sys_root());
  MakeDirs(dev_root());
}

FakeSysfs::~FakeSysfs() {
  if (!owned_) return;
  std::error_code ec;
  fs::remove_all(root_, ec);  // Does not follow symlinks.
}

HostPaths FakeSysfs::paths() const {
  HostPaths p;
  p.sysfs_root = sys_root();
  p.dev_root = dev_root();
  p.kubelet_root = root_ + "/var/lib/kubelet";
  p.cdi_dir = root_ + "/var/run/cdi";
  p.state_dir = root_ + "/var/lib/fabric-agent";
  return p;
}

// --- raw helpers -----------------------------------------------------------

void FakeSysfs::WriteFile(const std::string& rel, const std::string& content) {
  fs::path p = fs::path(root_) / rel;
  MakeDirs(p.parent_path());
  std::error_code ec;
  if (fs::is_symlink(p, ec)) fs::remove(p, ec);
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << content;
  out.close();
  if (!out) Die("write " + p.string());
}

void FakeSysfs::Symlink(const std::string& link_rel, const std::string& target_rel) {
  fs::path link = fs::path(link_rel).lexically_normal();
  fs::path target = fs::path(target_rel).lexically_normal();
  // Spelled the way kernfs does: climb from the link's directory to the
  // nearest STRICT ancestor of the target, then descend. Hence a device's
  // `device` link reads "../../../0000:4f:00.0", not "../..".
  fs::path base = link.parent_path();
  fs::path rel_target;
  auto strict_ancestor = [&](const fs::path& b) {
    const fs::path rel = target.parent_path().lexically_relative(b);
    return !rel.empty() && *rel.begin() != "..";
  };
  while (!base.empty() && !strict_ancestor(base)) {
    rel_target /= "..";
    base = base.parent_path();
  }
  rel_target /= target.lexically_relative(base.empty() ? fs::path(".") : base);
  fs::path abs_link = fs::path(root_) / link;
  MakeDirs(abs_link.parent_path());
  std::error_code ec;
  fs::remove(abs_link, ec);  // Replace, like re-registration would.
  fs::create_symlink(rel_target, abs_link, ec);
  if (ec)
    Die(fmt::format("symlink {} -> {}: {}", abs_link.string(), rel_target.string(), ec.message()));
}

void FakeSysfs::Remove(const std::string& rel) {
  std::error_code ec;
  fs::remove_all(fs::path(root_) / rel, ec);
  if (ec) Die(fmt::format("rm -r {}: {}", rel, ec.message()));
}

std::string FakeSysfs::IbDevicePath(const std::string& ibdev) const {
  return sys_root() + "/class/infiniband/" + ibdev;
}

const FakeSysfs::Device& FakeSysfs::Find(const std::string& ibdev) const {
  auto it = devices_.find(ibdev);
  if (it == devices_.end()) Die("unknown device " + ibdev);
  return it->second;
}

int FakeSysfs::AllocUverbs() {
  int n = 0;
  while (uverbs_.count(n)) ++n;
  return n;
}

int FakeSysfs::AllocUmad() {
  int n = 0;
  while (umads_.count(n)) ++n;
  return n;
}

// --- building blocks -------------------------------------------------------

std::string FakeSysfs::EnsurePciFunction(const std::string& bdf, uint32_t vendor, uint32_t device,
                                         uint32_t subsys_vendor, uint32_t subsys_device,
                                         uint32_t pci_class, int numa_node,
                                         const std::string& cpulist, const std::string& driver) {
  const std::string dir = PciDirFor(bdf);
  WriteFile(dir + "/vendor", fmt::format("0x{:04x}\n", vendor));
  WriteFile(dir + "/device", fmt::format("0x{:04x}\n", device));
  WriteFile(dir + "/subsystem_vendor", fmt::format("0x{:04x}\n", subsys_vendor));
  WriteFile(dir + "/subsystem_device", fmt::format("0x{:04x}\n", subsys_device));
  WriteFile(dir + "/class", fmt::format("0x{:06x}\n", pci_class));
  WriteFile(dir + "/numa_node", fmt::format("{}\n", numa_node));
  WriteFile(dir + "/local_cpulist", (cpulist.empty() ? std::string("0-47") : cpulist) + "\n");
  WriteFile(dir + "/modalias",
            fmt::format("pci:v{:08X}d{:08X}sv{:08X}sd{:08X}bc{:02X}sc{:02X}i{:02X}\n", vendor,
                        device, subsys_vendor, subsys_device, (pci_class >> 16) & 0xff,
                        (pci_class >> 8) & 0xff, pci_class & 0xff));
  const std::string drv = "sys/bus/pci/drivers/" + driver;
  Symlink(dir + "/driver", drv);
  Symlink(drv + "/" + bdf, dir);
  Symlink("sys/bus/pci/devices/" + bdf, dir);
  return dir;
}

void FakeSysfs::WriteCommonIbFiles(const std::string& ib_dir, const std::string& node_type,
                                   const std::string& node_guid, const std::string& sys_image_guid,
                                   const std::string& fw_ver, const std::string& node_desc) {
  WriteFile(ib_dir + "/node_type", node_type + "\n");
  WriteFile(ib_dir + "/node_guid", node_guid + "\n");
  WriteFile(ib_dir + "/sys_image_guid", sys_image_guid + "\n");
  WriteFile(ib_dir + "/fw_ver", fw_ver + "\n");
  WriteFile(ib_dir + "/node_desc", node_desc + "\n");
}

void FakeSysfs::RegisterClassLink(const std::string& ibdev, const std::string& ib_dir) {
  Symlink("sys/class/infiniband/" + ibdev, ib_dir);
}

void FakeSysfs::WriteCounters(const std::string& dir, const std::vector<std::string>& names) {
  for (const auto& n : names) WriteFile(dir + "/" + n, "0\n");
}

namespace {
void WritePort(FakeSysfs& f, const std::string& ib_dir, int port, const PortSpec& s) {
  const std::string p = fmt::format("{}/ports/{}", ib_dir, port);
  f.WriteFile(p + "/state", s.state + "\n");
  f.WriteFile(p + "/phys_state", s.phys_state + "\n");
  f.WriteFile(p + "/link_layer", s.link_layer + "\n");
  f.WriteFile(p + "/rate", s.rate + "\n");
  f.WriteFile(p + "/lid", s.lid + "\n");
  f.WriteFile(p + "/sm_lid", s.sm_lid + "\n");
  f.WriteFile(p + "/lid_mask_count", fmt::format("{}\n", s.lid_mask_count));
  f.WriteFile(p + "/sm_sl", fmt::format("{}\n", s.sm_sl));
  f.WriteFile(p + "/cap_mask", fmt::format("0x{:08x}\n", s.cap_mask));
  f.WriteFile(p + "/pkeys/0", "0xffff\n");
  for (size_t i = 0; i < s.gids.size(); ++i) {
    f.WriteFile(fmt::format("{}/gids/{}", p, i), s.gids[i].gid + "\n");
    f.WriteFile(fmt::format("{}/gid_attrs/types/{}", p, i), s.gids[i].type + "\n");
    // No netdev: the kernel fails the read with EINVAL; modelled as absent.
    if (!s.gids[i].ndev.empty()) {
      f.WriteFile(fmt::format("{}/gid_attrs/ndevs/{}", p, i), s.gids[i].ndev + "\n");
    }
  }
  if (s.hw_counters != nullptr) {
    for (const auto& n : *s.hw_counters) f.WriteFile(p + "/hw_counters/" + n, "0\n");
    f.WriteFile(p + "/hw_counters/lifespan", "10\n");
  }
  if (s.pma_counters != nullptr) {
    for (const auto& n : *s.pma_counters) f.WriteFile(p + "/counters/" + n, "0\n");
  }
}
}  // namespace

void FakeSysfs::AddUverbs(const std::string& ibdev, const std::string& parent_dir, int n, int abi) {
  const std::string dir = fmt::format("{}/infiniband_verbs/uverbs{}", parent_dir, n);
  WriteFile("sys/class/infiniband_verbs/abi_version", "6\n");
  WriteFile(dir + "/ibdev", ibdev + "\n");
  WriteFile(dir + "/abi_version", fmt::format("{}\n", abi));
  // The first 32 minors are fixed (231:192+N); later devices come from a
  // dynamically allocated region.
  WriteFile(dir + "/dev", n < 32 ? fmt::format("231:{}\n", 192 + n)
                                 : fmt::format("{}:{}\n", kFakeDynamicUverbsMajor, n - 32));
  if (parent_dir.rfind("sys/devices/virtual", 0) != 0) Symlink(dir + "/device", parent_dir);
  Symlink(fmt::format("sys/class/infiniband_verbs/uverbs{}", n), dir);
  WriteFile(fmt::format("dev/infiniband/uverbs{}", n), "");
  uverbs_[n] = ibdev;
}

void FakeSysfs::AddUmad(const std::string& ibdev, const std::string& parent_dir, int port, int n) {
  WriteFile("sys/class/infiniband_mad/abi_version", "5\n");
  const struct {
    const char* kind;
    uint32_t minor;
  } nodes[] = {{"umad", static_cast<uint32_t>(n)}, {"issm", 64u + n}};
  for (const auto& node : nodes) {
    const std::string name = fmt::format("{}{}", node.kind, n);
    const std::string dir = parent_dir + "/infiniband_mad/" + name;
    WriteFile(dir + "/ibdev", ibdev + "\n");
    WriteFile(dir + "/port", fmt::format("{}\n", port));
    WriteFile(dir + "/dev", fmt::format("231:{}\n", node.minor));
    Symlink(dir + "/device", parent_dir);
    Symlink("sys/class/infiniband_mad/" + name, dir);
    WriteFile("dev/infiniband/" + name, "");
  }
  umads_[n] = ibdev;
}

// --- devices ---------------------------------------------------------------

int FakeSysfs::AddEfa(const std::string& ibdev, const std::string& bdf, const EfaOptions& o) {
  if (devices_.count(ibdev)) Die("duplicate device " + ibdev);
  constexpr uint32_t kAmazon = 0x1d0f;
  const std::string pci = EnsurePciFunction(bdf, kAmazon, o.device_id, kAmazon, o.device_id,
                                            0x020000, o.numa_node, o.local_cpulist, "efa");
  const std::string ib = pci + "/infiniband/" + ibdev;
  // EFA reports a device GUID and an fe80::-style device address as GID 0;
  // it never sets sys_image_guid and has no firmware-version op.
  const uint64_t guid = Fnv1a(ibdev) | 0x0200000000000000ull;
  WriteCommonIbFiles(ib, "7: unspecified", FormatGuid(guid), FormatGuid(0), "", "");
  Symlink(ib + "/device", pci);
  WriteCounters(ib + "/hw_counters", EfaDeviceCounterNames());
  WriteFile(ib + "/hw_counters/lifespan", "10\n");

  PortSpec port;  // State is hard-coded ACTIVE/LinkUp by the EFA driver.
  port.link_layer = "Unknown";
  port.rate = o.rate;
  port.lid_mask_count = 1;
  port.gids = {{FormatGid(kLinkLocalPrefix, guid), "IB/RoCE v1", ""}};
  port.hw_counters = &EfaPortCounterNames();
  WritePort(*this, ib, 1, port);
  RegisterClassLink(ibdev, ib);

  const int n = AllocUverbs();
  AddUverbs(ibdev, pci, n, /*abi=*/1);
  devices_[ibdev] = Device{ib, pci, n, {}};
  return n;
}

int FakeSysfs::AddMlx5(const std::string& ibdev, const std::string& bdf, const Mlx5Options& o) {
  if (devices_.count(ibdev)) Die("duplicate device " + ibdev);
  constexpr uint32_t kMellanox = 0x15b3;
  const bool roce = o.link_layer == "Ethernet";
  const bool is_vf = !o.physfn.empty();
  // InfiniBand controller vs Ethernet controller.
  const uint32_t pci_class = roce ? 0x020000 : 0x020700;
  const std::string pci = EnsurePciFunction(bdf, kMellanox, o.device_id, kMellanox, 0x0016,
                                            pci_class, o.numa_node, o.local_cpulist, "mlx5_core");
  if (is_vf) {
    const std::string pf = PciDirFor(o.physfn);
    if (!fs::exists(fs::path(root_) / pf)) Die("PF " + o.physfn + " must be added before its VF");
    Symlink(pci + "/physfn", pf);
    int k = 0;
    while (fs::is_symlink(fs::path(root_) / fmt::format("{}/virtfn{}", pf, k))) ++k;
    Symlink(fmt::format("{}/virtfn{}", pf, k), pci);
  } else if (o.sriov_numvfs > 0 || o.sriov_totalvfs > 0) {
    WriteFile(pci + "/sriov_numvfs", fmt::format("{}\n", o.sriov_numvfs));
    WriteFile(pci + "/sriov_totalvfs",
              fmt::format("{}\n", o.sriov_totalvfs > 0 ? o.sriov_totalvfs : o.sriov_numvfs));
  }

  // A Mellanox-looking MAC; the node GUID and link-local GID derive from it.
  const uint64_t mac = (roce ? 0x0c42a1000000ull : 0xb8599f000000ull) | (Fnv1a(ibdev) & 0xffffff);
  const uint64_t guid = MellanoxGuidFromMac(mac);
  if (roce) {
    if (o.netdev.empty()) Die("RoCE function " + ibdev + " needs a netdev");
    const std::string net = pci + "/net/" + o.netdev;
    WriteFile(net + "/address", FormatMac(mac) + "\n");
    WriteFile(net + "/operstate", "up\n");
    Symlink("sys/class/net/" + o.netdev, net);
  }

  const std::string ib = pci + "/infiniband/" + ibdev;
  WriteCommonIbFiles(ib, "1: CA", FormatGuid(guid), FormatGuid(guid), o.fw_ver, "");
  WriteFile(ib + "/hca_type", fmt::format("MT{}\n", o.device_id));
  WriteFile(ib + "/hw_rev", "0\n");
  WriteFile(ib + "/board_id", o.board_id + "\n");
  Symlink(ib + "/device", pci);

  std::vector<int> umads;
  for (int p = 1; p <= o.num_ports; ++p) {
    PortSpec port;
    port.link_layer = o.link_layer;
    port.rate = o.rate;
    port.hw_counters = &Mlx5PortCounterNames();
    port.pma_counters = &Mlx5PmaCounterNames();
    if (roce) {
      // IP-based GIDs: link-local as RoCE v1 and v2; 0x00010000 = CM_SUP.
      port.cap_mask = 0x00010000;
      const std::string ll = FormatGid(kLinkLocalPrefix, Eui64FromMac(mac));
      port.gids = {{ll, "IB/RoCE v1", o.netdev}, {ll, "RoCE v2", o.netdev}};
    } else {
      port.lid = fmt::format("0x{:x}", 1 + (Fnv1a(ibdev) % 0xbfff) + p - 1);
      port.sm_lid = "0x1";
      port.cap_mask = 0xa651e848;
      port.gids = {{FormatGid(kLinkLocalPrefix, guid + p - 1), "IB/RoCE v1", ""}};
    }
    WritePort(*this, ib, p, port);
    const int m = AllocUmad();
    AddUmad(ibdev, pci, p, m);
    umads.push_back(m);
  }
  RegisterClassLink(ibdev, ib);

  const int n = AllocUverbs();
  AddUverbs(ibdev, pci, n, /*abi=*/1);
  devices_[ibdev] = Device{ib, pci, n, umads};
  return n;
}

int FakeSysfs::AddRxe(const std::string& ibdev, const std::string& netdev) {
  if (devices_.count(ibdev)) Die("duplicate device " + ibdev);
  // QEMU's default MAC 52:54:00:12:34:56 for the first one, as on the testbed.
  const uint64_t mac = 0x525400123456ull + rxe_count_;
  const uint64_t guid = Eui64FromMac(mac);
  const std::string ib = "sys/devices/virtual/infiniband/" + ibdev;
  WriteCommonIbFiles(ib, "1: CA", FormatGuid(guid), FormatGuid(guid), "", "rxe");
  WriteFile(ib + "/parent", netdev + "\n");

  PortSpec port;
  port.link_layer = "Ethernet";
  port.rate = "2.5 Gb/sec (1X SDR)";
  port.cap_mask = 0x00010000;
  // rxe only installs RoCE v2 GIDs: link-local and the netdev's IPv4 address.
  port.gids = {{FormatGid(kLinkLocalPrefix, guid), "RoCE v2", netdev},
               {FormatGid(0, 0x0000ffff0a00020full + rxe_count_), "RoCE v2", netdev}};
  port.hw_counters = &RxePortCounterNames();
  WritePort(*this, ib, 1, port);
  RegisterClassLink(ibdev, ib);

  const int n = AllocUverbs();
  AddUverbs(ibdev, "sys/devices/virtual", n, /*abi=*/2);
  devices_[ibdev] = Device{ib, "", n, {}};
  ++rxe_count_;
  return n;
}

void FakeSysfs::AddRdmaCm(uint32_t minor) {
  const std::string dir = "sys/devices/virtual/misc/rdma_cm";
  WriteFile(dir + "/dev", fmt::format("10:{}\n", minor));
  WriteFile(dir + "/abi_version", "4\n");
  Symlink("sys/class/misc/rdma_cm", dir);
  WriteFile("dev/infiniband/rdma_cm", "");
}

// --- mutations -------------------------------------------------------------

void FakeSysfs::SetPortState(const std::string& ibdev, int port, const std::string& state,
                             const std::string& phys_state) {
  const Device& d = Find(ibdev);
  const std::string p = fmt::format("{}/ports/{}", d.ib_dir, port);
  if (!fs::is_directory(fs::path(root_) / p)) Die("no port " + p);
  WriteFile(p + "/state", WithCode(state, false) + "\n");
  WriteFile(p + "/phys_state", WithCode(phys_state, true) + "\n");
}

void FakeSysfs::SetGidTableLength(const std::string& ibdev, int port, int length) {
  const Device& d = Find(ibdev);
  const std::string p = fmt::format("{}/ports/{}", d.ib_dir, port);
  if (!fs::is_directory(fs::path(root_) / p)) Die("no port " + p);
  for (int i = 0; i < length; ++i) {
    if (!fs::exists(fs::path(root_) / fmt::format("{}/gids/{}", p, i))) {
      WriteFile(fmt::format("{}/gids/{}", p, i), FormatGid(0, 0) + "\n");
    }
  }
}

void FakeSysfs::SetGid(const std::string& ibdev, int port, int index, const std::string& gid,
                       const std::string& type, const std::string& netdev) {
  const Device& d = Find(ibdev);
  const std::string p = fmt::format("{}/ports/{}", d.ib_dir, port);
  if (!fs::is_directory(fs::path(root_) / p)) Die("no port " + p);
  WriteFile(fmt::format("{}/gids/{}", p, index), gid + "\n");
  WriteFile(fmt::format("{}/gid_attrs/types/{}", p, index), type + "\n");
  if (netdev.empty()) {
    Remove(fmt::format("{}/gid_attrs/ndevs/{}", p, index));
  } else {
    WriteFile(fmt::format("{}/gid_attrs/ndevs/{}", p, index), netdev + "\n");
  }
}

void FakeSysfs::ClearGid(const std::string& ibdev, int port, int index) {
  const Device& d = Find(ibdev);
  const std::string p = fmt::format("{}/ports/{}", d.ib_dir, port);
  WriteFile(fmt::format("{}/gids/{}", p, index), FormatGid(0, 0) + "\n");
  Remove(fmt::format("{}/gid_attrs/types/{}", p, index));
  Remove(fmt::format("{}/gid_attrs/ndevs/{}", p, index));
}

std::string FakeSysfs::Ipv4Gid(const std::string& ipv4) {
  unsigned a = 0, b = 0, c = 0, e = 0;
  if (std::sscanf(ipv4.c_str(), "%u.%u.%u.%u", &a, &b, &c, &e) != 4) Die("bad IPv4 " + ipv4);
  return FormatGid(0, 0x0000ffff00000000ull | (uint64_t{a} << 24) | (b << 16) | (c << 8) | e);
}

void FakeSysfs::SetCounter(const std::string& ibdev, int port, const std::string& name,
                           uint64_t value) {
  const Device& d = Find(ibdev);
  const std::string dir = port == 0 ? d.ib_dir + "/hw_counters"
                                    : fmt::format("{}/ports/{}/hw_counters", d.ib_dir, port);
  WriteFile(dir + "/" + name, fmt::format("{}\n", value));
}

void FakeSysfs::SetPmaCounter(const std::string& ibdev, int port, const std::string& name,
                              uint64_t value) {
  const Device& d = Find(ibdev);
  WriteFile(fmt::format("{}/ports/{}/counters/{}", d.ib_dir, port, name),
            fmt::format("{}\n", value));
}

void FakeSysfs::MoveOutOfHostNetns(const std::string& ibdev) {
  const Device& d = Find(ibdev);
  const fs::path away = fs::path(root_) / "netns-away" / ibdev;
  MakeDirs(away);
  std::error_code ec;
  fs::rename(fs::path(root_) / "sys/class/infiniband" / ibdev, away / "class_link", ec);
  if (ec) Die(fmt::format("hide class link of {}: {}", ibdev, ec.message()));
  fs::rename(fs::path(root_) / d.ib_dir, away / "ib_dir", ec);
  if (ec) Die(fmt::format("hide {}: {}", d.ib_dir, ec.message()));
}

void FakeSysfs::ReturnToHostNetns(const std::string& ibdev) {
  const Device& d = Find(ibdev);
  const fs::path away = fs::path(root_) / "netns-away" / ibdev;
  std::error_code ec;
  fs::rename(away / "ib_dir", fs::path(root_) / d.ib_dir, ec);
  if (ec) Die(fmt::format("restore {}: {}", d.ib_dir, ec.message()));
  fs::rename(away / "class_link", fs::path(root_) / "sys/class/infiniband" / ibdev, ec);
  if (ec) Die(fmt::format("restore class link of {}: {}", ibdev, ec.message()));
  fs::remove(away, ec);
}

void FakeSysfs::RemoveDevice(const std::string& ibdev) {
  const Device d = Find(ibdev);
  const std::string parent = d.pci_dir.empty() ? std::string("sys/devices/virtual") : d.pci_dir;
  Remove("sys/class/infiniband/" + ibdev);
  Remove(d.ib_dir);
  Remove(fmt::format("sys/class/infiniband_verbs/uverbs{}", d.uverbs));
  Remove(fmt::format("{}/infiniband_verbs/uverbs{}", parent, d.uverbs));
  Remove(fmt::format("dev/infiniband/uverbs{}", d.uverbs));
  uverbs_.erase(d.uverbs);
  for (int m : d.umads) {
    for (const char* kind : {"umad", "issm"}) {
      const std::string name = fmt::format("{}{}", kind, m);
      Remove("sys/class/infiniband_mad/" + name);
      Remove(parent + "/infiniband_mad/" + name);
      Remove("dev/infiniband/" + name);
    }
    umads_.erase(m);
  }
  // Drop now-empty per-function class dirs, as the kernel does.
  if (!d.pci_dir.empty()) {
    for (const char* sub : {"infiniband", "infiniband_verbs", "infiniband_mad"}) {
      std::error_code ec;
      fs::path p = fs::path(root_) / d.pci_dir / sub;
      if (fs::is_directory(p, ec) && fs::is_empty(p, ec)) fs::remove(p, ec);
    }
  }
  devices_.erase(ibdev);
}

}  // namespace fabric::testing
