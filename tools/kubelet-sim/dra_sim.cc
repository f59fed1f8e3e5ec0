#include "tools/kubelet-sim/dra_sim.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <set>

#include "absl/strings/match.h"
#include "agent/base/file_util.h"
#include "agent/base/grpc_deadline.h"
#include "agent/base/logging.h"
#include "agent/base/mono_clock.h"
#include "dra/health/v1alpha1/api.grpc.pb.h"
#include "dra/v1/api.grpc.pb.h"
#include "dra/v1beta1/api.grpc.pb.h"
#include "pluginregistration/v1/api.grpc.pb.h"
#include "tools/kubelet-sim/kubelet_rules.h"
#include "tools/kubelet-sim/kubelet_sim_internal.h"

namespace fabric::sim {
namespace {

namespace drav1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace drav1beta1 = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;

constexpr char kDraPluginType[] = "DRAPlugin";
constexpr char kV1Service[] = "v1.DRAPlugin";
constexpr char kV1beta1Service[] = "v1beta1.DRAPlugin";
// servicesSupportedByKubelet, newest first.
const std::vector<std::string>& KubeletServices() {
  static const std::vector<std::string> v = {kV1Service, kV1beta1Service};
  return v;
}

// The kubelet wraps a failed prepare this way in its event (observed:
// "Failed to prepare dynamic resources: prepare dynamic resources: ...").
std::string PrepareEvent(const std::string& err) {
  return "Failed to prepare dynamic resources: prepare dynamic resources: " + err;
}

std::string HealthName(::v1alpha1::HealthStatus h) {
  switch (h) {
    case ::v1alpha1::HEALTHY:
      return "Healthy";
    case ::v1alpha1::UNHEALTHY:
      return "Unhealthy";
    default:
      return "Unknown";
  }
}

template <typename Request>
void FillClaims(const std::vector<DraSimClaim>& claims, Request* r) {
  for (const DraSimClaim& c : claims) {
    auto* o = r->add_claims();
    o->set_namespace_(c.claim_namespace);
    o->set_name(c.name);
    o->set_uid(c.uid);
  }
}

const DraSimClaim* Lookup(const std::vector<DraSimClaim>& claims, const std::string& uid) {
  for (const DraSimClaim& c : claims) {
    if (c.uid == uid) return &c;
  }
  return nullptr;
}

}  // namespace

struct DraKubeletSim::Driver {
  std::string name;
  std::string endpoint;
  std::string service;
  std::string socket_path;
  std::shared_ptr<grpc::Channel> channel;
  // Guarded by the simulator's mu_.
  bool closed = false;
  grpc::ClientContext* health_ctx = nullptr;
  struct Seen {
    DraSimDeviceHealth health;
    int64_t timeout_seconds = 0;
    absl::Time received;
  };
  std::map<std::string, Seen> health;
  int health_messages = 0;
  std::thread health_thread;
};

DraKubeletSim::DraKubeletSim(std::string kubelet_root, DraSimOptions options)
    : plugins_registry_dir_(kubelet_root + "/plugins_registry"), options_(options) {}

DraKubeletSim::~DraKubeletSim() { Stop(); }

absl::Status DraKubeletSim::Start() {
  std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
  if (absl::Status s = MkdirAll(plugins_registry_dir_, 0750); !s.ok()) return s;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!stopping_) return absl::FailedPreconditionError("DRA simulator already running");
    stopping_ = false;
    watched_.clear();
  }
  watcher_ = std::thread([this] { WatcherLoop(); });
  return absl::OkStatus();
}

void DraKubeletSim::Stop() {
  std::lock_guard<std::mutex> lifecycle(lifecycle_mu_);
  std::map<std::string, std::shared_ptr<Driver>> drivers;
  std::vector<std::shared_ptr<Driver>> retired;
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
    drivers.swap(drivers_);
    retired.swap(retired_);
    for (auto& [name, d] : drivers) {
      d->closed = true;
      if (d->health_ctx) d->health_ctx->TryCancel();
    }
    for (auto& d : retired) {
      d->closed = true;
      if (d->health_ctx) d->health_ctx->TryCancel();
    }
  }
  cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  for (auto& [name, d] : drivers) {
    if (d->health_thread.joinable()) d->health_thread.join();
  }
  for (auto& d : retired) {
    if (d->health_thread.joinable()) d->health_thread.join();
  }
}

bool DraKubeletSim::Stopping() const {
  std::lock_guard<std::mutex> l(mu_);
  return stopping_;
}

void DraKubeletSim::Notify() { cv_.notify_all(); }

