// The kernel's RDMA resource tracking (restrack): which QPs, CQs, MRs and PDs
// exist on each device, and which process owns each. The same data `rdma
// resource show` prints, read from the RDMA_NLDEV_CMD_RES_{QP,CQ,MR,PD}_GET
// netlink dumps.
//
// The kernel lists a user resource only when its owner's PID is visible in the
// reader's PID namespace, and kernel-owned resources only to a reader in the
// initial PID namespace; no capability is needed for the fields used here.
#ifndef FABRIC_AGENT_RESTRACK_RDMA_RESOURCES_H_
#define FABRIC_AGENT_RESTRACK_RDMA_RESOURCES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fabric::restrack {

enum class ResourceKind { kQp, kCq, kMr, kPd };
const char* ResourceKindName(ResourceKind kind);  // "qp" | "cq" | "mr" | "pd"

struct RdmaResource {
  ResourceKind kind = ResourceKind::kQp;
  std::string device;  // RDMA device name (RDMA_NLDEV_ATTR_DEV_NAME)
  uint32_t port = 0;   // QPs bound to a port; 0 otherwise
  uint32_t id = 0;     // lqpn / cqn / mrn / pdn
  // The owner: a PID as seen from the reader's PID namespace, or 0 for a
  // kernel-owned resource, which then has kern_name ("ib_core", "rdma_cm").
  uint32_t pid = 0;
  std::string kern_name;
  uint64_t mr_bytes = 0;  // MRs: RDMA_NLDEV_ATTR_RES_MRLEN
  bool operator==(const RdmaResource&) const = default;
};

// The host-access seam: the real one reads netlink, tests give fakes.
class ResourceSource {
 public:
  virtual ~ResourceSource() = default;
  // Every QP, CQ, MR and PD the kernel shows this process, on every device
  // visible from its network namespace. An error names what failed.
  virtual absl::StatusOr<std::vector<RdmaResource>> Dump() = 0;
};

// The real source (NETLINK_RDMA through libmnl), opened per Dump.
std::unique_ptr<ResourceSource> OpenNetlinkResourceSource();

}  // namespace fabric::restrack

#endif  // FABRIC_AGENT_RESTRACK_RDMA_RESOURCES_H_
