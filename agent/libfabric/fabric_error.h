// libfabric's negative -FI_E* return codes as absl::Status. Here, not in
// agent/base, so that only what really talks to libfabric (fabricctl, the
// doctor) links it: its shared object maps a dozen provider libraries (psm2,
// verbs, libnl, ...) into any process that needs one symbol from it.
#ifndef FABRIC_AGENT_LIBFABRIC_FABRIC_ERROR_H_
#define FABRIC_AGENT_LIBFABRIC_FABRIC_ERROR_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace fabric {

// Status for a libfabric return code (negative -FI_E*), message carries fi_strerror.
absl::Status FabricError(int fi_ret, absl::string_view op);

}  // namespace fabric

#endif  // FABRIC_AGENT_LIBFABRIC_FABRIC_ERROR_H_
