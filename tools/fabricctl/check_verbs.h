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
// whether `dev_root` is the /dev libibverbs opens.
FabricRun CollectFabric(const std::vector<DeviceNodeFacts>& nodes, const std::string& dev_root,
                        uint64_t mr_size);

}  // namespace fabric::fabricctl

#endif  // FABRIC_TOOLS_FABRICCTL_CHECK_VERBS_H_
