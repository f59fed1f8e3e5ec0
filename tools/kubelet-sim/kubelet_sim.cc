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
#include "agent/base/grpc_status.h"
#include "agent/base/logging.h"
#include "agent/base/status_macros.h"
#include "pluginregistration/v1/api.grpc.pb.h"
#include "tools/kubelet-sim/kubelet_rules.h"

namespace fabric::sim {
namespace {

constexpr char kHealthy[] = "Healthy";
constexpr char kVersion[] = "v1beta1";
constexpr char kCheckpointName[] = "kubelet_internal_checkpoint";
constexpr char kDevicePluginType[] = "DevicePlugin";
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
// checkpoint and any other regular file stay.
absl::Status CleanupPluginDirectory(const std::string& dir) {
  auto names = ListDir(dir);
  if (!names.ok()) return names.status();
  for (const auto& name : *names) {
    if (name == kCheckpointName) continue;
    const std::string path = dir + "/" + name;
    if (!IsSocket(path)) continue;
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
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    grpc_connectivity_state state = channel->GetState(/*try_to_connect=*/true);
    if (state == GRPC_CHANNEL_READY) return true;
    const absl::Time now = absl::Now();
    if (now >= deadline || (aborted && aborted())) return false;
    const absl::Time slice = std::min(deadline, now + absl::Milliseconds(50));
    channel->WaitForStateChange(state, absl::ToChronoTime(slice));
  }
}

std::vector<std::string> SortedNatural(const std::set<std::string>& ids) {
  std::vector<std::string> out(ids.begin(), ids.end());
  std::sort(out.begin(), out.end(), NaturalLess);
  return out;
}

}  // namespace

struct KubeletSim::Endpoint {
  uint64_t id = 0;
  std::string resource;
  std::string socket_path;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1beta1::DevicePlugin::Stub> stub;
  v1beta1::DevicePluginOptions options;
  grpc::ClientContext list_and_watch_context;
  std::thread thread;
  std::atomic<bool> disconnected{false};
};

class KubeletSim::RegistrationService final : public v1beta1::Registration::Service {
 public:
  explicit RegistrationService(KubeletSim* sim) : sim_(sim) {}
  grpc::Status Register(grpc::ServerContext* ctx, const v1beta1::RegisterRequest* request,
                        v1beta1::Empty*) override {
    std::string error = sim_->HandleRegister(*request, ctx);
    // A plain Go error returned from a grpc-go handler reaches the client as
    // codes.Unknown with the error text as the message.
    if (!error.empty()) return grpc::Status(grpc::StatusCode::UNKNOWN, error);
    return grpc::Status::OK;
  }

