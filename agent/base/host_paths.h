// HostPaths: every host location the agent touches, injected so that tests run
// on fake trees. Only host_paths.cc knows the real defaults.
#ifndef FABRIC_AGENT_BASE_HOST_PATHS_H_
#define FABRIC_AGENT_BASE_HOST_PATHS_H_

#include <string>

namespace fabric {

struct HostPaths {
  std::string sysfs_root;    // "/sys" on a real node.
  std::string dev_root;      // "/dev": where device nodes are looked up.
  std::string kubelet_root;  // "/var/lib/kubelet".
  std::string cdi_dir;       // "/var/run/cdi".
  std::string state_dir;     // "/var/lib/fabric-agent": durable agent state.

  // The defaults for a real node.
  static HostPaths Defaults();

  std::string Sys(const std::string& rel) const { return sysfs_root + "/" + rel; }
  std::string Dev(const std::string& rel) const { return dev_root + "/" + rel; }
  std::string DevicePluginDir() const { return kubelet_root + "/device-plugins"; }
  std::string PluginsRegistryDir() const { return kubelet_root + "/plugins_registry"; }
  std::string PodResourcesSocket() const { return kubelet_root + "/pod-resources/kubelet.sock"; }
};

// The path a container (and the kubelet, which runs on the host) uses for a
// device node, independent of where this process sees /dev: "/dev/" + rel.
std::string HostDevicePath(const std::string& rel);

}  // namespace fabric

#endif  // FABRIC_AGENT_BASE_HOST_PATHS_H_