void DraKubeletSim::Record(DraSimRegistration r) {
  {
    std::lock_guard<std::mutex> l(mu_);
    registrations_.push_back(std::move(r));
  }
  Notify();
}

std::map<std::string, std::string> DraKubeletSim::Drivers() const {
  std::lock_guard<std::mutex> l(mu_);
  std::map<std::string, std::string> out;
  for (const auto& [name, d] : drivers_) out[name] = d->service;
  return out;
}

std::vector<DraSimRegistration> DraKubeletSim::Registrations() const {
  std::lock_guard<std::mutex> l(mu_);
  return registrations_;
}

std::vector<DraSimEvent> DraKubeletSim::Events() const {
  std::lock_guard<std::mutex> l(mu_);
  return events_;
}

std::map<std::string, DraSimDeviceHealth> DraKubeletSim::Health(const std::string& driver) const {
  std::lock_guard<std::mutex> l(mu_);
  std::map<std::string, DraSimDeviceHealth> out;
  auto it = drivers_.find(driver);
  if (it == drivers_.end()) return out;
  const absl::Time now = MonotonicNow();
  for (const auto& [key, seen] : it->second->health) {
    DraSimDeviceHealth h = seen.health;
    const absl::Duration timeout =
        seen.timeout_seconds > 0 ? absl::Seconds(seen.timeout_seconds) : options_.health_timeout;
    if (now - seen.received > timeout) h.health = "Unknown";
    out[key] = h;
  }
  return out;
}

int DraKubeletSim::HealthMessages(const std::string& driver) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = drivers_.find(driver);
  return it == drivers_.end() ? 0 : it->second->health_messages;
}

bool DraKubeletSim::WaitFor(const std::function<bool()>& pred, absl::Duration timeout) const {
  const absl::Time deadline = MonotonicNow() + timeout;
  while (true) {
    if (pred()) return true;
    const absl::Time now = MonotonicNow();
    if (now >= deadline) return pred();
    std::unique_lock<std::mutex> l(mu_);
    // Events notify; the short wait also covers time-based changes.
    cv_.wait_for(l, absl::ToChronoNanoseconds(std::min(deadline - now, absl::Milliseconds(50))));
  }
}

std::shared_ptr<DraKubeletSim::Driver> DraKubeletSim::FindDriver(const std::string& name) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = drivers_.find(name);
  return it == drivers_.end() ? nullptr : it->second;
}

// ----------------------------------------------------------- plugin watcher

void DraKubeletSim::WatcherLoop() {
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
    for (auto& [path, w] : Reconcile()) {
      auto done = std::make_shared<std::atomic<bool>>(false);
      operations.push_back({std::thread([this, path = path, identity = w.identity, done] {
                              RegisterSocket(path, identity);
                              done->store(true);
                            }),
                            done});
    }
    reap(false);
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, absl::ToChronoNanoseconds(options_.reconcile_period),
                 [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping_; });
    if (stopping_) break;
  }
  reap(true);
}

std::vector<std::pair<std::string, DraKubeletSim::Watched>> DraKubeletSim::Reconcile() {
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
  std::vector<std::pair<std::string, std::string>> to_deregister;  // driver, socket
  std::vector<std::pair<std::string, Watched>> to_register;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto w = watched_.begin(); w != watched_.end();) {
      auto d = desired.find(w->first);
      if (d == desired.end() || d->second != w->second.identity) {
        if (w->second.registered) to_deregister.emplace_back(w->second.driver, w->first);
        w = watched_.erase(w);
      } else {
        ++w;
      }
    }
    const absl::Time now = MonotonicNow();
    for (const auto& [path, identity] : desired) {
      Watched& w = watched_[path];
      if (w.identity == 0) w.identity = identity;
      if (!w.registered && !w.pending && now >= w.next_attempt) {
        w.pending = true;
        to_register.emplace_back(path, w);
      }
    }
  }
  for (const auto& [driver, socket] : to_deregister) Deregister(driver, socket);
  return to_register;
}

void DraKubeletSim::RetryLater(const std::string& socket_path, uint64_t identity) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = watched_.find(socket_path);
  if (it == watched_.end() || it->second.identity != identity) return;
  Watched& w = it->second;
  w.pending = false;
  w.backoff = w.backoff == absl::ZeroDuration() ? options_.initial_backoff
                                                : std::min(w.backoff * 2, options_.max_backoff);
  w.next_attempt = MonotonicNow() + w.backoff;
}

