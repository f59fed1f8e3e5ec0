// `fabricctl check` stages 1-6 through libibverbs (agent/verbs): the only
// part of the check that opens devices. Run per uverbs node the container
// sees; the judgement is check_stages.cc's.
#ifndef FABRIC_TOOLS_FABRICCTL_CHECK_VERBS_H_
#define FABRIC_TOOLS_FABRICCTL_CHECK_VERBS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "tools/fabricctl/check_stages.h"

namespace fabric::fabricctl {

struct DeviceNodeFacts;

struct FabricRun {
  std::vector<FabricDeviceFacts> devices;  // one per uverbs node, in node order
  // Set when stages 2-6 cannot run at all (another --dev-root: libibverbs
  // opens /dev/infiniband only).
  std::string skipped_reason;
};

// `nodes` as CollectDeviceNodes found them (their open(2) results are stage
// 1's first half). `mr_size`: stage 4's registration; `verbs_dev_root`:
// whether `dev_root` is the /dev libibverbs opens. `sysfs_root` names the
// GIDs' netdevs and the devices' own.
FabricRun CollectFabric(const std::vector<DeviceNodeFacts>& nodes, const std::string& dev_root,
                        const std::string& sysfs_root, uint64_t mr_size);

// The name of the netdev a GID entry of `ibdev`'s `port` is on, given the
// interface index ibv_query_gid_table reported for it (0: none); "" when
// it cannot be named. The index is the netdev's in its own network
// namespace, the host's for a Pod with a netns of its own, where the same
// number is another interface (if_indextoname would name it): the name is
// the kernel's own, from gid_attrs/ndevs/<index>, the file the agent reads.
std::string GidNetdevName(const std::string& sysfs_root, const std::string& ibdev, int port,
                          int index, uint32_t ndev_ifindex);

// The device's own netdevs as `sysfs_root` shows them: its PCI function's
// net/* (hidden in a Pod's netns), or rxe's `parent`.
std::vector<std::string> DeviceNetdevs(const std::string& sysfs_root, const std::string& ibdev);

}  // namespace fabric::fabricctl

#endif  // FABRIC_TOOLS_FABRICCTL_CHECK_VERBS_H_