 private:
  KubeletSim* sim_;
};

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
  FABRIC_RETURN_IF_ERROR(CleanupPluginDirectory(device_plugin_dir_));
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
  const absl::Time created = absl::Now();
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
    server_->Shutdown(std::chrono::system_clock::now());
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

void KubeletSim::Stop() {
  std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
  StopWatcherThread();
  StopServing();
  DropAllEndpoints();
}

absl::Status KubeletSim::Restart() {
  std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
  LogInfo(Component::kSim, "simulating a kubelet restart");
  StopWatcherThread();
  StopServing();
  DropAllEndpoints();
  {
    // The new process restores allocations and resource names from the
    // checkpoint; every resource gets an empty device set and a stopped
    // endpoint, so capacity is 0 until its plugin registers again.
    std::lock_guard<std::mutex> l(mu_);
    const absl::Time now = absl::Now();
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
  FABRIC_RETURN_IF_ERROR(CleanupPluginDirectory(device_plugin_dir_));
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

// ------------------------------------------------------------- registration

std::string KubeletSim::HandleRegister(const v1beta1::RegisterRequest& request,
                                       grpc::ServerContext* ctx) {
  RegistrationEvent event;
  event.path = RegistrationPath::kKubeletSocket;
  event.resource = request.resource_name();
  event.endpoint = request.endpoint();
  event.version = request.version();
  event.at = absl::Now();
  LogInfo(Component::kSim, "Register resource={} endpoint={} version={}", request.resource_name(),
          request.endpoint(), request.version());

  // server.go Register: version, then resource name, then connectClient.
  std::string error;
  if (!IsSupportedVersion(request.version())) {
    error =
        fmt::format("requested API version {} is not supported by kubelet. Supported version is {}",
                    GoQuote(request.version()), GoQuoteList(SupportedVersions()));
  } else if (!IsExtendedResourceName(request.resource_name())) {
    error = fmt::format("the ResourceName {} is invalid", GoQuote(request.resource_name()));
  } else {
    // filepath.Join(DevicePluginPath, endpoint): even an absolute endpoint
    // lands inside the device-plugins directory.
    event.socket_path = GoJoinPath(device_plugin_dir_ + "/", request.endpoint());
    error = ConnectClient(
        request.resource_name(), event.socket_path,
        [this, ctx] {
          std::lock_guard<std::mutex> l(mu_);
          return stopping_ || ctx->IsCancelled();
        },
        &event);
    if (error.empty()) return error;  // ConnectClient recorded the event.
  }
  event.done = absl::Now();
  event.ok = false;
  event.error = error;
  LogWarn(Component::kSim, "Register {} rejected: {}", event.resource, error);
  RecordEvent(std::move(event));
  return error;
}

std::string KubeletSim::ConnectClient(const std::string& resource, const std::string& socket_path,
                                      const std::function<bool()>& aborted,
                                      RegistrationEvent* event) {
  auto channel = NewChannel(socket_path, /*localhost_authority=*/true);
  if (!DialBlocking(channel, options_.dial_timeout, aborted)) {
    // grpc.DialContext returns ctx.Err() when the blocking dial times out.
    return "failed to dial device plugin: context deadline exceeded";
  }
  auto stub = v1beta1::DevicePlugin::NewStub(channel);

  // manager.go PluginConnected: options first, no deadline.
  v1beta1::DevicePluginOptions plugin_options;
  grpc::Status status;
  {
    grpc::ClientContext ctx;
    TrackCall(&ctx);
    status = stub->GetDevicePluginOptions(&ctx, v1beta1::Empty(), &plugin_options);
    UntrackCall(&ctx);
  }
  if (!status.ok()) return "failed to get device plugin options: " + GoGrpcError(status);

  auto endpoint = std::make_shared<Endpoint>();
  endpoint->resource = resource;
  endpoint->socket_path = socket_path;
  endpoint->channel = channel;
  endpoint->stub = std::move(stub);
  endpoint->options = plugin_options;

  std::lock_guard<std::mutex> l(mu_);
  if (stopping_) return "kubelet-sim is shutting down";
  endpoint->id = next_endpoint_id_++;
  ResourceState& state = resources_[resource];
  // Newest registration wins; the old connection is not closed by the kubelet.
  state.endpoint = endpoint;
  state.stopped = false;
  state.stop_time = absl::InfinitePast();
  all_endpoints_.push_back(endpoint);
  // Recorded before ListAndWatch starts: whoever sees devices sees the event.
  event->done = absl::Now();
  event->ok = true;
  events_.push_back(*event);
  endpoint->thread = std::thread([this, endpoint] { RunListAndWatch(endpoint); });
  NotifyLocked();
  LogInfo(Component::kSim, "connected {} at {} (pre_start_required={}, preferred_allocation={})",
          resource, socket_path, plugin_options.pre_start_required(),
          plugin_options.get_preferred_allocation_available());
  return "";
}

void KubeletSim::RunListAndWatch(std::shared_ptr<Endpoint> endpoint) {
  // The kubelet never cancels this stream; it ends when the plugin ends it
  // or the connection breaks (or, here, when the simulated kubelet dies).
  auto reader = endpoint->stub->ListAndWatch(&endpoint->list_and_watch_context, v1beta1::Empty());
  v1beta1::ListAndWatchResponse response;
  while (reader->Read(&response)) OnListAndWatch(endpoint, response);
  grpc::Status status = reader->Finish();
  LogInfo(Component::kSim, "ListAndWatch ended for {} at {}: {}", endpoint->resource,
          endpoint->socket_path, status.ok() ? std::string("OK") : GoGrpcError(status));
  OnDisconnected(endpoint);
}

void KubeletSim::OnListAndWatch(const std::shared_ptr<Endpoint>& endpoint,
                                const v1beta1::ListAndWatchResponse& response) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = resources_.find(endpoint->resource);
  if (it == resources_.end()) return;
  ResourceState& state = it->second;
  if (state.endpoint != endpoint && !options_.legacy_disconnect_by_resource) return;
  // genericDeviceUpdateCallback: every message replaces the whole picture.
  state.devices.assign(response.devices().begin(), response.devices().end());
  state.healthy.clear();
  state.unhealthy.clear();
  for (const auto& device : response.devices()) {
    if (device.health() == kHealthy) {
      state.healthy.insert(device.id());
    } else {
      state.unhealthy.insert(device.id());
    }
  }
  ++state.messages;
  WriteCheckpointLocked();
  NotifyLocked();
}

void KubeletSim::OnDisconnected(const std::shared_ptr<Endpoint>& endpoint) {
  std::lock_guard<std::mutex> l(mu_);
  endpoint->disconnected = true;
  NotifyLocked();
  auto it = resources_.find(endpoint->resource);
  if (it == resources_.end()) return;
  ResourceState& state = it->second;
  if (state.endpoint != endpoint && !options_.legacy_disconnect_by_resource) return;
  // markResourceUnhealthy + setStopTime: allocatable drops to 0, capacity stays.
  state.unhealthy.insert(state.healthy.begin(), state.healthy.end());
  state.healthy.clear();
  if (!state.stopped) {
    state.stopped = true;
    state.stop_time = absl::Now();
  }
  WriteCheckpointLocked();
}

void KubeletSim::RecordEvent(RegistrationEvent event) {
  std::lock_guard<std::mutex> l(mu_);
  events_.push_back(std::move(event));
  NotifyLocked();
}

void KubeletSim::TrackCall(grpc::ClientContext* ctx) {
  std::lock_guard<std::mutex> l(mu_);
  inflight_.insert(ctx);
  if (stopping_ || watcher_stop_) ctx->TryCancel();
}

void KubeletSim::UntrackCall(grpc::ClientContext* ctx) {
  std::lock_guard<std::mutex> l(mu_);
  inflight_.erase(ctx);
}

// ----------------------------------------------------------- plugin watcher

void KubeletSim::WatcherLoop() {
  // Like the kubelet's operation executor, every registration runs on its own
  // thread, so one slow or stale socket (10 s dial) does not hold up others.
  struct Operation {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Operation> operations;
  auto reap = [&operations](bool all) {
    for (auto it = operations.begin(); it != operations.end();) {
      if (all || it->done->load()) {
        it->thread.join();
        it = operations.erase(it);
      } else {
        ++it;
      }
    }
  };
  while (true) {
    for (auto& [path, plugin] : ReconcileWatcher()) {
      auto done = std::make_shared<std::atomic<bool>>(false);
      operations.push_back({std::thread([this, path = path, plugin = plugin, done]() mutable {
                              RegisterWatchedPlugin(path, &plugin);
                              {
                                std::lock_guard<std::mutex> l(mu_);
                                auto it = watched_.find(path);
                                if (it != watched_.end() &&
                                    it->second.identity == plugin.identity) {
                                  it->second.pending = false;
                                }
                              }
                              done->store(true);
                            }),
                            done});
    }
    reap(/*all=*/false);
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, absl::ToChronoNanoseconds(options_.watcher_reconcile_period),
                 [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return watcher_stop_; });
    if (watcher_stop_) break;
  }
  reap(/*all=*/true);  // they notice watcher_stop_ and return promptly.
}

std::vector<std::pair<std::string, KubeletSim::WatchedPlugin>> KubeletSim::ReconcileWatcher() {
  // Desired state: every socket under plugins_registry (recursively), except
  // names starting with '.'.
  std::map<std::string, uint64_t> desired;
  std::error_code ec;
  std::filesystem::recursive_directory_iterator it(
      plugins_registry_dir_, std::filesystem::directory_options::skip_permission_denied, ec);
  for (; !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    const std::string path = it->path().string();
    if (absl::StartsWith(it->path().filename().string(), ".")) continue;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    desired[path] = static_cast<uint64_t>(st.st_ino) * 1000003u ^
                    static_cast<uint64_t>(st.st_ctim.tv_sec) * 1000000000ull ^
                    static_cast<uint64_t>(st.st_ctim.tv_nsec);
  }

  std::vector<WatchedPlugin> to_deregister;
  std::vector<std::pair<std::string, WatchedPlugin>> to_register;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto w = watched_.begin(); w != watched_.end();) {
      auto d = desired.find(w->first);
      if (d == desired.end() || d->second != w->second.identity) {
        if (w->second.registered) to_deregister.push_back(w->second);
        w = watched_.erase(w);
      } else {
        ++w;
      }
    }
    const absl::Time now = absl::Now();
    for (const auto& [path, identity] : desired) {
      WatchedPlugin& plugin = watched_[path];
      if (plugin.identity == 0) plugin.identity = identity;
      if (!plugin.registered && !plugin.pending && now >= plugin.next_attempt) {
        plugin.pending = true;  // nestedpendingoperations: one operation per socket.
        to_register.emplace_back(path, plugin);
      }
    }
  }
  for (const auto& plugin : to_deregister) DeregisterWatchedPlugin(plugin);
  return to_register;
}

