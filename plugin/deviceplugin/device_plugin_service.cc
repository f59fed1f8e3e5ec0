#include "plugin/deviceplugin/device_plugin_service.h"

#include <algorithm>
#include <atomic>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "agent/base/grpc_status.h"
#include "agent/base/logging.h"
#include "plugin/deviceplugin/allocation.h"

namespace fabric {
namespace {

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, grpc::Status s) {
  grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
  r->Finish(std::move(s));
  return r;
}

// One open ListAndWatch stream. Only the newest device list matters, so a list
// that arrives while a write is in flight replaces any older pending one.
class ListAndWatchReactor final : public grpc::ServerWriteReactor<v1beta1::ListAndWatchResponse>,
                                  public PoolSubscriber {
 public:
  explicit ListAndWatchReactor(std::shared_ptr<PoolState> pool) : pool_(std::move(pool)) {
    pool_->Subscribe(this);  // pushes the first list, ordered with later pushes
    constructed_.store(true, std::memory_order_release);
  }

  void Push(std::shared_ptr<const PoolSnapshot> snap) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    pending_ = std::move(snap);
    if (!writing_) StartNextLocked();
  }

  void Close() override {
    std::lock_guard<std::mutex> lock(mu_);
    closing_ = true;
    if (!writing_) FinishLocked(grpc::Status::OK);
  }

  void OnWriteDone(bool ok) override {
    Constructed();
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    in_flight_.reset();
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
      return;
    }
    if (closing_) {
      FinishLocked(grpc::Status::OK);
    } else if (pending_) {
      StartNextLocked();
    }
  }

  void OnCancel() override {
    Constructed();
    std::lock_guard<std::mutex> lock(mu_);
    if (!writing_)
      FinishLocked(grpc::Status::CANCELLED);
    else
      closing_ = true;
  }

  void OnDone() override {
    Constructed();
    // gRPC calls OnDone after every other callback and Finish returned; they
    // all ran under mu_, so taking it shows TSan that order too.
    { std::lock_guard<std::mutex> lock(mu_); }
    pool_->Unsubscribe(this);
    delete this;
  }

 private:
  void StartNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    in_flight_ = MakeDeviceList(*pending_);
    pending_.reset();
    writing_ = true;
    pool_->stats().list_and_watch_messages++;
    StartWrite(in_flight_.get());
  }

  void FinishLocked(grpc::Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(std::move(s));
  }

  // gRPC binds the reactor and runs its callbacks on its own threads through
  // libgrpc's synchronisation, invisible to TSan in Debian's uninstrumented
  // build: a release at the end of the constructor and an acquire at the start
  // of each callback state that edge (it orders no callback after another).
  void Constructed() const { (void)constructed_.load(std::memory_order_acquire); }

  std::shared_ptr<PoolState> pool_;
  std::atomic<bool> constructed_{false};
  std::mutex mu_;
  std::shared_ptr<const PoolSnapshot> pending_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const v1beta1::ListAndWatchResponse> in_flight_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerUnaryReactor* DevicePluginService::GetDevicePluginOptions(
    grpc::CallbackServerContext* ctx, const v1beta1::Empty*, v1beta1::DevicePluginOptions* resp) {
  Entry entry(this);
  resp->set_pre_start_required(false);
  resp->set_get_preferred_allocation_available(true);
  return Done(ctx, grpc::Status::OK);
}

grpc::ServerWriteReactor<v1beta1::ListAndWatchResponse>* DevicePluginService::ListAndWatch(
    grpc::CallbackServerContext*, const v1beta1::Empty*) {
  Entry entry(this);
  LogInfo(Component::kPlugin, "{}: ListAndWatch stream opened", pool_->resource());
  return new ListAndWatchReactor(pool_);
}

