#include "tools/fabricctl/devices.h"

#include <fmt/format.h>

namespace fabric::fabricctl {

// Placeholder until agent/discovery and agent/config land.
int RunDevices(const DevicesOptions& options) {
  fmt::print(stderr, "fabricctl devices: not available in this build yet\n");
  return kExitError;
}

}  // namespace fabric::fabricctl
