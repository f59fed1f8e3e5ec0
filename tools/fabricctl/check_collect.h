// `fabricctl check` fact collection: the only part that touches the system
// (stat/open of device nodes, getrlimit, capget, the environment, fi_getinfo,
// and libibverbs through check_verbs.h).
#ifndef FABRIC_TOOLS_FABRICCTL_CHECK_COLLECT_H_
#define FABRIC_TOOLS_FABRICCTL_CHECK_COLLECT_H_

#include <string>
#include <vector>

#include "tools/fabricctl/check_verdict.h"
#include "tools/fabricctl/cli_args.h"

namespace fabric::fabricctl {

// Device nodes under <dev_root>/infiniband: uverbs*, rdma_cm, umad*, issm*,
// in natural order, each opened with our own open(O_RDWR) (libibverbs hides
// the errno) except issm*, and annotated from <sysfs_root> when readable.
std::vector<DeviceNodeFacts> CollectDeviceNodes(const std::string& dev_root,
                                                const std::string& sysfs_root);
MemlockFacts CollectMemlock();
// MC_GID_INDEX and NCCL_IB_GID_INDEX as this process sees them.
GidEnv CollectGidEnv();
// Every provider/fabric/domain that fi_getinfo(FI_VERSION(1,17)) returns,
// deduplicated; `error` gets the failure text when the call fails.
std::vector<ProviderFacts> CollectProviders(std::string* error);

CheckFacts CollectCheckFacts(const CheckOptions& options);

}  // namespace fabric::fabricctl

#endif  // FABRIC_TOOLS_FABRICCTL_CHECK_COLLECT_H_
