// Agent: the composition root, and nothing more. It wires the modules and
// owns their lifecycle:
//   discovery + health (node changes) --> PoolRegistry (agent/pools)
//   PoolRegistry --> the KubeletFront: device-plugin servers (plugin/deviceplugin)
//                    or DRA (fabric-dra); see kubelet_front.h
//                --> SideFileWriter (CDI specs, NFD file; own thread)
//                --> status views (/metrics, /readyz, /v1/node)
//                --> CNI service (through PoolDeviceResolver)
//   the front's holds (PodResources List + kubelet checkpoint, or allocated
//     ResourceClaims) --> PoolRegistry::SetHolds
//   Sampler (every counter file, restrack, /proc; own thread) --> /metrics,
//     health's EFA error counters, the observer (agent/observe)
// The daemon is the only place that knows both plugin/ and the agent modules.
#ifndef FABRIC_AGENT_DAEMON_AGENT_H_
#define FABRIC_AGENT_DAEMON_AGENT_H_

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/base/host_paths.h"
#include "agent/cni_service/cni_agent_server.h"
#include "agent/cni_service/cni_service.h"
#include "agent/config/config.h"
#include "agent/daemon/device_plugin_front.h"
#include "agent/daemon/kubelet_front.h"
#include "agent/daemon/side_files.h"
#include "agent/doctor/doctor.h"
#include "agent/health/health_monitor.h"
#include "agent/holds/holds_watcher.h"
#include "agent/inventory/inventory.h"
#include "agent/kubeapi/kube_config.h"
#include "agent/metrics/http_server.h"
#include "agent/metrics/metrics.h"
#include "agent/model/device.h"
#include "agent/netns/rdma_netlink.h"
#include "agent/observe/observer.h"
#include "agent/podconditions/controller.h"
#include "agent/podprocs/pod_processes.h"
#include "agent/podresources/podresources_client.h"
#include "agent/podsapi/authorizer.h"
#include "agent/podsapi/tls_server.h"
#include "agent/pools/pool_device_resolver.h"
#include "agent/pools/pool_registry.h"
#include "agent/restrack/rdma_resources.h"
#include "agent/sampler/sampler.h"
#include "agent/status/node_status.h"
#include "plugin/deviceplugin/plugin_manager.h"

namespace fabric {

struct FrontContext;

struct AgentOptions {
  std::string config_path;  // empty: DefaultConfig()
  HostPaths paths = HostPaths::Defaults();
  RegistrationMode registration = RegistrationMode::kAuto;
  std::string metrics_address;  // "host:port"; empty disables HTTP
  absl::Duration metrics_cache = absl::Seconds(1);
  // How often PodResources is listed (also right after each Allocate).
  absl::Duration podresources_interval = absl::Seconds(2);
  // How long an Allocate's grant withdraws its device from conflicting pools
  // before PodResources confirms it (see PoolRegistryOptions::grant_ttl).
  absl::Duration grant_ttl = absl::Seconds(60);
  // How long every hold is kept after a kubelet restart, and how long a
  // failing PodResources List keeps them (see holds::HoldsWatcherOptions).
  absl::Duration kubelet_restart_settle = absl::Seconds(30);
  absl::Duration list_failure_bound = absl::Minutes(5);
  bool write_cdi = false;         // write CDI specs into paths.cdi_dir
  bool cdi_devices = false;       // Allocate also returns cdi_devices names
  std::string memlock_hook_path;  // host path of fabric-memlock-hook; empty: no hook
  std::string memlock_limit = "unlimited";
  std::string nfd_features_file;  // NFD local feature file; empty: not written
  std::string agent_socket;       // CNI agent socket; empty: the CNI part is off
  doctor::DoctorOptions doctor;   // the fabric doctor (--doctor*); off by default
  // How often the sampler reads every counter file (and, with observe, the
  // RDMA resources and Pods' processes): /metrics and health show values at
  // most this old.
  absl::Duration sample_period = absl::Seconds(5);
  // --observe: who owns which fabric resources (RDMA netlink) and each Pod's
  // own network bytes (/proc under paths.proc_root). Off: every Pod's verdict
  // is unknown, "observation is off".
  bool observe = false;
  // The byte floor of the transport verdicts (docs/observe.md).
  uint64_t observe_floor_bytes = observe::kDefaultFloorBytes;
  // "<containerd|cri-o>=<dir>": where the runtimes keep containers' OCI
  // configs (Pod and container names); empty: their default locations.
  std::vector<std::string> runtime_state_dirs;
  // --pod-conditions (needs observe): keep the fabric.gpustack.ai/ conditions
  // and Events of this node's Pods in the API server (agent/podconditions),
  // through `kube` as `node_name`. The writer's timing is in `conditions`.
  bool pod_conditions = false;
  std::string node_name;
  kubeapi::KubeConfig kube;
  podconditions::WriterOptions conditions;
  // /v1/pods over TLS (needs observe): "host:port", and the PEM files the
  // chart mounts from a Secret; each request's token and access are reviewed
  // through `kube`. Empty: /v1/pods only on the plain port, to loopback.
  std::string pods_tls_address;
  std::string pods_tls_cert_file, pods_tls_key_file;
  // The audience a Pod's token must be issued for, and whether a token for
  // the API server's own audience passes too (podsapi::AuthorizerOptions).
  std::string pods_token_audience = podsapi::kDefaultPodsTokenAudience;
  bool pods_accept_apiserver_tokens = false;
  // Tests: the sources observe uses instead of netlink and /proc (borrowed).
  restrack::ResourceSource* resource_source = nullptr;
  podprocs::ProcSource* proc_source = nullptr;
  // Which front this is ("device-plugin", "dra"): the serving lock's note.
  std::string front_name = "device-plugin";
  // The front that serves the pools; unset: the device-plugin front. Called
  // once, in the constructor.
  std::function<std::unique_ptr<KubeletFront>(const FrontContext&)> make_front;
};

// What a front may use; all outlive it.
struct FrontContext {
  const AgentOptions* options = nullptr;
  PoolRegistry* registry = nullptr;
  SideFileWriter* side_files = nullptr;
  status::ReadinessReasons* readiness = nullptr;
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

