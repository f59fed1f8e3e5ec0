#include "agent/model/device.h"

namespace fabric {

std::string_view DeviceKindName(DeviceKind k) { return k == DeviceKind::kEfa ? "efa" : "rdma"; }

std::string_view GidTypeName(GidType t) {
  switch (t) {
    case GidType::kIbRoceV1:
      return "IB/RoCE v1";
    case GidType::kRoceV2:
      return "RoCE v2";
    case GidType::kOther:
      break;
  }
  return "?";
}

std::string_view HealthCauseName(HealthCause c) {
  switch (c) {
    case HealthCause::kNone:
      return "";
    case HealthCause::kPortDown:
      return "port_down";
    case HealthCause::kErrorCounters:
      return "error_counters";
    case HealthCause::kRemoved:
      return "device_removed";
    case HealthCause::kOther:
      break;
  }
  return "other";
}

std::string_view DeviceHealth::CauseLabel() const {
  if (healthy) return "";
  return cause == HealthCause::kNone ? HealthCauseName(HealthCause::kOther)
                                     : HealthCauseName(cause);
}

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
