// HostPaths: every host location the agent touches, injected so that tests run
// on fake trees. Only host_paths.cc knows the real defaults.
#ifndef FABRIC_AGENT_BASE_HOST_PATHS_H_
#define FABRIC_AGENT_BASE_HOST_PATHS_H_

#include <string>

#include "absl/status/status.h"

namespace fabric {

// The kubelet's device-plugin folder. The kubelet hard-codes it
// (pluginapi.DevicePluginPath): it stays here whatever the kubelet's
// --root-dir says, with kubelet.sock and kubelet_internal_checkpoint in it.
inline constexpr char kKubeletDevicePluginDir[] = "/var/lib/kubelet/device-plugins";
// The kubelet's default --root-dir.
inline constexpr char kDefaultKubeletRoot[] = "/var/lib/kubelet";

struct HostPaths {
  std::string sysfs_root;  // "/sys" on a real node.
  std::string dev_root;    // "/dev": where device nodes are looked up.

  // The kubelet's folders, one setting each, because the kubelet's --root-dir
  // moves only two of them (k0s: /var/lib/k0s/kubelet, MicroK8s:
  // /var/snap/microk8s/common/var/lib/kubelet). Read them through the
  // accessors below; docs/configuration.md "Kubelet paths" has the table.
  //
  // kubelet_root: the kubelet's --root-dir ("/var/lib/kubelet").
  // plugins_registry_dir and pod_resources_socket follow it unless set.
  std::string kubelet_root;
  // Empty: <kubelet_root>/device-plugins, right for the default root and for a
  // fake kubelet that keeps everything under one folder (tests, kubelet-sim).
  // The agent's flags (ApplyKubeletPathFlags) always set it, to
  // /var/lib/kubelet/device-plugins unless --device-plugin-dir says otherwise,
  // so a moved --kubelet-root never moves it.
  std::string device_plugin_dir;
  // Empty: <kubelet_root>/plugins_registry.
  std::string plugins_registry_dir;
  // Empty: <kubelet_root>/pod-resources/kubelet.sock.
  std::string pod_resources_socket;

  std::string cdi_dir;    // "/var/run/cdi".
  std::string state_dir;  // "/var/lib/fabric-agent": durable agent state.
  // "/proc": the host's processes (the agent runs in the host PID namespace
  // to map RDMA resource owners to Pods, agent/podprocs).
  std::string proc_root;

  // The defaults for a real node. Setting only kubelet_root afterwards moves
  // all three kubelet folders (a fake tree); a real node's paths come from
  // ApplyKubeletPathFlags.
  static HostPaths Defaults();

  std::string Sys(const std::string& rel) const { return sysfs_root + "/" + rel; }
  std::string Dev(const std::string& rel) const { return dev_root + "/" + rel; }
  // Where the kubelet's kubelet.sock and kubelet_internal_checkpoint are, and
  // the agent's sockets in classic (kubelet) registration mode.
  std::string DevicePluginDir() const;
  // The kubelet's plugin watcher folder (watcher registration mode).
  std::string PluginsRegistryDir() const;
  // The kubelet's PodResources API socket.
  std::string PodResourcesSocket() const;
  // The kubelet's device-manager checkpoint (in DevicePluginDir()).
  std::string KubeletCheckpoint() const {
    return DevicePluginDir() + "/kubelet_internal_checkpoint";
  }
};

// The agent's kubelet path flags as given; empty means "not given".
struct KubeletPathFlags {
  std::string kubelet_root;          // --kubelet-root
  std::string device_plugin_dir;     // --device-plugin-dir
  std::string plugins_registry_dir;  // --plugins-registry-dir
  std::string pod_resources_socket;  // --pod-resources-socket
};

// Resolves the flags into `paths` the way the kubelet lays its folders out:
// --kubelet-root (default /var/lib/kubelet) places plugins_registry/ and
// pod-resources/kubelet.sock; the device-plugin folder stays
// /var/lib/kubelet/device-plugins unless --device-plugin-dir says otherwise.
// Each explicit flag wins. InvalidArgument for a relative path.
absl::Status ApplyKubeletPathFlags(const KubeletPathFlags& flags, HostPaths* paths);

// The path a container (and the kubelet, which runs on the host) uses for a
// device node, independent of where this process sees /dev: "/dev/" + rel.
std::string HostDevicePath(const std::string& rel);

}  // namespace fabric

#endif  // FABRIC_AGENT_BASE_HOST_PATHS_H_
