// Agent: the composition root. Loads the config, discovers the node, builds a
// PoolState per configured pool and serves them through the PluginManager;
// health and hot-plug changes flow in through OnNodeChanged().
#ifndef FABRIC_AGENT_DAEMON_AGENT_H_
#define FABRIC_AGENT_DAEMON_AGENT_H_

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "agent/base/host_paths.h"
#include "agent/cdi/cdi_spec_writer.h"
#include "agent/cni_service/cni_agent_server.h"
#include "agent/cni_service/cni_service.h"
#include "agent/config/config.h"
#include "agent/doctor/doctor.h"
#include "agent/health/health_monitor.h"
#include "agent/metrics/http_server.h"
#include "agent/metrics/metrics.h"
#include "agent/model/device.h"
#include "agent/netns/rdma_netlink.h"
#include "agent/podresources/podresources_client.h"
#include "plugin/deviceplugin/plugin_manager.h"
#include "plugin/deviceplugin/pool_state.h"

namespace fabric {

struct AgentOptions {
  std::string config_path;  // empty: DefaultConfig()
  HostPaths paths = HostPaths::Defaults();
  RegistrationMode registration = RegistrationMode::kAuto;
  std::string metrics_address;  // "host:port"; empty disables HTTP
  absl::Duration metrics_cache = absl::Seconds(1);
  // How often PodResources is listed (also right after each Allocate).
  absl::Duration podresources_interval = absl::Seconds(2);
  bool write_cdi = false;         // write CDI specs into paths.cdi_dir
  bool cdi_devices = false;       // Allocate also returns cdi_devices names
  std::string memlock_hook_path;  // host path of fabric-memlock-hook; empty: no hook
  std::string memlock_limit = "unlimited";
  std::string nfd_features_file;  // NFD local feature file; empty: not written
  std::string agent_socket;       // CNI agent socket; empty: the CNI part is off
  doctor::DoctorOptions doctor;   // the fabric doctor (--doctor*); off by default
};

// The node as the agent last saw it: discovered devices (including removed
// ones kept Unhealthy) and their health.
struct NodeView {
  NodeInventory inventory;
  std::map<std::string, RdmaDevice> known;  // every device ever seen, by name
  std::map<std::string, DeviceHealth> health;
};

class Agent : public cni_service::DeviceResolver {
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

  // Re-reads PodResources now: who holds what, allocated counts, and the
  // exclusive/shared conflict withdrawal. Returns false if it could not.
  bool RefreshAllocations();

  // The HTTP views.
  std::string MetricsText() const;
  std::string NotReadyReason() const;
  std::string NodeJson() const;
  std::string PeersJson() const;  // the doctor's /v1/peers
  int metrics_port() const { return http_ ? http_->port() : 0; }

  NodeView node() const;
  std::vector<PodDeviceHold> holds() const;

  // DeviceResolver for the CNI service: a PodResources (resource, ID) to its
  // RDMA device, exclusive or shared, EFA or not.
  std::optional<cni_service::GrantedDevice> Resolve(const std::string& resource,
                                                    const std::string& device_id) const override;
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
  void WriteSideFilesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunAllocationWatcher();

  const AgentOptions options_;
  std::unique_ptr<PluginManager> plugins_;
  std::unique_ptr<HealthMonitor> monitor_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<podresources::PodResourcesClient> podresources_;
  std::unique_ptr<cdi::CdiSpecWriter> cdi_writer_;
  std::thread watcher_;
  std::unique_ptr<netns::RdmaNetlink> rdma_netlink_;
  std::unique_ptr<cni_service::CniService> cni_;
  std::unique_ptr<cni_service::CniAgentServer> cni_server_;
  std::unique_ptr<doctor::Doctor> doctor_;  // null unless --doctor (and it could start)
  std::string doctor_error_;
  mutable std::mutex mu_;
  std::condition_variable watcher_cv_;
  Config config_ ABSL_GUARDED_BY(mu_);
  NodeView node_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<PoolState>> pools_ ABSL_GUARDED_BY(mu_);
  // Devices each pool has ever selected: a removed one stays listed Unhealthy.
  std::map<std::string, std::vector<std::string>> pool_members_ ABSL_GUARDED_BY(mu_);
  // From PodResources: who holds which device, and the units withdrawn
  // because their device is held through a conflicting pool.
  std::vector<PodDeviceHold> holds_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> allocated_units_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::set<std::string>> withdrawn_ ABSL_GUARDED_BY(mu_);
  uint64_t podresources_errors_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_watcher_ ABSL_GUARDED_BY(mu_) = false;
  bool refresh_requested_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace fabric

#endif  // FABRIC_AGENT_DAEMON_AGENT_H_
