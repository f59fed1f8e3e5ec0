// The vocabulary: what discovery finds on a node. Plain values, no I/O.
// Start here, then agent/sysfs/sysfs_discovery.h.
#ifndef FABRIC_AGENT_MODEL_DEVICE_H_
#define FABRIC_AGENT_MODEL_DEVICE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace fabric {

// EFA is recognised by PCI identity (vendor 0x1d0f + efa driver/device id),
// never by name; everything else with a verbs node is kRdma.
enum class DeviceKind { kEfa, kRdma };
std::string_view DeviceKindName(DeviceKind k);  // "efa" | "rdma"

// A character device node: path relative to /dev (e.g. "infiniband/uverbs3")
// with the numbers the kernel reported in sysfs `dev` (never computed).
struct CharDevice {
  std::string rel_path;
  uint32_t major = 0;
  uint32_t minor = 0;
  bool operator==(const CharDevice&) const = default;
};

struct PciInfo {
  std::string address;   // "0000:10:1b.0"
  uint32_t vendor = 0;   // 0x1d0f
  uint32_t device = 0;   // 0xefa1
  std::string driver;    // "efa", "mlx5_core"; empty when unbound
  int numa_node = -1;    // -1: the platform reports no NUMA affinity
  std::string physfn;    // PF address when this is an SR-IOV VF
  int sriov_numvfs = 0;  // VFs enabled on this PF
  // The PCIe root complex it sits under ("pci0000:10"; SR-IOV VFs share their
  // PF's), from its sysfs path: resource.kubernetes.io/pcieRoot. "" if unknown.
  // Last, so positional initializers of the fields above stay valid.
  std::string pcie_root;
  bool is_vf() const { return !physfn.empty(); }
};

// One populated entry of a port's GID table (ports/<n>/gids/<index>, with
// gid_attrs/types/<index> and gid_attrs/ndevs/<index>). Empty entries, which
// the kernel prints as an all-zero GID, are not kept.
enum class GidType { kIbRoceV1, kRoceV2, kOther };  // "IB/RoCE v1" | "RoCE v2" | else
std::string_view GidTypeName(GidType t);            // as the kernel prints it ("?" for kOther)
struct GidEntry {
  int index = 0;
  std::string gid;  // as the kernel prints it: eight 4-digit groups, never compressed
  GidType type = GidType::kOther;
  std::string netdev;  // gid_attrs/ndevs/<index>; "" when the kernel names none (IB, EFA)
  bool operator==(const GidEntry&) const = default;
};

struct PortInfo {
  int number = 0;
  int state_code = 0;       // 4 = ACTIVE
  std::string state;        // "ACTIVE"
  int phys_state_code = 0;  // 5 = LinkUp
  std::string phys_state;   // "LinkUp"
  std::string link_layer;   // "InfiniBand" | "Ethernet" | "Unknown"
  std::string rate;         // "100 Gb/sec (4X EDR)"
  std::string netdev;       // RoCE netdev from gid_attrs/ndevs/0, empty if none
  // The populated GID table entries, by index. Kept current by the inventory
  // (agent/sysfs/gid_table reads them) so that Allocate answers from memory.
  std::vector<GidEntry> gids = {};
  std::string gid_error = {};  // why the table could not be read; "" when it was
  bool active() const { return state_code == 4 && phys_state_code == 5; }
};

struct RdmaDevice {
  std::string name;  // ibdev name, e.g. "rdmap79s0", "mlx5_0", "rxe0"
  DeviceKind kind = DeviceKind::kRdma;
  std::string node_type;  // "7: unspecified"
  std::string node_guid;
  std::optional<PciInfo> pci;  // absent for soft devices (rxe)
  CharDevice uverbs;           // infiniband/uverbsN
  std::vector<PortInfo> ports;
  std::vector<std::string> netdevs;  // PCI function's net/* or rxe's parent
  int numa_node() const { return pci ? pci->numa_node : -1; }
  // First non-empty netdev of a port, else of the function, else "".
  std::string PrimaryNetdev() const;
  std::string LinkLayer() const { return ports.empty() ? "" : ports.front().link_layer; }
};

// Why a device is Unhealthy, as a small fixed set: this, not the free-text
// reason, is what metrics label, so a new detail never makes a new series.
enum class HealthCause { kNone, kPortDown, kErrorCounters, kRemoved, kOther };
// "" (kNone), "port_down", "error_counters", "device_removed", "other".
std::string_view HealthCauseName(HealthCause c);

// Health of one device as the agent advertises it.
struct DeviceHealth {
  bool healthy = true;
  std::string reason;  // detail for logs and /v1/node: "port 1 DOWN/Disabled", "device removed"
  HealthCause cause = HealthCause::kNone;  // the bounded form of `reason`
  bool operator==(const DeviceHealth&) const = default;
  // The bounded label for metrics: "" when healthy, "other" if no cause was set.
  std::string_view CauseLabel() const;
};

// Everything found on the node by one discovery pass.
struct NodeInventory {
  std::vector<RdmaDevice> devices;    // sorted by name (natural order)
  std::optional<CharDevice> rdma_cm;  // misc rdma_cm node, when loaded
  std::vector<std::string> warnings;  // one line per skipped device/file
  // Devices present but not listed because a file of theirs could not be
  // read or parsed (each also has a warning): worth another look later.
  std::vector<std::string> skipped;
  // Devices listed although the host sysfs no longer shows them: the CNI part
  // moved them into a Pod's netns (exclusive mode). Device -> "namespace/pod".
  std::map<std::string, std::string> in_pod_netns;

  const RdmaDevice* Find(const std::string& name) const;
};

// One container's hold on one device, as the kubelet reports it (PodResources
// List joined with its checkpoint; deduplicated by device). A hold known only
// from the checkpoint (a Pod the List does not show) has ns and pod empty and
// pod_uid set. Ordered so a list of holds compares by content.
struct PodDeviceHold {
  std::string ns, pod, container, resource, device;
  std::string pod_uid;          // where the checkpoint gave it
  bool init_container = false;  // podresources::PodDevices::init_container
  bool operator==(const PodDeviceHold&) const = default;
  auto operator<=>(const PodDeviceHold&) const = default;
};

}  // namespace fabric

#endif  // FABRIC_AGENT_MODEL_DEVICE_H_
