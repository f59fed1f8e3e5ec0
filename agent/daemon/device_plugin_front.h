// DevicePluginFront: the device-plugin API (one server per pool, plugin/
// deviceplugin) and the holds loop that follows the kubelet through the
// PodResources List and its checkpoint (agent/holds). fabric-agent's front.
#ifndef FABRIC_AGENT_DAEMON_DEVICE_PLUGIN_FRONT_H_
#define FABRIC_AGENT_DAEMON_DEVICE_PLUGIN_FRONT_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "agent/base/host_paths.h"
#include "agent/daemon/kubelet_front.h"
#include "agent/daemon/side_files.h"
#include "agent/holds/holds_watcher.h"
#include "agent/podresources/podresources_client.h"
#include "agent/pools/pool_registry.h"
#include "agent/status/node_status.h"
#include "plugin/deviceplugin/plugin_manager.h"

namespace fabric {

struct DevicePluginFrontOptions {
  HostPaths paths;
  RegistrationMode registration = RegistrationMode::kAuto;
  absl::Duration podresources_interval = absl::Seconds(2);
  absl::Duration kubelet_restart_settle = absl::Seconds(30);
  absl::Duration list_failure_bound = absl::Minutes(5);
  // With --cdi-devices, Allocate names CDI devices: it fails while a pool's
  // spec cannot be written.
  bool cdi_devices = false;
};

class DevicePluginFront : public KubeletFront {
 public:
  // `registry`, `side_files` and `readiness` are borrowed and outlive the
  // front. `after_holds_round` runs on the holds thread after each round.
  DevicePluginFront(DevicePluginFrontOptions options, PoolRegistry* registry,
                    SideFileWriter* side_files, status::ReadinessReasons* readiness,
                    std::function<void()> after_holds_round);
  ~DevicePluginFront() override;

  absl::Status AddPool(std::shared_ptr<PoolState> pool) override;
  void RemovePool(const std::string& resource) override;
  void RefreshHolds() override;
  void OnGrant() override;
  absl::Status Start() override;
  void Stop() override;
  sampler::HoldsState HoldsState() const override;
  holds::HoldsStatus holds_status() const override;
  void FillStatus(status::StatusInput* in) const override;
  std::string NotReadyReason() const override;

  PluginManager& plugins() { return *plugins_; }

 private:
  const DevicePluginFrontOptions options_;
  PoolRegistry* const registry_;
  status::ReadinessReasons* const readiness_;
  std::unique_ptr<PluginManager> plugins_;
  std::unique_ptr<podresources::PodResourcesClient> podresources_;
  std::unique_ptr<holds::HoldsWatcher> holds_;
};

}  // namespace fabric

#endif  // FABRIC_AGENT_DAEMON_DEVICE_PLUGIN_FRONT_H_
