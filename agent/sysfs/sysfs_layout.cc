#include "agent/sysfs/sysfs_layout.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace fabric {

std::string SysfsLayout::DeviceDir(const std::string& ibdev) const {
  return absl::StrCat(InfinibandClassDir(), "/", ibdev);
}
std::string SysfsLayout::PciFunctionLink(const std::string& ibdev) const {
  return DeviceDir(ibdev) + "/device";
}
std::string SysfsLayout::DeviceHwCountersDir(const std::string& ibdev) const {
  return DeviceDir(ibdev) + "/hw_counters";
}
std::string SysfsLayout::PortsDir(const std::string& ibdev) const {
  return DeviceDir(ibdev) + "/ports";
}
std::string SysfsLayout::PortDir(const std::string& ibdev, int port) const {
  return absl::StrCat(PortsDir(ibdev), "/", port);
}
std::string SysfsLayout::PortStateFile(const std::string& ibdev, int port) const {
  return PortDir(ibdev, port) + "/state";
}
std::string SysfsLayout::PortPhysStateFile(const std::string& ibdev, int port) const {
  return PortDir(ibdev, port) + "/phys_state";
}
std::string SysfsLayout::PortHwCountersDir(const std::string& ibdev, int port) const {
  return PortDir(ibdev, port) + "/hw_counters";
}
std::string SysfsLayout::PortPmaCountersDir(const std::string& ibdev, int port) const {
  return PortDir(ibdev, port) + "/counters";
}
std::string SysfsLayout::PortGidsDir(const std::string& ibdev, int port) const {
  return PortDir(ibdev, port) + "/gids";
}
std::string SysfsLayout::PortGidTypesDir(const std::string& ibdev, int port) const {
  return PortDir(ibdev, port) + "/gid_attrs/types";
}
std::string SysfsLayout::PortGidNdevsDir(const std::string& ibdev, int port) const {
  return PortDir(ibdev, port) + "/gid_attrs/ndevs";
}

std::string SysfsLayout::ClassDirForDevNode(const std::string& name) const {
  if (name == "rdma_cm") return RdmaCmDir();
  if (absl::StartsWith(name, "uverbs")) return VerbsNodeDir(name);
  if (absl::StartsWith(name, "umad") || absl::StartsWith(name, "issm")) {
    return absl::StrCat(MadClassDir(), "/", name);
  }
  return "";
}

}  // namespace fabric
