#include "agent/sysfs/sysfs_discovery.h"

#include <climits>
#include <map>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "agent/base/file_util.h"
#include "agent/base/logging.h"
#include "agent/base/utf8.h"
#include "agent/sysfs/gid_table.h"
#include "agent/sysfs/sysfs_layout.h"

namespace fabric {
namespace {

constexpr uint32_t kAmazonVendor = 0x1d0f;

// Names are checked where they enter (agent/base/utf8.h): an RDMA device or
// netdev name is whatever bytes root gave it (`rdma dev set ... name`, `ip
// link set ... name`); the kernel refuses only '/', ':' and whitespace. The
// kernel's limits: IB_DEVICE_NAME_MAX 64, IFNAMSIZ 16 (both with the NUL).
constexpr size_t kMaxDeviceName = 63;
constexpr size_t kMaxNetdevName = 15;

// One warning line, logged and kept in the inventory (/v1/node).
void Warn(NodeInventory* inv, std::string line) {
  LogWarn(Component::kDiscovery, "{}", line);
  inv->warnings.push_back(std::move(line));
}

// Netdev names from sysfs, without the ones that are not usable names. An
// SRE would rather keep the device (the netdev is only descriptive: the
// grant is the uverbs node) and see the bad netdev named in a warning.
std::vector<std::string> UsableNetdevs(const std::string& device, std::vector<std::string> names,
                                       NodeInventory* inv) {
  std::vector<std::string> out;
  for (std::string& n : names) {
    if (absl::Status s = CheckExternalName("netdev name", n, kMaxNetdevName); !s.ok()) {
      Warn(inv, absl::StrCat("RDMA device ", device, ": ignoring a netdev: ", s.message()));
      continue;
    }
    out.push_back(std::move(n));
  }
  return out;
}

bool LooksLikeBdf(const std::string& name) {
  static const std::regex kBdf("^[0-9a-fA-F]{4,}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\\.[0-7]$");
  return std::regex_match(name, kBdf);
}

// Skips one device with a single warning that names the file at fault.
class Skip {
 public:
  explicit Skip(NodeInventory* inv) : inv_(inv) {}
  void operator()(const std::string& device, const std::string& why) {
    std::string line = absl::StrCat("skipping RDMA device ", device, ": ", why);
    LogWarn(Component::kDiscovery, "{}", line);
    inv_->warnings.push_back(std::move(line));
    inv_->skipped.push_back(device);
  }

 private:
  NodeInventory* inv_;
};

struct VerbsEntry {
  CharDevice node;
  std::string class_entry;
};

// ibdev name -> its uverbs char device, from class/infiniband_verbs/*/{ibdev,dev}.
// A missing class directory (ib_uverbs not loaded) is no verbs node; any other
// failure to list it is an error: "no devices" would withdraw every device.
absl::StatusOr<std::map<std::string, VerbsEntry>> ReadVerbsNodes(const SysfsLayout& layout,
                                                                 NodeInventory* inv) {
  std::map<std::string, VerbsEntry> out;
  const std::string dir = layout.VerbsClassDir();
  auto names = ListDir(dir);
  if (!names.ok()) {
    if (absl::IsNotFound(names.status())) return out;
    return names.status();
  }
  for (const std::string& entry : *names) {
    if (!absl::StartsWith(entry, "uverbs")) continue;  // abi_version
    const std::string base = layout.VerbsNodeDir(entry);
    auto ibdev = ReadTrimmed(base + "/ibdev");
    auto dev = ReadDevNumbers(base + "/dev");
    for (const absl::Status& s : {ibdev.status(), dev.status()}) {
      if (IsTransientReadError(s)) return s;
    }
    if (!ibdev.ok() || !dev.ok()) {
      std::string line = absl::StrCat("ignoring verbs node ", entry, ": ",
                                      (!ibdev.ok() ? ibdev.status() : dev.status()).message());
      LogWarn(Component::kDiscovery, "{}", line);
      inv->warnings.push_back(std::move(line));
      continue;
    }
    if (absl::Status s = CheckExternalName("ibdev", *ibdev, kMaxDeviceName); !s.ok()) {
      Warn(inv, absl::StrCat("ignoring verbs node ", EscapeBytes(entry), ": ", s.message()));
      continue;
    }
    VerbsEntry v{CharDevice{absl::StrCat("infiniband/", entry), dev->first, dev->second}, base};
    if (!out.emplace(*ibdev, v).second) {
      std::string line = absl::StrCat("ignoring verbs node ", entry, ": ibdev ", *ibdev,
                                      " already has ", out[*ibdev].node.rel_path);
      LogWarn(Component::kDiscovery, "{}", line);
      inv->warnings.push_back(std::move(line));
    }
  }
  return out;
}

// A number that ReadInt took but that does not fit the field: as malformed as
// a word, never wrapped into a plausible value.
absl::Status OutOfRange(const std::string& path, int64_t value) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": out of range: ", QuoteContent(absl::StrCat(value))));
}

