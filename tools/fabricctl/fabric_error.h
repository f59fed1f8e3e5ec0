// libfabric's negative -FI_E* return codes as absl::Status. Here, not in
// agent/base, so that only fabricctl links libfabric: its shared object maps a
// dozen provider libraries (psm2, verbs, libnl, ...) into any process that
// needs one symbol from it, about 1.5 MiB of the agent's RSS.
#ifndef FABRIC_TOOLS_FABRICCTL_FABRIC_ERROR_H_
#define FABRIC_TOOLS_FABRICCTL_FABRIC_ERROR_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace fabric {

// Status for a libfabric return code (negative -FI_E*), message carries fi_strerror.
absl::Status FabricError(int fi_ret, absl::string_view op);

}  // namespace fabric

#endif  // FABRIC_TOOLS_FABRICCTL_FABRIC_ERROR_H_
