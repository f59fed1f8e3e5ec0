// PluginManager: serves every pool on its own socket, registers it with the
// kubelet (classic kubelet.sock Register call or the plugin-watcher socket),
// and re-registers promptly when the kubelet restarts. Event-driven: an inotify
// watch on the kubelet's directories wakes a thread that reconciles.
#ifndef FABRIC_PLUGIN_DEVICEPLUGIN_PLUGIN_MANAGER_H_
#define FABRIC_PLUGIN_DEVICEPLUGIN_PLUGIN_MANAGER_H_

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/base/host_paths.h"
#include "agent/pools/pool_state.h"
#include "plugin/deviceplugin/device_plugin_service.h"

namespace fabric {

enum class RegistrationMode {
  kAuto,     // kubelet.sock if it exists at start, else the watcher dir if it exists
  kKubelet,  // classic Register call on <kubelet-root>/device-plugins/kubelet.sock
  kWatcher,  // a socket in <kubelet-root>/plugins_registry
};
bool ParseRegistrationMode(const std::string& s, RegistrationMode* out);

// What /readyz and the metrics report per pool.
struct RegistrationStatus {
  std::string resource;
  std::string socket;
  std::string mode;  // "kubelet" | "watcher"
  bool registered = false;
  std::string last_error;
  uint64_t registrations = 0;  // successful registrations so far
  absl::Time last_registered;
};

class PluginManager {
 public:
  PluginManager(HostPaths paths, RegistrationMode mode);
  ~PluginManager();

  // Every pool's Allocate asks `check` before it grants (see
  // DevicePluginService::AllocateCheck). Call before AddPool.
  void SetAllocateCheck(DevicePluginService::AllocateCheck check) {
    std::lock_guard<std::mutex> lock(mu_);
    allocate_check_ = std::move(check);
  }

  // Adds a pool (before Start, or live on config reload).
  absl::Status AddPool(std::shared_ptr<PoolState> pool);
  // Stops serving a pool and removes its socket (config reload).
  void RemovePool(const std::string& resource);

  // Serves every pool, registers, and starts the watch thread.
  absl::Status Start();
  // Ends streams, stops servers, removes our sockets. Idempotent.
  void Stop();

  std::vector<RegistrationStatus> Status() const;
  // Kubelet restarts detected (kubelet.sock re-created).
  uint64_t kubelet_restarts() const;
  // Every pool currently registered.
  bool AllRegistered() const;

 private:
  class PoolServer;

  void Run();
  void Reconcile();
  void Wake();
  void AddWatches();
  RegistrationMode EffectiveMode() const;
  std::string SocketPathFor(const PoolState& pool, RegistrationMode mode) const;

  const HostPaths paths_;
  const RegistrationMode requested_mode_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<PoolState>> pools_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<PoolServer>> servers_ ABSL_GUARDED_BY(mu_);
  RegistrationMode mode_ ABSL_GUARDED_BY(mu_) = RegistrationMode::kKubelet;
  uint64_t kubelet_restarts_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t last_kubelet_inode_ ABSL_GUARDED_BY(mu_) = 0;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  DevicePluginService::AllocateCheck allocate_check_ ABSL_GUARDED_BY(mu_);
  int inotify_fd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;
};

}  // namespace fabric

#endif  // FABRIC_PLUGIN_DEVICEPLUGIN_PLUGIN_MANAGER_H_