// The PCIe root complex ("pci0000:10") a PCI function sits under: the first
// component of its real path below <sysfs>/devices, as Kubernetes'
// deviceattribute helper defines resource.kubernetes.io/pcieRoot (so a GPU
// driver using it publishes the same value). "" when the path does not lead
// there or the component is not "pci<domain>:<bus>" (e.g. a Hyper-V VMBus).
std::string PcieRootOf(const std::string& function_dir, const std::string& devices_dir) {
  static const std::regex kRoot("^pci[0-9a-fA-F]{4,}:[0-9a-fA-F]{2}$");
  if (devices_dir.empty() || !absl::StartsWith(function_dir, devices_dir + "/")) return "";
  const std::string rest = function_dir.substr(devices_dir.size() + 1);
  const std::string first = rest.substr(0, rest.find('/'));
  return std::regex_match(first, kRoot) ? first : "";
}

// The real path of <sysfs>/devices, which PCI functions resolve into; "" when
// it cannot be resolved (then no device gets a PCIe root).
std::string DevicesDir(const SysfsLayout& layout) {
  auto dir = RealPath(layout.root() + "/devices");
  return dir.ok() ? *dir : "";
}

// The PCI function behind an IB device: the `device` link's target, or (for
// auxiliary devices such as mlx5 SFs) its nearest PCI ancestor.
absl::StatusOr<std::optional<PciInfo>> ReadPci(const std::string& link,
                                               const std::string& devices_dir) {
  auto target = RealPath(link);
  if (!target.ok()) {
    if (IsTransientReadError(target.status())) return target.status();
    return std::optional<PciInfo>();  // soft device: no parent
  }
  std::string dir = *target;
  while (!dir.empty() && dir != "/" && !LooksLikeBdf(Basename(dir))) {
    dir = dir.substr(0, dir.rfind('/'));
  }
  if (dir.empty() || dir == "/") return std::optional<PciInfo>();
  PciInfo pci;
  pci.address = Basename(dir);
  pci.pcie_root = PcieRootOf(dir, devices_dir);
  auto vendor = ReadHex(dir + "/vendor");
  if (!vendor.ok()) return vendor.status();
  auto device = ReadHex(dir + "/device");
  if (!device.ok()) return device.status();
  pci.vendor = *vendor;
  pci.device = *device;
  if (PathExists(dir + "/numa_node")) {
    auto numa = ReadInt(dir + "/numa_node");
    if (!numa.ok()) return numa.status();
    if (*numa > INT_MAX) return OutOfRange(dir + "/numa_node", *numa);
    pci.numa_node = *numa < 0 ? -1 : static_cast<int>(*numa);
  }
  if (auto driver = ReadLink(dir + "/driver"); driver.ok()) pci.driver = Basename(*driver);
  if (auto physfn = ReadLink(dir + "/physfn"); physfn.ok()) pci.physfn = Basename(*physfn);
  if (PathExists(dir + "/sriov_numvfs")) {
    auto numvfs = ReadInt(dir + "/sriov_numvfs");
    if (!numvfs.ok()) return numvfs.status();
    if (*numvfs < 0 || *numvfs > INT_MAX) return OutOfRange(dir + "/sriov_numvfs", *numvfs);
    pci.sriov_numvfs = static_cast<int>(*numvfs);
  }
  return std::optional<PciInfo>(pci);
}

absl::StatusOr<std::vector<std::string>> PciNetdevs(const std::string& pci_link) {
  auto names = ListDir(pci_link + "/net");
  if (!names.ok()) {
    if (IsTransientReadError(names.status())) return names.status();
    return std::vector<std::string>();
  }
  return *names;
}

