// KubeletSim: a test peer that behaves like the kubelet's device manager
// (kubernetes/kubernetes pkg/kubelet/cm/devicemanager, see
// docs in protocols.md §2) towards a device plugin. Start here.
//
//   KubeletSim sim("/tmp/k1");             // uses /tmp/k1/device-plugins, /tmp/k1/plugins_registry
//   sim.Start();                           // kubelet.sock: v1beta1.Registration
//   sim.WaitFor([&] { return sim.ListAndWatchMessages("example.com/rdma") > 0; },
//   absl::Seconds(5)); auto resp = sim.Allocate("example.com/rdma", 2);
//
// What it reproduces: Register validation order and exact error strings, the
// endpoint joined under the device-plugins dir, the 10 s blocking dial,
// GetDevicePluginOptions before Register returns, ListAndWatch messages as full
// lists ("Healthy" is the only healthy value), stream end => all devices of the
// resource unhealthy, newest registration wins, kubelet-style device selection
// with GetPreferredAllocation, one ContainerAllocateRequest per Allocate,
// PreStartContainer only when advertised, the plugin-watcher flow, and a kubelet
// restart (every socket in device-plugins deleted, kubelet.sock re-created,
// resources known but stopped with no devices until the plugin re-registers).
// All gRPC receive limits stay at the 4 MiB default, as in the kubelet.
#ifndef FABRIC_TOOLS_KUBELET_SIM_KUBELET_SIM_H_
#define FABRIC_TOOLS_KUBELET_SIM_KUBELET_SIM_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "test/fakes/fake_podresources_server.h"

namespace grpc {
class Server;
class ClientContext;
}  // namespace grpc

namespace fabric::sim {

// One device as the kubelet sees it after the latest ListAndWatch message.
struct SimDevice {
  std::string id;
  bool healthy = false;  // health == "Healthy" and the endpoint is connected.
  std::string health;    // the raw string the plugin sent.
  std::vector<int64_t> numa_nodes;
};

enum class RegistrationPath { kKubeletSocket, kPluginWatcher };

// One registration attempt (a Register RPC, or a plugin-watcher GetInfo round).
struct RegistrationEvent {
  RegistrationPath path = RegistrationPath::kKubeletSocket;
  std::string resource;
  std::string endpoint;     // as the plugin sent it.
  std::string socket_path;  // what the kubelet dialed (joined / absolute).
  std::string version;      // Register: version; watcher: supported_versions as Go %v.
  // Times are MonotonicNow() (agent/base/mono_clock.h): only differences mean anything.
  absl::Time at;    // when the Register RPC (or watcher discovery) began.
  absl::Time done;  // when the reply was decided.
  bool ok = false;
  std::string error;  // kubelet's error text, empty when ok.
};

// A remembered allocation, as in the kubelet checkpoint's PodDeviceEntries.
struct AllocationRecord {
  std::string pod;
  std::string container;
  std::string resource;
  std::vector<std::string> device_ids;
  std::map<int64_t, std::vector<std::string>> devices_per_numa;  // -1 = no topology.
  v1beta1::ContainerAllocateResponse response;
};

// Which kubelet the simulator behaves like. kCurrent is the kubelet 1.37 line; kV1_20 is what the
// real kubelet v1.20.2 (test/realkubelet, built from Debian 12's source) does where it differs:
//  - Register answers right after validating version and name; the plugin is dialed afterwards on
//    its own goroutine (manager.go `go m.addEndpoint(r)`), so a dial failure never reaches the
//    plugin, which has already been told "registered".
//  - The endpoint's options come from RegisterRequest.options; GetDevicePluginOptions is never
//    called on the Register path (only the plugin-watcher path calls it).
//  - Start deletes every non-directory entry of device-plugins except the checkpoint (regular files
//    and DEPRECATION too), not only sockets.
//  - No "no healthy devices present" admission error: an all-unhealthy resource fails with
//    "requested number of devices unavailable ... Available: 0".
enum class KubeletVersion { kCurrent, kV1_20 };

struct KubeletSimOptions {
  KubeletVersion version = KubeletVersion::kCurrent;
  // Kubelet dial of a plugin endpoint (Register and watcher RegisterPlugin).
  absl::Duration dial_timeout = absl::Seconds(10);
  // Plugin watcher: dial / GetInfo / NotifyRegistrationStatus timeouts.
  absl::Duration watcher_dial_timeout = absl::Seconds(10);
  absl::Duration watcher_get_info_timeout = absl::Seconds(1);
  absl::Duration watcher_notify_timeout = absl::Seconds(5);
  // The kubelet's plugin-manager reconciler runs once per second
  // (reconciler.go loopSleepDuration); tests may shorten it.
  absl::Duration watcher_reconcile_period = absl::Seconds(1);
  // Failed watcher registrations are retried with exponential backoff
  // (nestedpendingoperations: 500 ms doubling up to 2 min 2 s).
  absl::Duration watcher_initial_backoff = absl::Milliseconds(500);
  absl::Duration watcher_max_backoff = absl::Seconds(122);
  // KubeletPreStartContainerRPCTimeoutInSecs.
  absl::Duration pre_start_timeout = absl::Seconds(30);
  // endpointStopGracePeriod: a stopped resource disappears after this.
  absl::Duration endpoint_stop_grace = absl::Minutes(5);
  // Kubelets before kubernetes#135437 keyed clients by resource name only: a
  // late stream end of a *replaced* endpoint marks the resource unhealthy and
  // stops the current endpoint. Default: the current behaviour (ignored).
  bool legacy_disconnect_by_resource = false;
  // Write <device-plugins>/kubelet_internal_checkpoint like the kubelet does
  // (JSON shape of checkpoint.go; Checksum is written as 0, not reproduced).
  bool write_checkpoint = true;
  // Also serve PodResources v1 (List) at <root>/pod-resources/kubelet.sock
  // from the current allocations, as every kubelet since 1.15 does. Off by
  // default: tests that run their own fake PodResources server keep it.
  bool serve_podresources = false;
};

class KubeletSim {
 public:
  explicit KubeletSim(std::string kubelet_root, KubeletSimOptions options = {});
  ~KubeletSim();
  KubeletSim(const KubeletSim&) = delete;
  KubeletSim& operator=(const KubeletSim&) = delete;