void KubeletSim::DeregisterWatchedPlugin(const WatchedPlugin& plugin) {
  LogInfo(Component::kSim, "plugin watcher: deregistering {} ({})", plugin.name, plugin.endpoint);
  std::shared_ptr<Endpoint> endpoint;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = resources_.find(plugin.name);
    if (it != resources_.end()) endpoint = it->second.endpoint;
  }
  if (!endpoint) return;
  // DeRegisterPlugin -> disconnectClient: closes the connection; the effect is
  // the same as a broken ListAndWatch stream.
  endpoint->list_and_watch_context.TryCancel();
  OnDisconnected(endpoint);
}

void KubeletSim::RegisterWatchedPlugin(const std::string& socket_path, WatchedPlugin* plugin) {
  RegistrationEvent event;
  event.path = RegistrationPath::kPluginWatcher;
  event.socket_path = socket_path;
  event.at = absl::Now();
  auto aborted = [this] {
    std::lock_guard<std::mutex> l(mu_);
    return watcher_stop_;
  };
  // Failures before the plugin enters the actual state are retried with
  // exponential backoff by the reconciler.
  auto retry_later = [&](const std::string& error) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = watched_.find(socket_path);
    if (it != watched_.end() && it->second.identity == plugin->identity) {
      WatchedPlugin& w = it->second;
      w.backoff = w.backoff == absl::ZeroDuration()
                      ? options_.watcher_initial_backoff
                      : std::min(w.backoff * 2, options_.watcher_max_backoff);
      w.next_attempt = absl::Now() + w.backoff;
    }
    event.done = absl::Now();
    event.ok = false;
    event.error = error;
    LogWarn(Component::kSim, "{}", error);
  };
  auto record = [&] {
    event.done = absl::Now();
    RecordEvent(event);
  };

  auto channel = NewChannel(socket_path, /*localhost_authority=*/false);
  if (!DialBlocking(channel, options_.watcher_dial_timeout, aborted)) {
    retry_later(fmt::format(
        "RegisterPlugin error -- dial failed at socket {}, err: failed to dial socket {}, err: "
        "context deadline exceeded",
        socket_path, socket_path));
    RecordEvent(event);
    return;
  }
  auto stub = pluginregistration::Registration::NewStub(channel);
  auto notify = [&](bool registered, const std::string& error) -> grpc::Status {
    pluginregistration::RegistrationStatus status;
    status.set_plugin_registered(registered);
    status.set_error(error);
    pluginregistration::RegistrationStatusResponse response;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.watcher_notify_timeout));
    TrackCall(&ctx);
    grpc::Status st = stub->NotifyRegistrationStatus(&ctx, status, &response);
    UntrackCall(&ctx);
    return st;
  };

  pluginregistration::PluginInfo info;
  grpc::Status status;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.watcher_get_info_timeout));
    TrackCall(&ctx);
    status = stub->GetInfo(&ctx, pluginregistration::InfoRequest(), &info);
    UntrackCall(&ctx);
  }
  if (!status.ok()) {
    retry_later(fmt::format(
        "RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket {}, err: {}",
        socket_path, GoGrpcError(status)));
    RecordEvent(event);
    return;
  }
  std::vector<std::string> versions(info.supported_versions().begin(),
                                    info.supported_versions().end());
  event.resource = info.name();
  event.endpoint = info.endpoint();
  event.version = GoList(versions);

  // This simulator only installs the device manager's handler.
  if (info.type() != kDevicePluginType) {
    std::string error = fmt::format(
        "RegisterPlugin error -- no handler registered for plugin type: {} at socket {}",
        info.type(), socket_path);
    retry_later(error);
    RecordEvent(event);
    notify(false, error);
    return;
  }
  const std::string endpoint = info.endpoint().empty() ? socket_path : info.endpoint();
  event.socket_path = endpoint;

  // handler.go ValidatePlugin.
  std::string validation_error;
  if (std::none_of(versions.begin(), versions.end(), IsSupportedVersion)) {
    validation_error = fmt::format("manager version, {}, is not among plugin supported versions {}",
                                   kVersion, GoList(versions));
  } else if (!IsExtendedResourceName(info.name())) {
    validation_error =
        fmt::format("invalid name of device plugin socket: the ResourceName {} is invalid",
                    GoQuote(info.name()));
  }
  if (!validation_error.empty()) {
    std::string error =
        "RegisterPlugin error -- plugin validation failed with err: " + validation_error;
    retry_later(error);
    RecordEvent(event);
    notify(false, error);
    return;
  }

  // AddPlugin to the actual state before RegisterPlugin, so a deletion during
  // registration is handled as a deregistration; no retries from here on.
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = watched_.find(socket_path);
    if (it != watched_.end() && it->second.identity == plugin->identity) {
      it->second.registered = true;
      it->second.name = info.name();
      it->second.endpoint = endpoint;
    }
  }
  // handler.go RegisterPlugin -> connectClient(name, endpoint): the endpoint
  // is dialed as given (an absolute path), not joined with device-plugins.
  std::string connect_error = ConnectClient(info.name(), endpoint, aborted, &event);
  if (!connect_error.empty()) {
    event.ok = false;
    event.error = "RegisterPlugin error -- plugin registration failed with err: " + connect_error;
    LogWarn(Component::kSim, "{}", event.error);
    record();
    notify(false, event.error);
    return;
  }
  // ConnectClient recorded the event before the plugin hears about it.
  grpc::Status notified = notify(true, "");
  if (!notified.ok()) {
    std::string error = fmt::format(
        "RegisterPlugin error -- failed to send registration status at socket {}, err: {}",
        socket_path, GoGrpcError(notified));
    LogWarn(Component::kSim, "{}", error);
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = events_.rbegin(); it != events_.rend(); ++it) {
      if (it->path == RegistrationPath::kPluginWatcher && it->socket_path == endpoint &&
          it->at == event.at) {
        it->error = error;
        break;
      }
    }
    NotifyLocked();
  }
}