// An optional attribute: absent or unreadable for a permanent reason is "",
// a transient failure (EMFILE, ENOMEM...) fails the pass.
absl::Status ReadOptional(const std::string& path, std::string* out) {
  auto v = ReadTrimmed(path);
  if (v.ok()) {
    *out = *v;
    return absl::OkStatus();
  }
  return IsTransientReadError(v.status()) ? v.status() : absl::OkStatus();
}

absl::StatusOr<PortInfo> ReadPort(const std::string& port_dir, int number) {
  PortInfo p;
  p.number = number;
  for (auto [file, code, name] : {std::tuple{"state", &p.state_code, &p.state},
                                  std::tuple{"phys_state", &p.phys_state_code, &p.phys_state}}) {
    const std::string path = absl::StrCat(port_dir, "/", file);
    auto text = ReadTrimmed(path);
    if (!text.ok()) return text.status();
    if (!ParseNumberedState(*text, code, name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": expected '<n>: <NAME>', got ", QuoteContent(*text)));
    }
  }
  for (auto [file, out] : {std::pair{"/link_layer", &p.link_layer}, std::pair{"/rate", &p.rate},
                           // EFA and IB have no netdev: the kernel answers EINVAL.
                           std::pair{"/gid_attrs/ndevs/0", &p.netdev}}) {
    if (absl::Status s = ReadOptional(port_dir + file, out); !s.ok()) return s;
  }
  return p;
}

}  // namespace

bool ParseNumberedState(const std::string& text, int* code, std::string* name) {
  size_t colon = text.find(':');
  if (colon == std::string::npos) return false;
  int value;
  if (!absl::SimpleAtoi(text.substr(0, colon), &value)) return false;
  std::string rest(absl::StripAsciiWhitespace(text.substr(colon + 1)));
  if (rest.empty()) return false;
  *code = value;
  *name = rest;
  return true;
}

bool IsEfa(const PciInfo& pci) {
  if (pci.vendor != kAmazonVendor) return false;
  return pci.driver == "efa" || (pci.device >= 0xefa0 && pci.device <= 0xefa4);
}

