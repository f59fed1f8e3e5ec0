// KubeletSim: helpers, lifecycle (start, stop, restart) and observations.
#include "tools/kubelet-sim/kubelet_sim.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "agent/base/errors.h"
#include "agent/base/file_util.h"
#include "agent/base/grpc_deadline.h"
#include "agent/base/grpc_status.h"
#include "agent/base/logging.h"
#include "agent/base/mono_clock.h"
#include "agent/base/status_macros.h"
#include "pluginregistration/v1/api.grpc.pb.h"
#include "tools/kubelet-sim/kubelet_rules.h"
#include "tools/kubelet-sim/kubelet_sim_internal.h"

namespace fabric::sim {

using internal::CleanupPluginDirectory;

namespace internal {

const std::vector<std::string>& SupportedVersions() {
  static const auto* versions = new std::vector<std::string>{kVersion};
  return *versions;
}
bool IsSupportedVersion(const std::string& v) {
  const auto& s = SupportedVersions();
  return std::find(s.begin(), s.end(), v) != s.end();
}

bool IsSocket(const std::string& path) {
  struct stat st {};
  // os.Stat in the kubelet follows symlinks; so do we.
  return ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

// CleanupPluginDirectory: removes unix sockets only; directories, the
// checkpoint and any other regular file stay. v1.20 (removeContents) removes
// every entry that os.Stat does not call a directory, except the checkpoint.
absl::Status CleanupPluginDirectory(const std::string& dir, KubeletVersion version) {
  auto names = ListDir(dir);
  if (!names.ok()) return names.status();
  for (const auto& name : *names) {
    if (name == kCheckpointName) continue;
    const std::string path = dir + "/" + name;
    if (version == KubeletVersion::kV1_20) {
      struct stat st;
      if (::stat(path.c_str(), &st) != 0 || S_ISDIR(st.st_mode)) continue;
    } else if (!IsSocket(path)) {
      continue;
    }
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoError(errno, "unlink", path);
  }
  return absl::OkStatus();
}

std::shared_ptr<grpc::Channel> NewChannel(const std::string& socket_path,
                                          bool localhost_authority) {
  grpc::ChannelArguments args;
  // Newer kubelets dial device plugins with grpc.WithAuthority("localhost").
  if (localhost_authority) args.SetString(GRPC_ARG_DEFAULT_AUTHORITY, "localhost");
  // Each kubelet dial is its own connection; never share a subchannel with an
  // older connection to the same (re-created) socket path.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel("unix:" + socket_path, grpc::InsecureChannelCredentials(), args);
}

// grpc.DialContext(..., WithBlock()) with a timeout: true once READY.
// `aborted` is polled so that a shutdown does not wait for the full timeout.
bool DialBlocking(const std::shared_ptr<grpc::Channel>& channel, absl::Duration timeout,
                  const std::function<bool()>& aborted) {
  const absl::Time deadline = MonotonicNow() + timeout;
  while (true) {
    grpc_connectivity_state state = channel->GetState(/*try_to_connect=*/true);
    if (state == GRPC_CHANNEL_READY) return true;
    const absl::Time now = MonotonicNow();
    if (now >= deadline || (aborted && aborted())) return false;
    channel->WaitForStateChange(
        state, GrpcDeadlineAfter(std::min(deadline - now, absl::Milliseconds(50))));
  }
}

std::vector<std::string> SortedNatural(const std::set<std::string>& ids) {
  std::vector<std::string> out(ids.begin(), ids.end());
  std::sort(out.begin(), out.end(), NaturalLess);
  return out;
}

}  // namespace internal

KubeletSim::KubeletSim(std::string kubelet_root, KubeletSimOptions options)
    : device_plugin_dir_(kubelet_root + "/device-plugins"),
      plugins_registry_dir_(kubelet_root + "/plugins_registry"),
      options_(options) {}

KubeletSim::~KubeletSim() { Stop(); }

// ---------------------------------------------------------------- lifecycle

absl::Status KubeletSim::Start() {
  std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
  if (server_) return absl::FailedPreconditionError("kubelet-sim already serving");
  FABRIC_RETURN_IF_ERROR(MkdirAll(device_plugin_dir_, 0750));
  FABRIC_RETURN_IF_ERROR(CleanupPluginDirectory(device_plugin_dir_, options_.version));
  if (options_.serve_podresources && !podresources_) {
    const std::string dir =
        device_plugin_dir_.substr(0, device_plugin_dir_.rfind('/')) + "/pod-resources";
    FABRIC_RETURN_IF_ERROR(MkdirAll(dir, 0750));
    podresources_ = std::make_unique<podresources::FakePodResourcesServer>();
    FABRIC_RETURN_IF_ERROR(podresources_->Start(dir + "/kubelet.sock"));
    std::lock_guard<std::mutex> l(mu_);
    PublishPodsLocked();
  }
  return StartServing();
}

absl::Status KubeletSim::StartServing() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = false;
  }
  service_ = std::make_unique<RegistrationService>(this);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + KubeletSocket(), grpc::InsecureServerCredentials());
  builder.RegisterService(service_.get());
  // Taken before bind: nobody can see the new socket earlier than this.
  const absl::Time created = MonotonicNow();
  server_ = builder.BuildAndStart();
  if (!server_) {
    service_.reset();
    return absl::UnavailableError("kubelet-sim: cannot serve on " + KubeletSocket());
  }
  std::lock_guard<std::mutex> l(mu_);
  kubelet_sock_created_ = created;
  NotifyLocked();
  LogInfo(Component::kSim, "serving v1beta1.Registration on {}", KubeletSocket());
  return absl::OkStatus();
}