// ------------------------------------------------------------- observations

bool KubeletSim::ExpiredLocked(const ResourceState& state) const {
  return state.stopped && state.stop_time != absl::InfinitePast() &&
         absl::Now() - state.stop_time > options_.endpoint_stop_grace;
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
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    uint64_t seen;
    {
      std::lock_guard<std::mutex> l(mu_);
      seen = generation_;
    }
    if (pred()) return true;
    std::unique_lock<std::mutex> l(mu_);
    if (!cv_.wait_until(l, absl::ToChronoTime(deadline),
                        [this, seen]()
                            ABSL_NO_THREAD_SAFETY_ANALYSIS { return generation_ != seen; })) {
      l.unlock();
      return pred();
    }
  }
}

// --------------------------------------------------------------- allocation

absl::StatusOr<std::shared_ptr<KubeletSim::Endpoint>> KubeletSim::CurrentEndpoint(
    const std::string& resource) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = resources_.find(resource);
  if (it == resources_.end() || !it->second.endpoint) {
    return absl::NotFoundError(
        fmt::format("endpoint not found in cache for a registered resource: {}", resource));
  }
  const auto& endpoint = it->second.endpoint;
  if (it->second.stopped || endpoint->disconnected) {
    // errEndpointStopped = "endpoint %v has been stopped" (%v of the Go struct).
    return absl::FailedPreconditionError(fmt::format("endpoint &{{{} {}}} has been stopped",
                                                     endpoint->socket_path, endpoint->resource));
  }
  return endpoint;
}

