// The one place where C error conventions become absl::Status: errno (and
// positive-errno returns) and libfabric's negative -FI_E* codes.
#ifndef FABRIC_AGENT_BASE_ERRORS_H_
#define FABRIC_AGENT_BASE_ERRORS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace fabric {

// Status for an errno value, message "<op> <path>: <strerror>".
absl::Status ErrnoError(int errno_value, absl::string_view op, absl::string_view path);

// Status for a libfabric return code (negative -FI_E*), message carries fi_strerror.
absl::Status FabricError(int fi_ret, absl::string_view op);

}  // namespace fabric

#endif  // FABRIC_AGENT_BASE_ERRORS_H_