void KubeletSim::StopServing() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
    for (grpc::ClientContext* ctx : inflight_) ctx->TryCancel();
    NotifyLocked();
  }
  if (server_) {
    server_->Shutdown(GrpcDeadlineAfter(absl::ZeroDuration()));
    server_->Wait();
    server_.reset();
  }
  service_.reset();
}

absl::Status KubeletSim::StartWatcher() {
  std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
  if (watcher_enabled_) return absl::OkStatus();
  FABRIC_RETURN_IF_ERROR(MkdirAll(device_plugin_dir_, 0750));
  FABRIC_RETURN_IF_ERROR(MkdirAll(plugins_registry_dir_, 0755));
  // handler.go GetPluginHandler: the device manager drops an empty
  // DEPRECATION file when its plugin-watcher handler is installed.
  {
    std::ofstream deprecation(device_plugin_dir_ + "/DEPRECATION", std::ios::trunc);
    if (!deprecation) return ErrnoError(errno, "create", device_plugin_dir_ + "/DEPRECATION");
  }
  watcher_enabled_ = true;
  StartWatcherThread();
  return absl::OkStatus();
}

void KubeletSim::StartWatcherThread() {
  {
    std::lock_guard<std::mutex> l(mu_);
    watcher_stop_ = false;
    watched_.clear();  // a new kubelet process starts with an empty actual state.
  }
  watcher_thread_ = std::thread([this] { WatcherLoop(); });
}

void KubeletSim::StopWatcherThread() {
  {
    std::lock_guard<std::mutex> l(mu_);
    watcher_stop_ = true;
    for (grpc::ClientContext* ctx : inflight_) ctx->TryCancel();
    NotifyLocked();
  }
  if (watcher_thread_.joinable()) watcher_thread_.join();
  // Only in-flight watcher calls were to be cancelled; later calls are fine.
  std::lock_guard<std::mutex> l(mu_);
  watcher_stop_ = false;
}

void KubeletSim::DropAllEndpoints() {
  std::vector<std::shared_ptr<Endpoint>> endpoints;
  {
    std::lock_guard<std::mutex> l(mu_);
    endpoints = all_endpoints_;
  }
  for (auto& ep : endpoints) ep->list_and_watch_context.TryCancel();
  for (auto& ep : endpoints) {
    if (ep->thread.joinable()) ep->thread.join();
  }
  std::lock_guard<std::mutex> l(mu_);
  for (auto& [name, state] : resources_) state.endpoint.reset();
  // Dropping the last references closes the connections, as process exit would.
  all_endpoints_.clear();
  NotifyLocked();
}

void KubeletSim::JoinConnectThreads() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> l(mu_);
    threads.swap(connect_threads_);
  }
  for (auto& t : threads) t.join();
}

void KubeletSim::Stop() {
  std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
  StopWatcherThread();
  StopServing();
  JoinConnectThreads();
  DropAllEndpoints();
  if (podresources_) {
    podresources_->Stop();
    podresources_.reset();
  }
}

absl::Status KubeletSim::Restart() {
  std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
  LogInfo(Component::kSim, "simulating a kubelet restart");
  StopWatcherThread();
  StopServing();
  JoinConnectThreads();
  DropAllEndpoints();
  {
    // The new process restores allocations and resource names from the
    // checkpoint; every resource gets an empty device set and a stopped
    // endpoint, so capacity is 0 until its plugin registers again.
    std::lock_guard<std::mutex> l(mu_);
    const absl::Time now = MonotonicNow();
    for (auto& [name, state] : resources_) {
      state.endpoint.reset();
      state.stopped = true;
      state.stop_time = now;
      state.devices.clear();
      state.healthy.clear();
      state.unhealthy.clear();
    }
    ++restart_count_;
    NotifyLocked();
  }
  FABRIC_RETURN_IF_ERROR(MkdirAll(device_plugin_dir_, 0750));
  FABRIC_RETURN_IF_ERROR(CleanupPluginDirectory(device_plugin_dir_, options_.version));
  FABRIC_RETURN_IF_ERROR(StartServing());
  if (watcher_enabled_) {
    std::ofstream(device_plugin_dir_ + "/DEPRECATION", std::ios::trunc);
    StartWatcherThread();
  }
  return absl::OkStatus();
}