  // Kubelet start: mkdir -p device-plugins (0750), remove every unix socket in
  // it (directories and other files stay), serve v1beta1.Registration on
  // kubelet.sock. Errors: filesystem errors, kUnavailable if gRPC cannot listen.
  absl::Status Start();
  // Plugin-watcher mode (may run together with Start, as in a real kubelet):
  // mkdir -p plugins_registry, create device-plugins/DEPRECATION, then
  // discover sockets there (recursively, skipping dot-names and non-sockets)
  // once per reconcile period. Socket deletion deregisters the plugin.
  absl::Status StartWatcher();
  // Stops serving, stops the watcher and drops every plugin connection (as if
  // the kubelet process died). Sockets are left as they are. Idempotent.
  void Stop();
  // A kubelet restart: Stop(), then a fresh start that keeps the allocations
  // and the resource names from the checkpoint, with every resource stopped
  // and empty until its plugin registers again; deletes every socket in
  // device-plugins (non-socket files such as the checkpoint and DEPRECATION
  // stay) and re-creates kubelet.sock. A running watcher restarts too and
  // re-discovers existing plugins_registry sockets.
  absl::Status Restart();

  std::string DevicePluginDir() const { return device_plugin_dir_; }
  std::string PluginsRegistryDir() const { return plugins_registry_dir_; }
  std::string KubeletSocket() const { return device_plugin_dir_ + "/kubelet.sock"; }
  std::string CheckpointPath() const { return device_plugin_dir_ + "/kubelet_internal_checkpoint"; }
  // When kubelet.sock was last (re)created; InfinitePast before Start.
  absl::Time KubeletSocketCreatedAt() const;  // MonotonicNow()
  int RestartCount() const;

