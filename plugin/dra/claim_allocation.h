// What the API server says a ResourceClaim was allocated, restricted to our
// driver: the input of NodePrepareResources. The kubelet names only the claim
// (namespace, name, UID); the devices come from the claim's
// status.allocation.devices.results[] (resource.k8s.io/v1).
#ifndef FABRIC_PLUGIN_DRA_CLAIM_ALLOCATION_H_
#define FABRIC_PLUGIN_DRA_CLAIM_ALLOCATION_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "agent/dra/driver_name.h"
#include "nlohmann/json_fwd.hpp"

namespace fabric::dra {

// kDriverName: agent/dra/driver_name.h

// One entry of status.allocation.devices.results[] whose driver is ours.
struct AllocationResult {
  std::string request;  // "req" or "req/subrequest" (prioritized list)
  std::string driver;
  std::string pool;
  std::string device;  // the published (DNS label) device name
  bool operator==(const AllocationResult&) const = default;
};

struct ClaimAllocation {
  std::string claim_namespace;
  std::string name;
  std::string uid;
  std::vector<AllocationResult> results;  // ours only, in the claim's order
};

// The source of allocations. The real one reads the API server (the lead wires
// it on the API client); tests use FakeClaimAllocations.
class ClaimAllocations {
 public:
  virtual ~ClaimAllocations() = default;
  // Called on gRPC threads, possibly concurrently; may block on the network.
  virtual absl::StatusOr<ClaimAllocation> Get(const std::string& claim_namespace,
                                              const std::string& name, const std::string& uid) = 0;
};

// Parses a resource.k8s.io/v1 ResourceClaim (JSON as the API server returns
// it) and keeps the results for `driver`. Errors, each naming the claim:
//  - not JSON, not an object, a field of the wrong type, a name that is not
//    printable UTF-8 or too long, more results than any API server allows
//    (kInvalidArgument);
//  - metadata.uid (or namespace/name) differs from what the kubelet asked
//    for: the claim was deleted and re-created (kFailedPrecondition);
//  - no status.allocation: not allocated (kFailedPrecondition);
//  - a result of ours in a pool other than `node_pool` (our pool is named
//    after the node): allocated for another node (kFailedPrecondition);
//  - no result of ours at all (kFailedPrecondition).
absl::StatusOr<ClaimAllocation> ParseClaimAllocation(
    absl::string_view claim_json, const std::string& claim_namespace, const std::string& name,
    const std::string& uid, absl::string_view driver, absl::string_view node_pool);

// The same for a claim already parsed (a watch event's object); the 4 MiB
// bound is then the watch's own.
absl::StatusOr<ClaimAllocation> ClaimAllocationFromJson(
    const nlohmann::json& claim, const std::string& claim_namespace, const std::string& name,
    const std::string& uid, absl::string_view driver, absl::string_view node_pool);

}  // namespace fabric::dra

#endif  // FABRIC_PLUGIN_DRA_CLAIM_ALLOCATION_H_
