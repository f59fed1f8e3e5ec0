// DevicePreparer: what a prepared claim means on this node (the CDI specs of
// its devices), behind an interface so the gRPC layer knows nothing of pools
// or CDI. The lead's real one sits on the CDI writer; tests use the fake.
#ifndef FABRIC_PLUGIN_DRA_DEVICE_PREPARER_H_
#define FABRIC_PLUGIN_DRA_DEVICE_PREPARER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fabric::dra {

class DevicePreparer {
 public:
  virtual ~DevicePreparer() = default;
  // Makes the claim's devices usable (writes their CDI specs) and returns the
  // fully qualified CDI device ids of each given device name, in the same
  // order: the device's own, then any the whole claim shares (its engine
  // environment). `device_names` are the published (DNS label) names of our
  // pool. Must be idempotent: after a crash between Prepare and the
  // checkpoint, the same claim is prepared again.
  virtual absl::StatusOr<std::vector<std::vector<std::string>>> Prepare(
      const std::string& claim_uid, const std::vector<std::string>& device_names) = 0;
  // Undoes Prepare. An unknown claim is OK (nothing to undo).
  virtual absl::Status Unprepare(const std::string& claim_uid) = 0;
};

}  // namespace fabric::dra

#endif  // FABRIC_PLUGIN_DRA_DEVICE_PREPARER_H_
