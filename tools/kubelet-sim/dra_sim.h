// DraKubeletSim: the kubelet's DRA side (pkg/kubelet/cm/dra, 1.34 line)
// towards a DRA driver's kubelet plugin, for tests and the kubelet-sim CLI.
//
//   DraKubeletSim sim("/tmp/k1");      // watches /tmp/k1/plugins_registry
//   sim.Start();
//   sim.WaitFor([&] { return !sim.Drivers().empty(); }, absl::Seconds(5));
//   auto prepared = sim.PrepareResources("fabric.gpustack.ai", {{"ns", "claim", "uid"}});
//
// What it reproduces:
//  - the plugin watcher: sockets under plugins_registry (recursively, dot-names
//    and non-sockets skipped) found once per reconcile period, dial 10 s,
//    GetInfo 1 s, only the DRA handler installed (another type: "no handler
//    registered for plugin type"), NotifyRegistrationStatus 5 s with the
//    kubelet's error text, failed attempts retried with backoff (500 ms
//    doubling to 2 min 2 s), a deleted socket deregisters the driver;
//  - the DRA handler's ValidatePlugin: supported_versions must name a service
//    the kubelet speaks ("v1.DRAPlugin", "v1beta1.DRAPlugin"); like the 1.34
//    kubelet it takes the first of the plugin's list that it supports (a
//    plugin lists newest first, so v1 wins, else v1beta1);
//  - RegisterPlugin: the endpoint (absolute; the registration socket if
//    empty) is connected within 1 s, or the registration fails;
//  - NodePrepareResources / NodeUnprepareResources on the chosen version with
//    the 45 s per-call timeout, one call per driver with all its claims, and
//    the manager's checks: a gRPC error fails the call, a result for a UID not
//    asked for, a claim's error string, or a claim left out each fail it; a
//    failed prepare is recorded as a FailedPrepareDynamicResources event with
//    the kubelet's message;
//  - the health stream (ResourceHealthStatus on): NodeWatchResources after
//    registration; each message is the driver's full state (a device missing
//    from it becomes Unknown), a device not re-reported within 30 s reads
//    Unknown, Unimplemented ends watching for that driver.
// Not simulated: the claim-info cache and its checkpoint (every prepare here
// calls the plugin), ResourceSlice wiping on deregistration, CSI handlers.
#ifndef FABRIC_TOOLS_KUBELET_SIM_DRA_SIM_H_
#define FABRIC_TOOLS_KUBELET_SIM_DRA_SIM_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace grpc {
class Channel;
class ClientContext;
}  // namespace grpc

namespace fabric::sim {

struct DraSimOptions {
  absl::Duration reconcile_period = absl::Seconds(1);
  absl::Duration dial_timeout = absl::Seconds(10);  // the registration socket
  absl::Duration get_info_timeout = absl::Seconds(1);
  absl::Duration notify_timeout = absl::Seconds(5);
  absl::Duration connect_timeout = absl::Seconds(1);  // the plugin endpoint
  absl::Duration call_timeout = absl::Seconds(45);    // defaultClientCallTimeout
  absl::Duration initial_backoff = absl::Milliseconds(500);
  absl::Duration max_backoff = absl::Seconds(122);
  bool watch_health = true;                           // ResourceHealthStatus gate
  absl::Duration health_timeout = absl::Seconds(30);  // healthTimeout
  absl::Duration health_retry = absl::Seconds(1);     // re-open a broken stream
};

struct DraSimClaim {
  std::string claim_namespace;
  std::string name;
  std::string uid;
};

struct DraSimDevice {
  std::vector<std::string> request_names;
  std::string pool;
  std::string device;
  std::vector<std::string> cdi_device_ids;
};

struct DraSimRegistration {
  std::string socket_path;  // the registration socket
  std::string type;
  std::string driver;
  std::string endpoint;
  std::vector<std::string> supported_versions;
  std::string chosen_service;  // "v1.DRAPlugin" | "v1beta1.DRAPlugin"
  bool ok = false;
  std::string error;  // the kubelet's text, sent in NotifyRegistrationStatus
};

struct DraSimDeviceHealth {
  std::string health;  // "Healthy" | "Unhealthy" | "Unknown"
  std::string message;
  int64_t last_updated_time = 0;  // as the plugin sent it
};

struct DraSimEvent {
  std::string reason;  // "FailedPrepareDynamicResources"
  std::string message;
};

class DraKubeletSim {
 public:
  explicit DraKubeletSim(std::string kubelet_root, DraSimOptions options = {});
  ~DraKubeletSim();
  DraKubeletSim(const DraKubeletSim&) = delete;
  DraKubeletSim& operator=(const DraKubeletSim&) = delete;

  // mkdir -p plugins_registry, start the watcher. Stop ends everything
  // (health streams, in-flight calls); Start again re-discovers sockets, as a
  // restarted kubelet does.
  absl::Status Start();
  void Stop();

  std::string PluginsRegistryDir() const { return plugins_registry_dir_; }

  // Registered drivers (name -> chosen service).
  std::map<std::string, std::string> Drivers() const;
  std::vector<DraSimRegistration> Registrations() const;
  // Device health as the kubelet would put it in allocatedResourcesStatus,
  // keyed "<pool>/<device>" (timeouts applied).
  std::map<std::string, DraSimDeviceHealth> Health(const std::string& driver) const;
  int HealthMessages(const std::string& driver) const;
  std::vector<DraSimEvent> Events() const;
  // Blocks until pred() holds (re-checked after every event) or timeout.
  bool WaitFor(const std::function<bool()>& pred, absl::Duration timeout) const;

  // One NodePrepareResources call to `driver` with `claims`, checked like the
  // kubelet's manager. Returns the devices per claim UID. A failure is
  // kFailedPrecondition with the event's message ("Failed to prepare dynamic
  // resources: ..."), also recorded in Events().
  absl::StatusOr<std::map<std::string, std::vector<DraSimDevice>>> PrepareResources(
      const std::string& driver, const std::vector<DraSimClaim>& claims);
  // One NodeUnprepareResources call; errors as the kubelet words them.
  absl::Status UnprepareResources(const std::string& driver,
                                  const std::vector<DraSimClaim>& claims);

 private:
  struct Driver;
  struct Watched {
    uint64_t identity = 0;
    bool registered = false;
    bool pending = false;
    std::string driver;
    absl::Time next_attempt = absl::InfinitePast();
    absl::Duration backoff = absl::ZeroDuration();
  };

  void WatcherLoop();
  std::vector<std::pair<std::string, Watched>> Reconcile();
  void RegisterSocket(const std::string& socket_path, uint64_t identity);
  void RetryLater(const std::string& socket_path, uint64_t identity);
  void Deregister(const std::string& driver, const std::string& socket_path);
  void HealthLoop(std::shared_ptr<Driver> driver);
  std::shared_ptr<Driver> FindDriver(const std::string& name) const;
  void Notify();
  bool Stopping() const;
  void Record(DraSimRegistration r);

  const std::string plugins_registry_dir_;
  const DraSimOptions options_;

  std::mutex lifecycle_mu_;
  std::thread watcher_;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = true;
  std::map<std::string, Watched> watched_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<Driver>> drivers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Driver>> retired_ ABSL_GUARDED_BY(mu_);
  std::vector<DraSimRegistration> registrations_ ABSL_GUARDED_BY(mu_);
  std::vector<DraSimEvent> events_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fabric::sim

#endif  // FABRIC_TOOLS_KUBELET_SIM_DRA_SIM_H_