absl::StatusOr<v1beta1::AllocateResponse> KubeletSim::AllocateIds(
    const std::string& resource, const std::vector<std::string>& ids) {
  FABRIC_ASSIGN_OR_RETURN(std::shared_ptr<Endpoint> endpoint, CurrentEndpoint(resource));
  v1beta1::AllocateRequest request;
  auto* container = request.add_container_requests();
  for (const auto& id : ids) container->add_devices_ids(id);
  v1beta1::AllocateResponse response;
  grpc::ClientContext ctx;  // the kubelet sets no deadline on Allocate.
  TrackCall(&ctx);
  grpc::Status status = endpoint->stub->Allocate(&ctx, request, &response);
  UntrackCall(&ctx);
  {
    std::lock_guard<std::mutex> l(mu_);
    ++resources_[resource].allocate_calls;
    NotifyLocked();
  }
  if (!status.ok()) return absl::Status(FromGrpcStatus(status).code(), GoGrpcError(status));
  return response;
}

absl::StatusOr<v1beta1::PreferredAllocationResponse> KubeletSim::Preferred(
    const std::string& resource, const std::vector<std::string>& available,
    const std::vector<std::string>& must_include, int size) {
  FABRIC_ASSIGN_OR_RETURN(std::shared_ptr<Endpoint> endpoint, CurrentEndpoint(resource));
  v1beta1::PreferredAllocationRequest request;
  auto* container = request.add_container_requests();
  for (const auto& id : available) container->add_available_deviceids(id);
  for (const auto& id : must_include) container->add_must_include_deviceids(id);
  container->set_allocation_size(size);
  v1beta1::PreferredAllocationResponse response;
  grpc::ClientContext ctx;  // no deadline, as in the kubelet.
  TrackCall(&ctx);
  grpc::Status status = endpoint->stub->GetPreferredAllocation(&ctx, request, &response);
  UntrackCall(&ctx);
  {
    std::lock_guard<std::mutex> l(mu_);
    ++resources_[resource].preferred_calls;
    NotifyLocked();
  }
  if (!status.ok()) return absl::Status(FromGrpcStatus(status).code(), GoGrpcError(status));
  return response;
}

