// The one place where errno (and positive-errno returns) become absl::Status.
// libfabric's -FI_E* codes: agent/libfabric/fabric_error.h (the agent does not
// link libfabric, whose shared object maps a dozen provider libraries).
#ifndef FABRIC_AGENT_BASE_ERRORS_H_
#define FABRIC_AGENT_BASE_ERRORS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace fabric {

// Status for an errno value, message "<op> <path>: <strerror>".
absl::Status ErrnoError(int errno_value, absl::string_view op, absl::string_view path);

}  // namespace fabric

#endif  // FABRIC_AGENT_BASE_ERRORS_H_