void DraKubeletSim::RegisterSocket(const std::string& socket_path, uint64_t identity) {
  DraSimRegistration reg;
  reg.socket_path = socket_path;
  auto aborted = [this] { return Stopping(); };
  auto channel = internal::NewChannel(socket_path, /*localhost_authority=*/false);
  if (!internal::DialBlocking(channel, options_.dial_timeout, aborted)) {
    reg.error = fmt::format(
        "RegisterPlugin error -- dial failed at socket {}, err: failed to dial socket {}, err: "
        "context deadline exceeded",
        socket_path, socket_path);
    LogWarn(Component::kSim, "DRA: {}", reg.error);
    RetryLater(socket_path, identity);
    Record(std::move(reg));
    return;
  }
  auto stub = pluginregistration::Registration::NewStub(channel);
  auto notify = [&](bool ok, const std::string& error) {
    pluginregistration::RegistrationStatus status;
    status.set_plugin_registered(ok);
    status.set_error(error);
    pluginregistration::RegistrationStatusResponse response;
    grpc::ClientContext ctx;
    ctx.set_deadline(GrpcDeadlineAfter(options_.notify_timeout));
    return stub->NotifyRegistrationStatus(&ctx, status, &response);
  };
  auto fail = [&](const std::string& error) {
    reg.error = error;
    LogWarn(Component::kSim, "DRA: {}", error);
    RetryLater(socket_path, identity);
    Record(reg);
    notify(false, error);
  };

  pluginregistration::PluginInfo info;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(GrpcDeadlineAfter(options_.get_info_timeout));
    grpc::Status s = stub->GetInfo(&ctx, pluginregistration::InfoRequest(), &info);
    if (!s.ok()) {
      reg.error = fmt::format(
          "RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket {}, "
          "err: {}",
          socket_path, GoGrpcError(s));
      RetryLater(socket_path, identity);
      Record(std::move(reg));
      return;
    }
  }
  reg.type = info.type();
  reg.driver = info.name();
  reg.endpoint = info.endpoint().empty() ? socket_path : info.endpoint();
  reg.supported_versions.assign(info.supported_versions().begin(), info.supported_versions().end());
  if (info.type() != kDraPluginType) {
    fail(fmt::format(
        "RegisterPlugin error -- no handler registered for plugin type: {} at socket {}",
        info.type(), socket_path));
    return;
  }
  // ValidatePlugin (validateSupportedServices): the first of the plugin's
  // services the kubelet supports.
  if (reg.supported_versions.empty()) {
    fail(fmt::format(
        "RegisterPlugin error -- plugin validation failed with err: invalid supported gRPC "
        "versions of DRA driver plugin {} at endpoint {}: empty list of supported gRPC services "
        "(aka supported versions)",
        info.name(), reg.endpoint));
    return;
  }
  for (const std::string& s : reg.supported_versions) {
    if (std::find(KubeletServices().begin(), KubeletServices().end(), s) !=
        KubeletServices().end()) {
      reg.chosen_service = s;
      break;
    }
  }
  if (reg.chosen_service.empty()) {
    fail(fmt::format(
        "RegisterPlugin error -- plugin validation failed with err: invalid supported gRPC "
        "versions of DRA driver plugin {} at endpoint {}: none of services supported by the "
        "plugin ({}) are supported by the kubelet ({})",
        info.name(), reg.endpoint, GoQuoteList(reg.supported_versions),
        GoQuoteList(KubeletServices())));
    return;
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = watched_.find(socket_path);
    if (it != watched_.end() && it->second.identity == identity) {
      it->second.registered = true;
      it->second.pending = false;
      it->second.driver = info.name();
    }
  }
  // RegisterPlugin: connect to the endpoint (1 s to become ready).
  auto endpoint_channel = internal::NewChannel(reg.endpoint, /*localhost_authority=*/false);
  if (!internal::DialBlocking(endpoint_channel, options_.connect_timeout, aborted)) {
    reg.error = fmt::format(
        "RegisterPlugin error -- plugin registration failed with err: failed to connect to DRA "
        "plugin {} at {}: timed out waiting for gRPC connection to be ready",
        info.name(), reg.endpoint);
    LogWarn(Component::kSim, "DRA: {}", reg.error);
    Record(reg);
    notify(false, reg.error);
    return;
  }
  auto driver = std::make_shared<Driver>();
  driver->name = info.name();
  driver->endpoint = reg.endpoint;
  driver->service = reg.chosen_service;
  driver->socket_path = socket_path;
  driver->channel = endpoint_channel;
  std::shared_ptr<Driver> replaced;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return;
    auto it = drivers_.find(driver->name);
    if (it != drivers_.end()) {
      replaced = it->second;  // the newest registration wins
      replaced->closed = true;
      if (replaced->health_ctx) replaced->health_ctx->TryCancel();
      retired_.push_back(replaced);
    }
    drivers_[driver->name] = driver;
    reg.ok = true;
    registrations_.push_back(reg);
    if (options_.watch_health) {
      driver->health_thread = std::thread([this, driver] { HealthLoop(driver); });
    }
  }
  Notify();
  LogInfo(Component::kSim, "DRA: registered driver {} at {} ({})", driver->name, driver->endpoint,
          driver->service);
  grpc::Status notified = notify(true, "");
  if (!notified.ok()) {
    LogWarn(Component::kSim,
            "DRA: RegisterPlugin error -- failed to send registration status at socket {}, err: {}",
            socket_path, GoGrpcError(notified));
  }
}