absl::Status KubeletSim::PreStart(const std::string& resource,
                                  const std::vector<std::string>& ids) {
  FABRIC_ASSIGN_OR_RETURN(std::shared_ptr<Endpoint> endpoint, CurrentEndpoint(resource));
  v1beta1::PreStartContainerRequest request;
  for (const auto& id : ids) request.add_devices_ids(id);
  v1beta1::PreStartContainerResponse response;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.pre_start_timeout));
  TrackCall(&ctx);
  grpc::Status status = endpoint->stub->PreStartContainer(&ctx, request, &response);
  UntrackCall(&ctx);
  {
    std::lock_guard<std::mutex> l(mu_);
    ++resources_[resource].pre_start_calls;
    NotifyLocked();
  }
  if (!status.ok()) return absl::Status(FromGrpcStatus(status).code(), GoGrpcError(status));
  return absl::OkStatus();
}

absl::StatusOr<v1beta1::ContainerAllocateResponse> KubeletSim::Allocate(
    const std::string& resource, int count, const std::string& pod, const std::string& container,
    std::vector<std::string>* chosen_ids) {
  if (count <= 0) return absl::InvalidArgumentError("kubelet-sim: count must be positive");
  const AllocationKey key{pod, container, resource};
  std::vector<std::string> candidates;
  bool ask_plugin = false;
  int needed = count;
  {
    // devicesToAllocate, in its order of checks.
    std::lock_guard<std::mutex> l(mu_);
    auto existing = allocations_.find(key);
    if (existing != allocations_.end()) {
      const int have = static_cast<int>(existing->second.device_ids.size());
      needed -= have;
      if (needed != 0) {
        return absl::InvalidArgumentError(
            fmt::format("pod {} container {} changed request for resource {} from {} to {}",
                        GoQuote(pod), GoQuote(container), GoQuote(resource), have, count));
      }
    }
    auto it = resources_.find(resource);
    if (it == resources_.end() || ExpiredLocked(it->second)) {
      return absl::FailedPreconditionError(
          fmt::format("cannot allocate unregistered device {}", resource));
    }
    const ResourceState& state = it->second;
    if (state.healthy.empty()) {
      return absl::FailedPreconditionError(fmt::format(
          "no healthy devices present; cannot allocate unhealthy devices {}", resource));
    }
    if (existing != allocations_.end()) {
      for (const auto& id : existing->second.device_ids) {
        if (!state.healthy.count(id)) {
          return absl::FailedPreconditionError(fmt::format(
              "previously allocated devices are no longer healthy; cannot allocate unhealthy "
              "devices {}",
              resource));
        }
      }
      // Container restart: the cached response is replayed, the plugin is not called.
      if (chosen_ids) *chosen_ids = existing->second.device_ids;
      return existing->second.response;
    }
    std::set<std::string> available;
    const auto& in_use = allocated_devices_[resource];
    for (const auto& id : state.healthy) {
      if (!in_use.count(id)) available.insert(id);
    }
    if (static_cast<int>(available.size()) < needed) {
      return absl::FailedPreconditionError(fmt::format(
          "requested number of devices unavailable for {}. Requested: {}, Available: {}", resource,
          needed, available.size()));
    }
    candidates = SortedNatural(available);
    if (!state.endpoint) {
      return absl::NotFoundError(
          fmt::format("endpoint not found in cache for a registered resource: {}", resource));
    }
    ask_plugin = state.endpoint->options.get_preferred_allocation_available();
  }

  // Without a topology-manager hint every candidate is "unaligned", so the
  // kubelet asks the plugin (if it advertised GetPreferredAllocation) with all
  // candidates, must_include = devices already chosen (none), size = request.
  std::vector<std::string> chosen;
  const std::set<std::string> candidate_set(candidates.begin(), candidates.end());
  if (ask_plugin) {
    auto preferred = Preferred(resource, candidates, {}, count);
    if (!preferred.ok()) {
      return absl::Status(
          preferred.status().code(),
          fmt::format("device plugin GetPreferredAllocation rpc failed with err: {}",
                      std::string(preferred.status().message())));
    }
    if (preferred->container_responses_size() > 0) {
      for (const auto& id : preferred->container_responses(0).deviceids()) {
        if (static_cast<int>(chosen.size()) == needed) break;
        if (candidate_set.count(id) &&
            std::find(chosen.begin(), chosen.end(), id) == chosen.end()) {
          chosen.push_back(id);
        }
      }
    }
  }
  for (const auto& id : candidates) {
    if (static_cast<int>(chosen.size()) == needed) break;
    if (std::find(chosen.begin(), chosen.end(), id) == chosen.end()) chosen.push_back(id);
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    allocated_devices_[resource].insert(chosen.begin(), chosen.end());
  }
  auto restore_allocated = [&] {
    std::lock_guard<std::mutex> l(mu_);
    auto& in_use = allocated_devices_[resource];
    for (const auto& id : chosen) in_use.erase(id);
  };

  auto response = AllocateIds(resource, chosen);
  if (!response.ok()) {
    restore_allocated();
    return response.status();
  }
  if (response->container_responses_size() == 0) {
    restore_allocated();
    return absl::InternalError(fmt::format("no containers return in allocation response &{{{}}}",
                                           response->ShortDebugString()));
  }

  AllocationRecord record;
  record.pod = pod;
  record.container = container;
  record.resource = resource;
  record.device_ids = chosen;
  record.response = response->container_responses(0);
  std::lock_guard<std::mutex> l(mu_);
  const ResourceState& state = resources_[resource];
  for (const auto& id : chosen) {
    const v1beta1::Device* device = nullptr;
    for (const auto& d : state.devices) {
      if (d.id() == id) device = &d;
    }
    if (device == nullptr || device->topology().nodes_size() == 0) {
      record.devices_per_numa[-1].push_back(id);  // nodeWithoutTopology
      continue;
    }
    for (const auto& node : device->topology().nodes()) {
      record.devices_per_numa[node.id()].push_back(id);
    }
  }
  allocations_[key] = record;
  WriteCheckpointLocked();
  NotifyLocked();
  if (chosen_ids) *chosen_ids = chosen;
  return record.response;
}

