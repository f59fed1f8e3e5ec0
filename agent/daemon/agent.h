// Agent: the composition root. Loads the config, discovers the node, builds a
// PoolState per configured pool and serves them through the PluginManager;
// health and hot-plug changes flow in through OnNodeChanged().
#ifndef FABRIC_AGENT_DAEMON_AGENT_H_
#define FABRIC_AGENT_DAEMON_AGENT_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "agent/base/host_paths.h"
#include "agent/config/config.h"
#include "agent/health/health_monitor.h"
#include "agent/model/device.h"
#include "plugin/deviceplugin/plugin_manager.h"
#include "plugin/deviceplugin/pool_state.h"

namespace fabric {

struct AgentOptions {
  std::string config_path;  // empty: DefaultConfig()
  HostPaths paths = HostPaths::Defaults();
  RegistrationMode registration = RegistrationMode::kAuto;
  std::string metrics_address;  // "host:port"; empty disables HTTP
};

// The node as the agent last saw it: discovered devices (including removed
// ones kept Unhealthy) and their health.
struct NodeView {
  NodeInventory inventory;
  std::map<std::string, RdmaDevice> known;  // every device ever seen, by name
  std::map<std::string, DeviceHealth> health;
};

class Agent {
 public:
  explicit Agent(AgentOptions options);
  ~Agent();

  // Loads and validates the config (an error names the key), discovers the
  // node and starts serving. Nothing is registered when the config is bad.
  absl::Status Start();
  void Stop();

  // Re-reads the config file; a bad one is rejected and the old one keeps
  // serving. Unchanged pools keep their servers and streams.
  absl::Status Reload();

  // A new inventory and health view (from the health monitor): every pool's
  // snapshot is rebuilt and changed lists reach the open streams.
  void OnNodeChanged(const NodeInventory& inventory,
                     const std::map<std::string, DeviceHealth>& health);

  NodeView node() const;
  Config config() const;
  std::vector<std::shared_ptr<PoolState>> pools() const;
  PluginManager& plugins() { return *plugins_; }
  HealthMonitor* health_monitor() { return monitor_.get(); }
  const AgentOptions& options() const { return options_; }

 private:
  absl::Status ApplyConfig(const Config& config);
  std::shared_ptr<const PoolSnapshot> BuildPoolSnapshot(const PoolConfig& pool) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void RebuildAllLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const AgentOptions options_;
  std::unique_ptr<PluginManager> plugins_;
  std::unique_ptr<HealthMonitor> monitor_;
  mutable absl::Mutex mu_;
  Config config_ ABSL_GUARDED_BY(mu_);
  NodeView node_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<PoolState>> pools_ ABSL_GUARDED_BY(mu_);
  // Devices each pool has ever selected: a removed one stays listed Unhealthy.
  std::map<std::string, std::vector<std::string>> pool_members_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fabric

#endif  // FABRIC_AGENT_DAEMON_AGENT_H_