void DraKubeletSim::Deregister(const std::string& driver_name, const std::string& socket_path) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = drivers_.find(driver_name);
  if (it == drivers_.end() || it->second->socket_path != socket_path) return;
  LogInfo(Component::kSim, "DRA: deregistering driver {} ({} deleted)", driver_name, socket_path);
  it->second->closed = true;
  if (it->second->health_ctx) it->second->health_ctx->TryCancel();
  retired_.push_back(it->second);
  drivers_.erase(it);
  cv_.notify_all();
}

// ------------------------------------------------------------------- health

void DraKubeletSim::HealthLoop(std::shared_ptr<Driver> driver) {
  auto stub = ::v1alpha1::DRAResourceHealth::NewStub(driver->channel);
  while (true) {
    grpc::ClientContext ctx;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (driver->closed) return;
      driver->health_ctx = &ctx;
    }
    auto reader = stub->NodeWatchResources(&ctx, ::v1alpha1::NodeWatchResourcesRequest());
    ::v1alpha1::NodeWatchResourcesResponse msg;
    while (reader->Read(&msg)) {
      std::lock_guard<std::mutex> l(mu_);
      // updateHealthInfo: the message is the driver's full state.
      std::set<std::string> reported;
      const absl::Time now = MonotonicNow();
      for (const auto& d : msg.devices()) {
        const std::string key = d.device().pool_name() + "/" + d.device().device_name();
        reported.insert(key);
        Driver::Seen& seen = driver->health[key];
        seen.health = {HealthName(d.health()), d.message(), d.last_updated_time()};
        seen.timeout_seconds = d.health_check_timeout_seconds();
        seen.received = now;
      }
      for (auto& [key, seen] : driver->health) {
        if (!reported.count(key)) seen.health.health = "Unknown";
      }
      ++driver->health_messages;
      cv_.notify_all();
    }
    grpc::Status status = reader->Finish();
    {
      std::lock_guard<std::mutex> l(mu_);
      driver->health_ctx = nullptr;
      if (driver->closed) return;
    }
    if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      LogInfo(Component::kSim, "DRA: driver {} does not implement the health service",
              driver->name);
      return;
    }
    LogInfo(Component::kSim, "DRA: health stream of {} ended: {}", driver->name,
            status.ok() ? std::string("OK") : GoGrpcError(status));
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, absl::ToChronoNanoseconds(options_.health_retry),
                 [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return driver->closed; });
    if (driver->closed) return;
  }
}

// --------------------------------------------------------- prepare/unprepare

