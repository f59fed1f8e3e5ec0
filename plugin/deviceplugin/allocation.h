// The device-plugin decisions as pure functions over a PoolSnapshot, so they
// are unit-tested without gRPC: what a container gets for granted IDs, and
// which IDs we prefer when the kubelet has a choice.
#ifndef FABRIC_PLUGIN_DEVICEPLUGIN_ALLOCATION_H_
#define FABRIC_PLUGIN_DEVICEPLUGIN_ALLOCATION_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/engine_env/gid_ledger.h"
#include "agent/pools/pool_snapshot.h"
#include "deviceplugin/v1beta1/api.pb.h"

namespace fabric {

// Env var naming the devices granted for `resource`, e.g.
// "vpc.amazonaws.com/efa" -> "FABRIC_DEVICES_VPC_AMAZONAWS_COM_EFA". One per
// resource so two resources in one container cannot collide.
std::string DevicesEnvName(const std::string& resource);

struct ContainerGrant {
  v1beta1::ContainerAllocateResponse response;
  // Engine variables the pool's presets left out, and why (for the log).
  std::vector<std::string> notes;
  // The GIDs its GID index variables named, per port (the pool's GidLedger).
  std::vector<engine_env::GivenGid> given;
};

// The response for one container: a DeviceSpec ("rw") per distinct granted
// device's verbs node, /dev/infiniband/rdma_cm once when a non-EFA device is
// granted (EFA does not use rdma_cm), the per-resource env, NCCL_IB_HCA for
// RDMA devices, the engine variables of the pool's env presets
// (agent/engine_env; the nccl preset's NCCL_IB_HCA names ports too), and CDI
// names when the snapshot has a cdi_kind. Never a mount.
// kNotFound names an unknown ID; kFailedPrecondition an unhealthy one;
// kInvalidArgument an empty or duplicated request.
absl::StatusOr<ContainerGrant> AllocateContainer(const PoolSnapshot& snap,
                                                 const v1beta1::ContainerAllocateRequest& req);

// The ListAndWatch message for a snapshot: every unit, "Healthy"/"Unhealthy",
// TopologyInfo only when the NUMA node is known (never a default node 0).
std::shared_ptr<const v1beta1::ListAndWatchResponse> MakeDeviceList(const PoolSnapshot& snap);

// Preferred IDs for one container: every must_include ID first; exclusive
// pools then stay on as few NUMA nodes as possible; shared pools spread the
// tokens over distinct devices. Unknown or unhealthy available IDs are ignored.
std::vector<std::string> PreferredAllocation(const PoolSnapshot& snap,
                                             const std::vector<std::string>& available,
                                             const std::vector<std::string>& must_include,
                                             int size);

}  // namespace fabric

#endif  // FABRIC_PLUGIN_DEVICEPLUGIN_ALLOCATION_H_
