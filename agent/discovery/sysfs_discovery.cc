#include "agent/discovery/sysfs_discovery.h"

#include <map>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "agent/base/file_util.h"
#include "agent/base/logging.h"

namespace fabric {
namespace {

constexpr uint32_t kAmazonVendor = 0x1d0f;

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
  }

 private:
  NodeInventory* inv_;
};

struct VerbsEntry {
  CharDevice node;
  std::string class_entry;
};

// ibdev name -> its uverbs char device, from class/infiniband_verbs/*/{ibdev,dev}.
std::map<std::string, VerbsEntry> ReadVerbsNodes(const HostPaths& paths, NodeInventory* inv) {
  std::map<std::string, VerbsEntry> out;
  const std::string dir = paths.Sys("class/infiniband_verbs");
  auto names = ListDir(dir);
  if (!names.ok()) return out;
  for (const std::string& entry : *names) {
    if (!absl::StartsWith(entry, "uverbs")) continue;  // abi_version
    const std::string base = absl::StrCat(dir, "/", entry);
    auto ibdev = ReadTrimmed(base + "/ibdev");
    auto dev = ReadDevNumbers(base + "/dev");
    if (!ibdev.ok() || !dev.ok()) {
      std::string line = absl::StrCat("ignoring verbs node ", entry, ": ",
                                      (!ibdev.ok() ? ibdev.status() : dev.status()).message());
      LogWarn(Component::kDiscovery, "{}", line);
      inv->warnings.push_back(std::move(line));
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

// The PCI function behind an IB device: the `device` link's target, or (for
// auxiliary devices such as mlx5 SFs) its nearest PCI ancestor.
absl::StatusOr<std::optional<PciInfo>> ReadPci(const std::string& ibdev_dir) {
  const std::string link = ibdev_dir + "/device";
  auto target = RealPath(link);
  if (!target.ok()) return std::optional<PciInfo>();  // soft device: no parent
  std::string dir = *target;
  while (!dir.empty() && dir != "/" && !LooksLikeBdf(Basename(dir))) {
    dir = dir.substr(0, dir.rfind('/'));
  }
  if (dir.empty() || dir == "/") return std::optional<PciInfo>();
  PciInfo pci;
  pci.address = Basename(dir);
  auto vendor = ReadHex(dir + "/vendor");
  if (!vendor.ok()) return vendor.status();
  auto device = ReadHex(dir + "/device");
  if (!device.ok()) return device.status();
  pci.vendor = *vendor;
  pci.device = *device;
  if (PathExists(dir + "/numa_node")) {
    auto numa = ReadInt(dir + "/numa_node");
    if (!numa.ok()) return numa.status();
    pci.numa_node = *numa < 0 ? -1 : static_cast<int>(*numa);
  }
  if (auto driver = ReadLink(dir + "/driver"); driver.ok()) pci.driver = Basename(*driver);
  if (auto physfn = ReadLink(dir + "/physfn"); physfn.ok()) pci.physfn = Basename(*physfn);
  if (PathExists(dir + "/sriov_numvfs")) {
    auto numvfs = ReadInt(dir + "/sriov_numvfs");
    if (!numvfs.ok()) return numvfs.status();
    pci.sriov_numvfs = static_cast<int>(*numvfs);
  }
  return std::optional<PciInfo>(pci);
}

absl::StatusOr<std::vector<std::string>> PciNetdevs(const std::string& ibdev_dir) {
  auto names = ListDir(ibdev_dir + "/device/net");
  if (!names.ok()) return std::vector<std::string>();
  return *names;
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
          absl::StrCat(path, ": expected '<n>: <NAME>', got '", *text, "'"));
    }
  }
  if (auto ll = ReadTrimmed(port_dir + "/link_layer"); ll.ok()) p.link_layer = *ll;
  if (auto rate = ReadTrimmed(port_dir + "/rate"); rate.ok()) p.rate = *rate;
  // EFA and IB have no netdev: the kernel answers EINVAL, fake trees omit it.
  if (auto nd = ReadTrimmed(port_dir + "/gid_attrs/ndevs/0"); nd.ok()) p.netdev = *nd;
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
  const std::map<std::string, VerbsEntry> verbs = ReadVerbsNodes(paths, &inv);
  const bool check_dev_nodes = IsDirectory(paths.Dev("infiniband"));

  const std::string class_dir = paths.Sys("class/infiniband");
  auto names = ListDir(class_dir);
  if (!names.ok()) {
    if (names.status().code() != absl::StatusCode::kNotFound) return names.status();
    names = std::vector<std::string>();
  }
  for (const std::string& name : *names) {
    const std::string dir = absl::StrCat(class_dir, "/", name);
    RdmaDevice dev;
    dev.name = name;
    auto v = verbs.find(name);
    if (v == verbs.end()) {
      skip(name, absl::StrCat("no verbs node: no ", paths.Sys("class/infiniband_verbs"),
                              "/uverbs*/ibdev names it"));
      continue;
    }
    dev.uverbs = v->second.node;
    if (check_dev_nodes && !PathExists(paths.Dev(dev.uverbs.rel_path))) {
      skip(name, absl::StrCat("device node ", paths.Dev(dev.uverbs.rel_path), " is missing"));
      continue;
    }
    if (auto nt = ReadTrimmed(dir + "/node_type"); nt.ok()) dev.node_type = *nt;
    if (auto guid = ReadTrimmed(dir + "/node_guid"); guid.ok()) dev.node_guid = *guid;

    auto pci = ReadPci(dir);
    if (!pci.ok()) {
      skip(name, std::string(pci.status().message()));
      continue;
    }
    dev.pci = *pci;
    if (dev.pci) {
      auto nd = PciNetdevs(dir);
      if (nd.ok()) dev.netdevs = *nd;
    } else if (auto parent = ReadTrimmed(dir + "/parent"); parent.ok() && !parent->empty()) {
      dev.netdevs.push_back(*parent);  // rxe/siw: the netdev they sit on
    }
    dev.kind = dev.pci && IsEfa(*dev.pci) ? DeviceKind::kEfa : DeviceKind::kRdma;

    auto ports = ListDir(dir + "/ports");
    if (!ports.ok()) {
      skip(name, std::string(ports.status().message()));
      continue;
    }
    bool port_error = false;
    for (const std::string& port_name : *ports) {
      int number;
      if (!absl::SimpleAtoi(port_name, &number)) continue;
      auto port = ReadPort(absl::StrCat(dir, "/ports/", port_name), number);
      if (!port.ok()) {
        skip(name, std::string(port.status().message()));
        port_error = true;
        break;
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

  const std::string cm_dev = paths.Sys("class/misc/rdma_cm/dev");
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

}  // namespace fabric
