// Node discovery from sysfs: every RDMA device under <sysfs>/class/infiniband
// with its verbs node, PCI parent, ports and netdevs. Plain file reads only
// (no libibverbs), so it works the same on fake trees and on any netns view.
#ifndef FABRIC_AGENT_DISCOVERY_SYSFS_DISCOVERY_H_
#define FABRIC_AGENT_DISCOVERY_SYSFS_DISCOVERY_H_

#include "absl/status/statusor.h"
#include "agent/base/host_paths.h"
#include "agent/model/device.h"

namespace fabric {

// Walks the sysfs tree under paths.sysfs_root. A device whose verbs node is
// missing or whose files are malformed is skipped and reported in
// NodeInventory::warnings (one line naming the file); the rest continues.
// When <dev_root>/infiniband exists, a device whose /dev node is absent there
// is skipped too (the runtime would fail to create any container granted it);
// when it does not exist (agent without /dev mounted) nodes are not checked.
// A node without any RDMA device yields an empty inventory, not an error.
absl::StatusOr<NodeInventory> DiscoverNode(const HostPaths& paths);

// True for an Amazon (0x1d0f) function bound to the efa driver or carrying an
// EFA device id (0xefa0-0xefa4). Never decided by name: p6-b200 mixes EFA
// `rdmap*` with mlx5 `ibp*` devices.
bool IsEfa(const PciInfo& pci);

// Parses "<n>: <NAME>" as written for port state/phys_state.
bool ParseNumberedState(const std::string& text, int* code, std::string* name);

}  // namespace fabric

#endif  // FABRIC_AGENT_DISCOVERY_SYSFS_DISCOVERY_H_