absl::Time KubeletSim::KubeletSocketCreatedAt() const {
  std::lock_guard<std::mutex> l(mu_);
  return kubelet_sock_created_;
}

int KubeletSim::RestartCount() const {
  std::lock_guard<std::mutex> l(mu_);
  return restart_count_;
}

// ------------------------------------------------------------- observations

bool KubeletSim::ExpiredLocked(const ResourceState& state) const {
  return state.stopped && state.stop_time != absl::InfinitePast() &&
         MonotonicNow() - state.stop_time > options_.endpoint_stop_grace;
}

std::vector<std::string> KubeletSim::Resources() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::string> out;
  for (const auto& [name, state] : resources_) {
    if (!ExpiredLocked(state)) out.push_back(name);
  }
  return out;
}

std::vector<SimDevice> KubeletSim::Devices(const std::string& resource) const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<SimDevice> out;
  auto it = resources_.find(resource);
  if (it == resources_.end()) return out;
  for (const auto& device : it->second.devices) {
    SimDevice d;
    d.id = device.id();
    d.health = device.health();
    d.healthy = it->second.healthy.count(device.id()) > 0;
    for (const auto& node : device.topology().nodes()) d.numa_nodes.push_back(node.id());
    out.push_back(std::move(d));
  }
  return out;
}

int KubeletSim::Capacity(const std::string& resource) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = resources_.find(resource);
  if (it == resources_.end() || ExpiredLocked(it->second)) return 0;
  return static_cast<int>(it->second.healthy.size() + it->second.unhealthy.size());
}

int KubeletSim::Allocatable(const std::string& resource) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = resources_.find(resource);
  if (it == resources_.end() || ExpiredLocked(it->second)) return 0;
  return static_cast<int>(it->second.healthy.size());
}

bool KubeletSim::EndpointStopped(const std::string& resource) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = resources_.find(resource);
  return it == resources_.end() || it->second.stopped;
}

std::optional<v1beta1::DevicePluginOptions> KubeletSim::PluginOptions(
    const std::string& resource) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = resources_.find(resource);
  if (it == resources_.end() || !it->second.endpoint) return std::nullopt;
  return it->second.endpoint->options;
}

std::string KubeletSim::EndpointPath(const std::string& resource) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = resources_.find(resource);
  if (it == resources_.end() || !it->second.endpoint) return "";
  return it->second.endpoint->socket_path;
}

std::vector<RegistrationEvent> KubeletSim::Registrations() const {
  std::lock_guard<std::mutex> l(mu_);
  return events_;
}

int KubeletSim::ListAndWatchMessages(const std::string& resource) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = resources_.find(resource);
  return it == resources_.end() ? 0 : it->second.messages;
}

int KubeletSim::AllocateCalls(const std::string& resource) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = resources_.find(resource);
  return it == resources_.end() ? 0 : it->second.allocate_calls;
}

int KubeletSim::PreferredAllocationCalls(const std::string& resource) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = resources_.find(resource);
  return it == resources_.end() ? 0 : it->second.preferred_calls;
}

int KubeletSim::PreStartCalls(const std::string& resource) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = resources_.find(resource);
  return it == resources_.end() ? 0 : it->second.pre_start_calls;
}

std::vector<AllocationRecord> KubeletSim::Allocations() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<AllocationRecord> out;
  for (const auto& [key, record] : allocations_) out.push_back(record);
  return out;
}

bool KubeletSim::WaitFor(const std::function<bool()>& pred, absl::Duration timeout) const {
  // On the steady clock: a wall-clock step neither cuts nor stretches a wait.
  const auto deadline = std::chrono::steady_clock::now() +
                        absl::ToChronoNanoseconds(std::min(timeout, absl::Hours(24 * 365)));
  while (true) {
    uint64_t seen;
    {
      std::lock_guard<std::mutex> l(mu_);
      seen = generation_;
    }
    if (pred()) return true;
    std::unique_lock<std::mutex> l(mu_);
    if (!cv_.wait_until(l, deadline, [this, seen]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return generation_ != seen;
        })) {
      l.unlock();
      return pred();
    }
  }
}

}  // namespace fabric::sim