  // The entry point for node changes: a new inventory and health view. Every
  // pool's snapshot is rebuilt and changed lists reach the open streams.
  void OnNodeChanged(const NodeInventory& inventory,
                     const std::map<std::string, DeviceHealth>& health);

  // Observes the kubelet now (PodResources List + checkpoint): who holds
  // what, allocated counts, and the exclusive/shared conflict withdrawal.
  void RefreshAllocations() { front_->RefreshHolds(); }
  holds::HoldsStatus holds_status() const { return front_->holds_status(); }

  // The HTTP views.
  std::string MetricsText() const;
  // /readyz: runs on the HTTP event loop, so it must stay cheap and never
  // block: registrations (short locks) plus readiness() reasons.
  std::string NotReadyReason() const;
  // Where other parts report why the agent is not ready (see
  // status::ReadinessReasons); /readyz answers 503 while any is set.
  status::ReadinessReasons& readiness() { return readiness_; }
  std::string NodeJson() const;
  std::string PeersJson() const;  // the doctor's /v1/peers
  int metrics_port() const { return http_ ? http_->port() : 0; }
  int pods_tls_port() const { return pods_tls_ ? pods_tls_->port() : 0; }

  NodeView node() const { return registry_->node(); }
  std::vector<PodDeviceHold> holds() const { return registry_->holds(); }
  // What the CNI service asks: a PodResources (resource, ID) to its device.
  std::optional<cni_service::GrantedDevice> Resolve(const std::string& resource,
                                                    const std::string& device_id) const {
    return resolver_.Resolve(resource, device_id);
  }
  Config config() const { return registry_->config(); }
  std::vector<std::shared_ptr<PoolState>> pools() const { return registry_->pools(); }
  PoolRegistry& registry() { return *registry_; }
  // The device-plugin front's servers (the default front; tests).
  PluginManager& plugins() { return device_plugins_->plugins(); }
  KubeletFront& front() { return *front_; }
  HealthMonitor* health_monitor() { return monitor_.get(); }
  // The one reader of counter files (null before Start). The observer's
  // samples come from it (Sampler::OnSample, set before the first period).
  sampler::Sampler* sampler() { return sampler_.get(); }
  const AgentOptions& options() const { return options_; }

 private:
  absl::Status ApplyConfig(const Config& config);
  status::StatusInput StatusNow() const;
  absl::Status StartSampler();
  absl::Status StartPodConditions();
  absl::Status StartPodsTls();
  // What the sampler records each round: every hold with its pool's mode.
  std::vector<sampler::Grant> Grants() const;
  void ReconcileCniIfDue();

  const AgentOptions options_;
  // Declared first: outlives the servers, writers and views that use it.
  std::unique_ptr<PoolRegistry> registry_;
  PoolDeviceResolver resolver_{registry_.get()};
  std::unique_ptr<SideFileWriter> side_files_;
  status::ReadinessReasons readiness_;  // read by /readyz on the HTTP loop
  std::unique_ptr<KubeletFront> front_;
  DevicePluginFront* device_plugins_ = nullptr;  // front_, when it is the device-plugin one
  std::unique_ptr<AttachmentSource> attachments_;
  std::unique_ptr<Inventory> inventory_;  // publishes device lists into monitor_
  std::unique_ptr<HealthMonitor> monitor_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<podresources::PodResourcesClient> cni_podresources_;  // Get for one Pod
  std::unique_ptr<netns::RdmaNetlink> rdma_netlink_;
  std::unique_ptr<cni_service::CniService> cni_;
  std::unique_ptr<cni_service::CniAgentServer> cni_server_;
  absl::Time last_cni_reconcile_ = MonotonicNow();  // the holds thread's only
  std::unique_ptr<doctor::Doctor> doctor_;          // null unless --doctor (and it could start)
  std::string doctor_error_;
  // Observation's sources when the agent opened them (--observe).
  std::unique_ptr<restrack::ResourceSource> owned_resources_;
  std::unique_ptr<podprocs::ProcSource> owned_procs_;
  // The transport verdicts (/v1/pods, fabric_pod_transport): fed by the
  // sampler's hook, so it outlives the sampler.
  std::unique_ptr<observe::TransportObserver> observer_;
  // --pod-conditions: poked from the sampler's hook, so it outlives the sampler.
  std::unique_ptr<podconditions::PodConditionsController> conditions_;
  // --pods-tls-address: the reviews' client, the authorizer and the listener.
  std::unique_ptr<kubeapi::KubeClient> pods_client_;
  std::unique_ptr<podsapi::PodsAuthorizer> pods_authorizer_;
  std::unique_ptr<podsapi::TlsServer> pods_tls_;
  // Declared after everything its callbacks read: destroyed (stopped) first.
  std::unique_ptr<sampler::Sampler> sampler_;
};

}  // namespace fabric

#endif  // FABRIC_AGENT_DAEMON_AGENT_H_
