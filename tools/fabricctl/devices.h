// `fabricctl devices`: the node's EFA/RDMA devices as the agent sees them.
#ifndef FABRIC_TOOLS_FABRICCTL_DEVICES_H_
#define FABRIC_TOOLS_FABRICCTL_DEVICES_H_

#include "tools/fabricctl/cli_args.h"

namespace fabric::fabricctl {

// Prints the table (or -o json) and returns the exit code.
int RunDevices(const DevicesOptions& options);

}  // namespace fabric::fabricctl

#endif  // FABRIC_TOOLS_FABRICCTL_DEVICES_H_