  // --- Observations (all thread-safe) ---
  // Resource names the kubelet knows (registered, or restored from the
  // checkpoint), minus those stopped for longer than endpoint_stop_grace.
  std::vector<std::string> Resources() const;
  // The devices of the latest ListAndWatch message (empty before the first one
  // and after a restart). After a stream end all are reported unhealthy.
  std::vector<SimDevice> Devices(const std::string& resource) const;
  // Node capacity / allocatable for the resource, as the kubelet would report.
  int Capacity(const std::string& resource) const;
  int Allocatable(const std::string& resource) const;
  // True when the resource's endpoint is stopped (stream ended, restart).
  bool EndpointStopped(const std::string& resource) const;
  // The GetDevicePluginOptions answer of the current endpoint.
  std::optional<v1beta1::DevicePluginOptions> PluginOptions(const std::string& resource) const;
  // The socket path of the current endpoint ("" if none).
  std::string EndpointPath(const std::string& resource) const;
  std::vector<RegistrationEvent> Registrations() const;
  // ListAndWatch messages accepted for the resource since construction
  // (all endpoints; monotonic).
  int ListAndWatchMessages(const std::string& resource) const;
  // Allocate / GetPreferredAllocation / PreStartContainer RPCs sent so far.
  int AllocateCalls(const std::string& resource) const;
  int PreferredAllocationCalls(const std::string& resource) const;
  int PreStartCalls(const std::string& resource) const;
  std::vector<AllocationRecord> Allocations() const;

  // Blocks until pred() is true (re-evaluated after every event: registration,
  // ListAndWatch message, stream end, restart) or the timeout passes.
  // pred may call the observation methods. Returns pred()'s last value.
  bool WaitFor(const std::function<bool()>& pred, absl::Duration timeout) const;

  // --- Kubelet-like pod admission ---
  // Chooses `count` healthy, unallocated devices like devicesToAllocate (no
  // topology manager: GetPreferredAllocation, when advertised, is asked with
  // every candidate; its answer is intersected with the candidates and the
  // rest is filled in natural ID order), then sends Allocate with exactly one
  // ContainerAllocateRequest and remembers the response. A repeated call for
  // the same pod/container/resource with the same count replays the cached
  // response without calling the plugin (container restart).
  // Errors carry the kubelet's text: kFailedPrecondition for admission
  // failures ("cannot allocate unregistered device", "no healthy devices
  // present", "requested number of devices unavailable"), kInvalidArgument for
  // a changed request, the plugin's gRPC code for RPC failures, kInternal for an
  // empty container_responses.
  //
  // A resource the device manager does not know (never registered, or dropped
  // after the 5 min grace, and nothing of it allocated) is skipped as the
  // kubelet does (isDevicePluginResource): OK, an empty response, no IDs, no
  // RPC. The Pod then runs WITHOUT devices; the real kubelet v1.20.2 did this to
  // a static Pod admitted before the plugin's first registration.
  absl::StatusOr<v1beta1::ContainerAllocateResponse> Allocate(
      const std::string& resource, int count, const std::string& pod = "pod",
      const std::string& container = "c", std::vector<std::string>* chosen_ids = nullptr);
  // Container start (GetDeviceRunContainerOptions): PreStartContainer for each
  // of the container's resources whose plugin set pre_start_required (30 s
  // deadline). kNotFound if the container has no allocation.
  absl::Status StartContainer(const std::string& pod = "pod", const std::string& container = "c");
  // Pod deletion: frees the pod's devices.
  void RemovePod(const std::string& pod);

  // --- Raw calls to the current endpoint, for tests that need exact control ---
  // Allocate with one ContainerAllocateRequest holding `ids` (no bookkeeping).
  absl::StatusOr<v1beta1::AllocateResponse> AllocateIds(const std::string& resource,
                                                        const std::vector<std::string>& ids);
  absl::StatusOr<v1beta1::PreferredAllocationResponse> Preferred(
      const std::string& resource, const std::vector<std::string>& available,
      const std::vector<std::string>& must_include, int size);
  absl::Status PreStart(const std::string& resource, const std::vector<std::string>& ids);

