#include "agent/model/device.h"

namespace fabric {

std::string_view DeviceKindName(DeviceKind k) { return k == DeviceKind::kEfa ? "efa" : "rdma"; }

std::string RdmaDevice::PrimaryNetdev() const {
  for (const PortInfo& p : ports) {
    if (!p.netdev.empty()) return p.netdev;
  }
  return netdevs.empty() ? "" : netdevs.front();
}

const RdmaDevice* NodeInventory::Find(const std::string& name) const {
  for (const RdmaDevice& d : devices) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

}  // namespace fabric
