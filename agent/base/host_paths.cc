#include "agent/base/host_paths.h"

namespace fabric {

HostPaths HostPaths::Defaults() {
  HostPaths p;
  p.sysfs_root = "/sys";
  p.dev_root = "/dev";
  p.kubelet_root = "/var/lib/kubelet";
  p.cdi_dir = "/var/run/cdi";
  p.state_dir = "/var/lib/fabric-agent";
  return p;
}

std::string HostDevicePath(const std::string& rel) { return "/dev/" + rel; }

}  // namespace fabric
