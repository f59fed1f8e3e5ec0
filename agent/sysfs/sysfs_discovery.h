// Node discovery from sysfs: every RDMA device under <sysfs>/class/infiniband
// with its verbs node, PCI parent, ports and netdevs. Plain file reads only
// (no libibverbs), so it works the same on fake trees and on any netns view.
// This is the inventory's walk: the agent calls it only through
// agent/inventory (Inventory), which owns first discovery, rediscovery and
// retries; every path comes from agent/sysfs/sysfs_layout.h.
#ifndef FABRIC_AGENT_SYSFS_SYSFS_DISCOVERY_H_
#define FABRIC_AGENT_SYSFS_SYSFS_DISCOVERY_H_

#include "absl/status/statusor.h"
#include "agent/base/file_util.h"  // IsTransientReadError
#include "agent/base/host_paths.h"
#include "agent/model/device.h"

namespace fabric {

// Walks the sysfs tree under paths.sysfs_root. A device whose verbs node is
// missing or whose files are malformed is skipped, named in
// NodeInventory::skipped and reported in NodeInventory::warnings (one line
// naming the file, quoting at most 64 bytes of it); the rest continues.
// When <dev_root>/infiniband exists, a device whose /dev node is absent there
// is skipped too (the runtime would fail to create any container granted it);
// when it does not exist (agent without /dev mounted) nodes are not checked.
// A node without any RDMA device yields an empty inventory, not an error.
// An error is returned when the pass cannot be trusted: a class directory
// that exists but cannot be listed, or a transient read failure
// (IsTransientReadError) on any device. Callers keep their last good view.
absl::StatusOr<NodeInventory> DiscoverNode(const HostPaths& paths);

// What the host still sees of a device moved out of its netns (exclusive RDMA
// netns mode): class/infiniband/<ibdev> is gone, but its verbs node (not
// netns-tagged) and PCI function remain. Ports and netdevs are not known.
// kNotFound when no verbs node names `ibdev`.
absl::StatusOr<RdmaDevice> DescribeFromVerbsNode(const HostPaths& paths, const std::string& ibdev);

// True for an Amazon (0x1d0f) function bound to the efa driver or carrying an
// EFA device id (0xefa0-0xefa4). Never decided by name: p6-b200 mixes EFA
// `rdmap*` with mlx5 `ibp*` devices.
bool IsEfa(const PciInfo& pci);

// Parses "<n>: <NAME>" as written for port state/phys_state.
bool ParseNumberedState(const std::string& text, int* code, std::string* name);

}  // namespace fabric

#endif  // FABRIC_AGENT_SYSFS_SYSFS_DISCOVERY_H_