absl::StatusOr<std::map<std::string, std::vector<DraSimDevice>>> DraKubeletSim::PrepareResources(
    const std::string& driver_name, const std::vector<DraSimClaim>& claims) {
  auto failed = [&](const std::string& err) {
    DraSimEvent event{"FailedPrepareDynamicResources", PrepareEvent(err)};
    LogWarn(Component::kSim, "DRA: {}: {}", event.reason, event.message);
    {
      std::lock_guard<std::mutex> l(mu_);
      events_.push_back(event);
    }
    Notify();
    return absl::FailedPreconditionError(event.message);
  };
  std::shared_ptr<Driver> driver = FindDriver(driver_name);
  if (!driver) {
    return failed(fmt::format(
        "failed to get gRPC client for driver {}: plugin name {} not found in the list of "
        "registered DRA plugins",
        driver_name, driver_name));
  }
  drav1::NodePrepareResourcesRequest request;
  FillClaims(claims, &request);
  drav1::NodePrepareResourcesResponse response;
  grpc::Status status;
  grpc::ClientContext ctx;
  ctx.set_deadline(GrpcDeadlineAfter(options_.call_timeout));
  if (driver->service == kV1beta1Service) {
    drav1beta1::NodePrepareResourcesRequest beta;
    FillClaims(claims, &beta);
    drav1beta1::NodePrepareResourcesResponse beta_response;
    status = drav1beta1::DRAPlugin::NewStub(driver->channel)
                 ->NodePrepareResources(&ctx, beta, &beta_response);
    // V1Beta1ClientWrapper: the same fields into the v1 message.
    for (const auto& [uid, r] : beta_response.claims()) {
      auto& o = (*response.mutable_claims())[uid];
      o.set_error(r.error());
      for (const auto& d : r.devices()) {
        auto* od = o.add_devices();
        *od->mutable_request_names() = d.request_names();
        od->set_pool_name(d.pool_name());
        od->set_device_name(d.device_name());
        *od->mutable_cdi_device_ids() = d.cdi_device_ids();
      }
    }
  } else {
    status =
        drav1::DRAPlugin::NewStub(driver->channel)->NodePrepareResources(&ctx, request, &response);
  }
  if (!status.ok()) return failed("NodePrepareResources: " + GoGrpcError(status));
  std::map<std::string, std::vector<DraSimDevice>> out;
  // Go ranges over the map in random order; sorted here so runs repeat.
  std::map<std::string, const drav1::NodePrepareResourceResponse*> results;
  for (const auto& [uid, r] : response.claims()) results[uid] = &r;
  for (const auto& [uid, r] : results) {
    const DraSimClaim* asked = Lookup(claims, uid);
    if (asked == nullptr) {
      return failed(
          fmt::format("NodePrepareResources returned result for unknown claim UID {}", uid));
    }
    if (!r->error().empty()) {
      return failed(fmt::format("NodePrepareResources failed for claim {}/{}: {}",
                                asked->claim_namespace, asked->name, r->error()));
    }
    std::vector<DraSimDevice>& devices = out[uid];
    for (const auto& d : r->devices()) {
      devices.push_back({{d.request_names().begin(), d.request_names().end()},
                         d.pool_name(),
                         d.device_name(),
                         {d.cdi_device_ids().begin(), d.cdi_device_ids().end()}});
    }
  }
  const int unfinished = static_cast<int>(claims.size()) - response.claims_size();
  if (unfinished != 0) {
    return failed(fmt::format("NodePrepareResources left out {} claims", unfinished));
  }
  return out;
}

absl::Status DraKubeletSim::UnprepareResources(const std::string& driver_name,
                                               const std::vector<DraSimClaim>& claims) {
  std::shared_ptr<Driver> driver = FindDriver(driver_name);
  if (!driver) {
    return absl::FailedPreconditionError(fmt::format(
        "failed to get gRPC client for driver {}: plugin name {} not found in the list of "
        "registered DRA plugins",
        driver_name, driver_name));
  }
  drav1::NodeUnprepareResourcesResponse response;
  grpc::Status status;
  grpc::ClientContext ctx;
  ctx.set_deadline(GrpcDeadlineAfter(options_.call_timeout));
  if (driver->service == kV1beta1Service) {
    drav1beta1::NodeUnprepareResourcesRequest beta;
    FillClaims(claims, &beta);
    drav1beta1::NodeUnprepareResourcesResponse beta_response;
    status = drav1beta1::DRAPlugin::NewStub(driver->channel)
                 ->NodeUnprepareResources(&ctx, beta, &beta_response);
    for (const auto& [uid, r] : beta_response.claims()) {
      (*response.mutable_claims())[uid].set_error(r.error());
    }
  } else {
    drav1::NodeUnprepareResourcesRequest request;
    FillClaims(claims, &request);
    status = drav1::DRAPlugin::NewStub(driver->channel)
                 ->NodeUnprepareResources(&ctx, request, &response);
  }
  if (!status.ok()) {
    return absl::FailedPreconditionError("NodeUnprepareResources: " + GoGrpcError(status));
  }
  std::map<std::string, std::string> results;
  for (const auto& [uid, r] : response.claims()) results[uid] = r.error();
  for (const auto& [uid, error] : results) {
    const DraSimClaim* asked = Lookup(claims, uid);
    if (asked == nullptr) {
      return absl::FailedPreconditionError(
          fmt::format("NodeUnprepareResources returned result for unknown claim UID {}", uid));
    }
    if (!error.empty()) {
      return absl::FailedPreconditionError(
          fmt::format("NodeUnprepareResources failed for claim {}/{}: {}", asked->claim_namespace,
                      asked->name, error));
    }
  }
  const int unfinished = static_cast<int>(claims.size()) - response.claims_size();
  if (unfinished != 0) {
    return absl::FailedPreconditionError(
        fmt::format("NodeUnprepareResources left out {} claims", unfinished));
  }
  return absl::OkStatus();
}

}  // namespace fabric::sim