 private:
  struct Endpoint;  // a plugin connection (kubelet_sim.cc)
  class RegistrationService;
  struct ResourceState {
    std::shared_ptr<Endpoint> endpoint;  // null after a restart until re-registration.
    bool stopped = true;
    absl::Time stop_time = absl::InfinitePast();
    std::vector<v1beta1::Device> devices;  // the latest ListAndWatch message.
    std::set<std::string> healthy;
    std::set<std::string> unhealthy;
    int messages = 0;
    int allocate_calls = 0;
    int preferred_calls = 0;
    int pre_start_calls = 0;
  };
  // A socket in plugins_registry, as the plugin watcher's desired/actual state.
  struct WatchedPlugin {
    uint64_t identity = 0;    // inode ^ ctime: a re-created socket is a new plugin.
    bool registered = false;  // in the actual state of the world.
    bool pending = false;     // a registration attempt is running.
    std::string name;         // PluginInfo.name
    std::string endpoint;     // PluginInfo.endpoint (or the socket path).
    absl::Time next_attempt = absl::InfinitePast();
    absl::Duration backoff = absl::ZeroDuration();
  };
  using AllocationKey = std::tuple<std::string, std::string, std::string>;

  // Register handler body; returns the kubelet's error text or "" on success.
  std::string HandleRegister(const v1beta1::RegisterRequest& request, grpc::ServerContext* ctx);
  // connectClient: dial, GetDevicePluginOptions, install as the resource's
  // endpoint, record `event` as successful, start ListAndWatch. Returns the
  // error text or "" (the caller records failures).
  // `given_options` (v1.20 Register path): use them instead of calling GetDevicePluginOptions.
  std::string ConnectClient(const std::string& resource, const std::string& socket_path,
                            const std::function<bool()>& aborted, RegistrationEvent* event,
                            const v1beta1::DevicePluginOptions* given_options = nullptr);
  void JoinConnectThreads();
  void RunListAndWatch(std::shared_ptr<Endpoint> endpoint);
  void OnListAndWatch(const std::shared_ptr<Endpoint>& endpoint,
                      const v1beta1::ListAndWatchResponse& response);
  void OnDisconnected(const std::shared_ptr<Endpoint>& endpoint);

  absl::Status StartServing();
  void StopServing();
  void StartWatcherThread();
  void StopWatcherThread();
  void WatcherLoop();
  // Applies deletions and returns the sockets to register now.
  std::vector<std::pair<std::string, WatchedPlugin>> ReconcileWatcher();
  void RegisterWatchedPlugin(const std::string& socket_path, WatchedPlugin* plugin);
  void DeregisterWatchedPlugin(const WatchedPlugin& plugin);
  void DropAllEndpoints();

  absl::StatusOr<std::shared_ptr<Endpoint>> CurrentEndpoint(const std::string& resource) const;
  void WriteCheckpointLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What PodResources List answers: the allocations, Pods in "default".
  void PublishPodsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NotifyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ++generation_;
    cv_.notify_all();
  }
  bool ExpiredLocked(const ResourceState& state) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void RecordEvent(RegistrationEvent event);
  // Tracks an outgoing RPC so Stop() can cancel it.
  void TrackCall(grpc::ClientContext* ctx);
  void UntrackCall(grpc::ClientContext* ctx);

  const std::string device_plugin_dir_;
  const std::string plugins_registry_dir_;
  const KubeletSimOptions options_;

  // std::mutex rather than absl::Mutex: Debian's libabsl is not built with
  // TSan, so TSan cannot see absl::Mutex's happens-before edges.
  std::mutex lifecycle_mu_;  // serializes Start/StartWatcher/Stop/Restart.
  std::unique_ptr<RegistrationService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<podresources::FakePodResourcesServer> podresources_;  // serve_podresources
  std::thread watcher_thread_;
  bool watcher_enabled_ = false;  // guarded by lifecycle_mu_.

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;  // notified on every event (NotifyLocked).
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool watcher_stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time kubelet_sock_created_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int restart_count_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_endpoint_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::string, ResourceState> resources_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Endpoint>> all_endpoints_ ABSL_GUARDED_BY(mu_);
  std::vector<RegistrationEvent> events_ ABSL_GUARDED_BY(mu_);
  std::map<AllocationKey, AllocationRecord> allocations_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::set<std::string>> allocated_devices_ ABSL_GUARDED_BY(mu_);
  std::set<grpc::ClientContext*> inflight_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, WatchedPlugin> watched_ ABSL_GUARDED_BY(mu_);
  // v1.20: Register's asynchronous connects (joined on Stop/Restart).
  std::vector<std::thread> connect_threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fabric::sim

#endif  // FABRIC_TOOLS_KUBELET_SIM_KUBELET_SIM_H_