absl::Status KubeletSim::StartContainer(const std::string& pod, const std::string& container) {
  std::vector<AllocationRecord> records;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [key, record] : allocations_) {
      if (record.pod == pod && record.container == container) records.push_back(record);
    }
  }
  if (records.empty()) {
    return absl::NotFoundError(
        fmt::format("kubelet-sim: no allocation for pod {} container {}", pod, container));
  }
  for (const auto& record : records) {
    auto options = PluginOptions(record.resource);
    if (!options.has_value()) {
      return absl::NotFoundError(fmt::format(
          "endpoint not found in cache for a registered resource: {}", record.resource));
    }
    if (!options->pre_start_required()) continue;
    absl::Status status = PreStart(record.resource, record.device_ids);
    if (!status.ok()) {
      return absl::Status(status.code(),
                          fmt::format("device plugin PreStartContainer rpc failed with err: {}",
                                      std::string(status.message())));
    }
  }
  return absl::OkStatus();
}

void KubeletSim::RemovePod(const std::string& pod) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto it = allocations_.begin(); it != allocations_.end();) {
    if (it->second.pod == pod) {
      auto& in_use = allocated_devices_[it->second.resource];
      for (const auto& id : it->second.device_ids) in_use.erase(id);
      it = allocations_.erase(it);
    } else {
      ++it;
    }
  }
  WriteCheckpointLocked();
  NotifyLocked();
}

void KubeletSim::WriteCheckpointLocked() {
  if (!options_.write_checkpoint) return;
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& [key, record] : allocations_) {
    nlohmann::json per_numa = nlohmann::json::object();
    for (const auto& [node, ids] : record.devices_per_numa) per_numa[std::to_string(node)] = ids;
    std::string raw;
    record.response.SerializeToString(&raw);
    entries.push_back({{"PodUID", record.pod},
                       {"ContainerName", record.container},
                       {"ResourceName", record.resource},
                       {"DeviceIDs", per_numa},
                       {"AllocResp", absl::Base64Escape(raw)}});
  }
  nlohmann::json registered = nlohmann::json::object();
  for (const auto& [name, state] : resources_) {
    registered[name] = std::vector<std::string>(state.healthy.begin(), state.healthy.end());
  }
  nlohmann::json doc = {
      {"Data", {{"PodDeviceEntries", entries}, {"RegisteredDevices", registered}}},
      {"Checksum", 0}};
  absl::Status status = WriteFileAtomic(CheckpointPath(), doc.dump(), 0644);
  if (!status.ok()) LogWarn(Component::kSim, "writing checkpoint: {}", status.ToString());
}

}  // namespace fabric::sim