grpc::ServerUnaryReactor* DevicePluginService::GetPreferredAllocation(
    grpc::CallbackServerContext* ctx, const v1beta1::PreferredAllocationRequest* req,
    v1beta1::PreferredAllocationResponse* resp) {
  Entry entry(this);
  pool_->stats().preferred_calls++;
  auto snap = pool_->snapshot();
  for (const auto& creq : req->container_requests()) {
    std::vector<std::string> available(creq.available_deviceids().begin(),
                                       creq.available_deviceids().end());
    std::vector<std::string> must(creq.must_include_deviceids().begin(),
                                  creq.must_include_deviceids().end());
    auto ids = PreferredAllocation(*snap, available, must, creq.allocation_size());
    auto* out = resp->add_container_responses();
    for (auto& id : ids) out->add_deviceids(std::move(id));
  }
  return Done(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* DevicePluginService::Allocate(grpc::CallbackServerContext* ctx,
                                                        const v1beta1::AllocateRequest* req,
                                                        v1beta1::AllocateResponse* resp) {
  Entry entry(this);
  const auto start = std::chrono::steady_clock::now();
  pool_->stats().allocate_calls++;
  auto snap = pool_->snapshot();
  grpc::Status status = grpc::Status::OK;
  if (req->container_requests().empty()) {
    status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat(snap->resource, ": no container requests"));
  }
  std::vector<std::string> notes;
  std::vector<engine_env::GivenGid> given;
  for (const auto& creq : req->container_requests()) {
    auto c = AllocateContainer(*snap, creq);
    if (!c.ok()) {
      status = ToGrpcStatus(c.status());
      break;
    }
    *resp->add_container_responses() = std::move(c->response);
    notes.insert(notes.end(), c->notes.begin(), c->notes.end());
    given.insert(given.end(), c->given.begin(), c->given.end());
  }
  if (status.ok() && check_) status = ToGrpcStatus(check_(*snap));
  if (status.ok()) {
    // Record the grant with the pools before answering: a device granted here
    // is withdrawn from conflicting pools now, and a grant that collides with
    // one made moments ago through another pool is refused, loudly.
    std::vector<std::string> ids;
    for (const auto& c : req->container_requests()) {
      ids.insert(ids.end(), c.devices_ids().begin(), c.devices_ids().end());
    }
    status = ToGrpcStatus(pool_->Claim(ids));
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!status.ok()) {
    pool_->stats().allocate_errors++;
    resp->Clear();
    LogWarn(Component::kPlugin, "Allocate refused: {}", status.error_message());
  } else {
    pool_->stats().allocate_ok++;
    std::string ids;
    for (const auto& c : req->container_requests()) {
      for (const auto& id : c.devices_ids()) ids += (ids.empty() ? "" : ",") + id;
    }
    LogInfo(Component::kPlugin, "{}: allocated {}", snap->resource, ids);
    // What the GID index variables named, so a later table change is seen.
    pool_->gid_ledger().Record(given, snap->mode == PoolMode::kExclusive);
    // Once per distinct reason: several containers usually share one.
    std::sort(notes.begin(), notes.end());
    notes.erase(std::unique(notes.begin(), notes.end()), notes.end());
    for (const std::string& n : notes) {
      LogInfo(Component::kPlugin, "{}: engine env for {}: {}", snap->resource, ids, n);
    }
  }
  pool_->stats().allocate_latency.Observe(secs);
  return Done(ctx, std::move(status));
}

grpc::ServerUnaryReactor* DevicePluginService::PreStartContainer(
    grpc::CallbackServerContext* ctx, const v1beta1::PreStartContainerRequest*,
    v1beta1::PreStartContainerResponse*) {
  Entry entry(this);
  return Done(ctx, grpc::Status::OK);  // not required (pre_start_required = false)
}

grpc::ServerUnaryReactor* WatcherRegistrationService::GetInfo(
    grpc::CallbackServerContext* ctx, const pluginregistration::InfoRequest*,
    pluginregistration::PluginInfo* resp) {
  Published();
  resp->set_type("DevicePlugin");
  resp->set_name(resource_);
  resp->set_endpoint(endpoint_);
  resp->add_supported_versions("v1beta1");
  return Done(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* WatcherRegistrationService::NotifyRegistrationStatus(
    grpc::CallbackServerContext* ctx, const pluginregistration::RegistrationStatus* req,
    pluginregistration::RegistrationStatusResponse*) {
  Published();
  if (req->plugin_registered()) {
    LogInfo(Component::kRegistration, "{}: registered through the plugin watcher", resource_);
  } else {
    LogError(Component::kRegistration, "{}: plugin watcher refused registration: {}", resource_,
             req->error());
  }
  if (on_status_) on_status_(req->plugin_registered(), req->error());
  return Done(ctx, grpc::Status::OK);
}

}  // namespace fabric