absl::StatusOr<NodeInventory> DiscoverNode(const HostPaths& paths) {
  NodeInventory inv;
  Skip skip(&inv);
  const SysfsLayout layout(paths);
  const std::string devices_dir = DevicesDir(layout);
  auto verbs_or = ReadVerbsNodes(layout, &inv);
  if (!verbs_or.ok()) return verbs_or.status();
  const std::map<std::string, VerbsEntry>& verbs = *verbs_or;
  const bool check_dev_nodes = IsDirectory(paths.Dev("infiniband"));

  auto names = ListDir(layout.InfinibandClassDir());
  if (!names.ok()) {
    if (names.status().code() != absl::StatusCode::kNotFound) return names.status();
    names = std::vector<std::string>();
  }
  for (const std::string& name : *names) {
    // The device's name is its ID everywhere: kubelet device IDs, CDI names,
    // metric labels, /v1/node. One that is not valid UTF-8 or holds control
    // characters is not advertised. It is not `skipped` (retried with
    // backoff): it cannot get better until renamed, and a rename changes the
    // listing, which walks again. So: one warning per listing change.
    if (absl::Status s = CheckExternalName("RDMA device name", name, kMaxDeviceName); !s.ok()) {
      Warn(&inv, absl::StrCat("ignoring an RDMA device: ", s.message()));
      continue;
    }
    const std::string dir = layout.DeviceDir(name);
    RdmaDevice dev;
    dev.name = name;
    auto v = verbs.find(name);
    if (v == verbs.end()) {
      skip(name,
           absl::StrCat("no verbs node: no ", layout.VerbsClassDir(), "/uverbs*/ibdev names it"));
      continue;
    }
    dev.uverbs = v->second.node;
    if (check_dev_nodes && !PathExists(paths.Dev(dev.uverbs.rel_path))) {
      skip(name, absl::StrCat("device node ", paths.Dev(dev.uverbs.rel_path), " is missing"));
      continue;
    }
    for (auto [file, out] :
         {std::pair{"/node_type", &dev.node_type}, std::pair{"/node_guid", &dev.node_guid}}) {
      if (absl::Status s = ReadOptional(dir + file, out); !s.ok()) return s;
    }

    auto pci = ReadPci(layout.PciFunctionLink(name), devices_dir);
    if (!pci.ok()) {
      if (IsTransientReadError(pci.status())) return pci.status();
      skip(name, std::string(pci.status().message()));
      continue;
    }
    dev.pci = *pci;
    if (dev.pci) {
      auto nd = PciNetdevs(layout.PciFunctionLink(name));
      if (!nd.ok()) return nd.status();
      dev.netdevs = UsableNetdevs(name, *nd, &inv);
    } else {
      std::string parent;
      if (absl::Status s = ReadOptional(dir + "/parent", &parent); !s.ok()) return s;
      if (!parent.empty()) {
        dev.netdevs = UsableNetdevs(name, {parent}, &inv);  // rxe/siw: the netdev they sit on
      }
    }
    dev.kind = dev.pci && IsEfa(*dev.pci) ? DeviceKind::kEfa : DeviceKind::kRdma;

    auto ports = ListDir(layout.PortsDir(name));
    if (!ports.ok()) {
      if (IsTransientReadError(ports.status())) return ports.status();
      skip(name, std::string(ports.status().message()));
      continue;
    }
    bool port_error = false;
    for (const std::string& port_name : *ports) {
      int number;
      if (!absl::SimpleAtoi(port_name, &number)) continue;
      auto port = ReadPort(layout.PortDir(name, number), number);
      if (!port.ok()) {
        if (IsTransientReadError(port.status())) return port.status();
        skip(name, std::string(port.status().message()));
        port_error = true;
        break;
      }
      if (!port->netdev.empty()) {
        std::vector<std::string> nd = UsableNetdevs(name, {port->netdev}, &inv);
        port->netdev = nd.empty() ? "" : nd[0];
      }
      // The GID table only feeds the engine environment: one that cannot be
      // read leaves the device served, with the reason kept for /v1/node.
      auto gids = gid::ReadGidTable(layout, name, number);
      if (gids.ok()) {
        port->gids = *std::move(gids);
      } else if (IsTransientReadError(gids.status())) {
        return gids.status();
      } else if (!absl::IsNotFound(gids.status())) {
        port->gid_error = std::string(gids.status().message());
        Warn(&inv, absl::StrCat("RDMA device ", name, " port ", number, ": ", port->gid_error));
      }
      dev.ports.push_back(*port);
    }
    if (port_error) continue;
    if (dev.ports.empty()) {
      skip(name, absl::StrCat(dir, "/ports has no port"));
      continue;
    }
    inv.devices.push_back(std::move(dev));
  }

  const std::string cm_dev = layout.RdmaCmDir() + "/dev";
  if (PathExists(cm_dev)) {
    auto numbers = ReadDevNumbers(cm_dev);
    CharDevice cm{"infiniband/rdma_cm", 0, 0};
    if (!numbers.ok()) {
      std::string line = absl::StrCat("ignoring rdma_cm: ", numbers.status().message());
      LogWarn(Component::kDiscovery, "{}", line);
      inv.warnings.push_back(line);
    } else if (check_dev_nodes && !PathExists(paths.Dev(cm.rel_path))) {
      std::string line = absl::StrCat("ignoring rdma_cm: ", paths.Dev(cm.rel_path), " is missing");
      LogWarn(Component::kDiscovery, "{}", line);
      inv.warnings.push_back(line);
    } else {
      cm.major = numbers->first;
      cm.minor = numbers->second;
      inv.rdma_cm = cm;
    }
  }
  return inv;
}

absl::StatusOr<RdmaDevice> DescribeFromVerbsNode(const HostPaths& paths, const std::string& ibdev) {
  const SysfsLayout layout(paths);
  auto names = ListDir(layout.VerbsClassDir());
  if (!names.ok()) return names.status();
  for (const std::string& entry : *names) {
    if (!absl::StartsWith(entry, "uverbs")) continue;
    const std::string base = layout.VerbsNodeDir(entry);
    auto name = ReadTrimmed(base + "/ibdev");
    if (!name.ok() || *name != ibdev) continue;
    auto dev = ReadDevNumbers(base + "/dev");
    if (!dev.ok()) return dev.status();
    RdmaDevice d;
    d.name = ibdev;
    d.uverbs = CharDevice{absl::StrCat("infiniband/", entry), dev->first, dev->second};
    auto pci = ReadPci(base + "/device", DevicesDir(layout));
    if (!pci.ok()) return pci.status();
    d.pci = *pci;
    d.kind = d.pci && IsEfa(*d.pci) ? DeviceKind::kEfa : DeviceKind::kRdma;
    return d;
  }
  return absl::NotFoundError(absl::StrCat("no verbs node names ", ibdev));
}

}  // namespace fabric
