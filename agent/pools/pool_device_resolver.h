// The CNI service's DeviceResolver answered by the pool registry: a
// PodResources (resource, ID) to its RDMA device, exclusive or shared, EFA or
// not. Its own target so the pools do not depend on the CNI service.
#ifndef FABRIC_AGENT_POOLS_POOL_DEVICE_RESOLVER_H_
#define FABRIC_AGENT_POOLS_POOL_DEVICE_RESOLVER_H_

#include <optional>
#include <string>

#include "agent/cni_service/device_resolver.h"
#include "agent/pools/pool_registry.h"

namespace fabric {

class PoolDeviceResolver : public cni_service::DeviceResolver {
 public:
  // `registry` is borrowed and must outlive the resolver.
  explicit PoolDeviceResolver(const PoolRegistry* registry) : registry_(registry) {}

  std::optional<cni_service::GrantedDevice> Resolve(const std::string& resource,
                                                    const std::string& device_id) const override {
    std::optional<ResolvedUnit> u = registry_->Resolve(resource, device_id);
    if (!u) return std::nullopt;
    cni_service::GrantedDevice g;
    g.resource = u->resource;
    g.device_id = u->id;
    g.rdma_device = u->device;
    g.exclusive = u->exclusive;
    g.efa = u->efa;
    return g;
  }

 private:
  const PoolRegistry* registry_;
};

}  // namespace fabric

#endif  // FABRIC_AGENT_POOLS_POOL_DEVICE_RESOLVER_H_
