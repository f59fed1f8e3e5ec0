// DeviceResolver: how the CNI service learns what a PodResources device ID
// stands for. The agent daemon implements it from its device pools.
#ifndef FABRIC_AGENT_CNI_SERVICE_DEVICE_RESOLVER_H_
#define FABRIC_AGENT_CNI_SERVICE_DEVICE_RESOLVER_H_

#include <optional>
#include <string>

namespace fabric::cni_service {

struct GrantedDevice {
  std::string resource;
  std::string device_id;
  std::string rdma_device;  // e.g. "mlx5_0", "efa0", "rxe0"
  bool exclusive = true;    // false: a shared token, other Pods use the same device
  bool efa = false;         // EFA cannot change netns (driver lacks disassociate_ucontext)
};

class DeviceResolver {
 public:
  virtual ~DeviceResolver() = default;
  // Maps a (resource, device ID) from PodResources to the underlying RDMA
  // device; nullopt if not ours.
  virtual std::optional<GrantedDevice> Resolve(const std::string& resource,
                                               const std::string& device_id) const = 0;
};

}  // namespace fabric::cni_service

#endif  // FABRIC_AGENT_CNI_SERVICE_DEVICE_RESOLVER_H_
