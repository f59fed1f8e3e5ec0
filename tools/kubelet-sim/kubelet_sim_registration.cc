// KubeletSim: the Register path, ListAndWatch, and the plugin watcher.
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
#include "agent/base/logging.h"
#include "agent/base/mono_clock.h"
#include "agent/base/status_macros.h"
#include "pluginregistration/v1/api.grpc.pb.h"
#include "tools/kubelet-sim/kubelet_rules.h"
#include "tools/kubelet-sim/kubelet_sim.h"
#include "tools/kubelet-sim/kubelet_sim_internal.h"

namespace fabric::sim {

using internal::DialBlocking;
using internal::IsSupportedVersion;
using internal::kDevicePluginType;
using internal::kHealthy;
using internal::kVersion;
using internal::NewChannel;
using internal::SupportedVersions;

// ------------------------------------------------------------- registration

std::string KubeletSim::HandleRegister(const v1beta1::RegisterRequest& request,
                                       grpc::ServerContext* ctx) {
  RegistrationEvent event;
  event.path = RegistrationPath::kKubeletSocket;
  event.resource = request.resource_name();
  event.endpoint = request.endpoint();
  event.version = request.version();
  event.at = MonotonicNow();
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
  } else if (options_.version == KubeletVersion::kV1_20) {
    // v1.20 manager.go Register: `go m.addEndpoint(r)`, then success. The dial
    // (10 s, blocking) and the endpoint's options (from the request) follow on
    // their own; a failure is only logged by the kubelet.
    event.socket_path = GoJoinPath(device_plugin_dir_ + "/", request.endpoint());
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return "kubelet-sim is shutting down";
    connect_threads_.emplace_back([this, event, options = request.options()]() mutable {
      std::string err = ConnectClient(
          event.resource, event.socket_path,
          [this] {
            std::lock_guard<std::mutex> l(mu_);
            return stopping_;
          },
          &event, &options);
      if (err.empty()) return;
      event.done = MonotonicNow();
      event.ok = false;
      event.error = err;
      LogWarn(Component::kSim, "v1.20: registered {} but its endpoint failed: {}", event.resource,
              err);
      RecordEvent(std::move(event));
    });
    return "";
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
  event.done = MonotonicNow();
  event.ok = false;
  event.error = error;
  LogWarn(Component::kSim, "Register {} rejected: {}", event.resource, error);
  RecordEvent(std::move(event));
  return error;
}

std::string KubeletSim::ConnectClient(const std::string& resource, const std::string& socket_path,
                                      const std::function<bool()>& aborted,
                                      RegistrationEvent* event,
                                      const v1beta1::DevicePluginOptions* given_options) {
  // v1.20 dials without grpc.WithAuthority("localhost").
  auto channel = NewChannel(socket_path, options_.version != KubeletVersion::kV1_20);
  if (!DialBlocking(channel, options_.dial_timeout, aborted)) {
    // grpc.DialContext returns ctx.Err() when the blocking dial times out.
    return "failed to dial device plugin: context deadline exceeded";
  }
  auto stub = v1beta1::DevicePlugin::NewStub(channel);

  // manager.go PluginConnected: options first, no deadline (v1.20: from the request).
  v1beta1::DevicePluginOptions plugin_options;
  grpc::Status status;
  if (given_options != nullptr) {
    plugin_options = *given_options;
  } else {
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
  event->done = MonotonicNow();
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
    state.stop_time = MonotonicNow();
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
    const absl::Time now = MonotonicNow();
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
  event.at = MonotonicNow();
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
      w.next_attempt = MonotonicNow() + w.backoff;
    }
    event.done = MonotonicNow();
    event.ok = false;
    event.error = error;
    LogWarn(Component::kSim, "{}", error);
  };
  auto record = [&] {
    event.done = MonotonicNow();
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
    ctx.set_deadline(GrpcDeadlineAfter(options_.watcher_notify_timeout));
    TrackCall(&ctx);
    grpc::Status st = stub->NotifyRegistrationStatus(&ctx, status, &response);
    UntrackCall(&ctx);
    return st;
  };

  pluginregistration::PluginInfo info;
  grpc::Status status;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(GrpcDeadlineAfter(options_.watcher_get_info_timeout));
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

}  // namespace fabric::sim
