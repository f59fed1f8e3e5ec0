#include "agent/base/host_paths.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace fabric {
namespace {

// "/var/lib/k0s/kubelet/" -> "/var/lib/k0s/kubelet"; "/" stays.
std::string TrimSlash(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

}  // namespace

HostPaths HostPaths::Defaults() {
  HostPaths p;
  p.sysfs_root = "/sys";
  p.dev_root = "/dev";
  p.kubelet_root = kDefaultKubeletRoot;  // device-plugins/ under it: kKubeletDevicePluginDir
  p.cdi_dir = "/var/run/cdi";
  p.state_dir = "/var/lib/fabric-agent";
  p.proc_root = "/proc";
  return p;
}

std::string HostPaths::DevicePluginDir() const {
  return device_plugin_dir.empty() ? kubelet_root + "/device-plugins" : device_plugin_dir;
}

std::string HostPaths::PluginsRegistryDir() const {
  return plugins_registry_dir.empty() ? kubelet_root + "/plugins_registry" : plugins_registry_dir;
}

std::string HostPaths::PodResourcesSocket() const {
  return pod_resources_socket.empty() ? kubelet_root + "/pod-resources/kubelet.sock"
                                      : pod_resources_socket;
}

absl::Status ApplyKubeletPathFlags(const KubeletPathFlags& flags, HostPaths* paths) {
  const std::pair<const char*, const std::string*> given[] = {
      {"--kubelet-root", &flags.kubelet_root},
      {"--device-plugin-dir", &flags.device_plugin_dir},
      {"--plugins-registry-dir", &flags.plugins_registry_dir},
      {"--pod-resources-socket", &flags.pod_resources_socket},
  };
  for (const auto& [name, value] : given) {
    if (!value->empty() && value->front() != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": '", *value, "' is not an absolute path"));
    }
  }
  paths->kubelet_root =
      flags.kubelet_root.empty() ? kDefaultKubeletRoot : TrimSlash(flags.kubelet_root);
  // Not under --kubelet-root: the kubelet never moves this folder.
  paths->device_plugin_dir = flags.device_plugin_dir.empty() ? std::string(kKubeletDevicePluginDir)
                                                             : TrimSlash(flags.device_plugin_dir);
  paths->plugins_registry_dir = TrimSlash(flags.plugins_registry_dir);
  paths->pod_resources_socket = flags.pod_resources_socket;
  return absl::OkStatus();
}

std::string HostDevicePath(const std::string& rel) { return "/dev/" + rel; }

}  // namespace fabric
