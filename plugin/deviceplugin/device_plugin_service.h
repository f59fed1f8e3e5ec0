// The kubelet-facing gRPC services of one pool, on the callback API:
// v1beta1.DevicePlugin (ListAndWatch as a ServerWriteReactor that coalesces
// updates) and, in plugin-watcher mode, pluginregistration.Registration.
#ifndef FABRIC_PLUGIN_DEVICEPLUGIN_DEVICE_PLUGIN_SERVICE_H_
#define FABRIC_PLUGIN_DEVICEPLUGIN_DEVICE_PLUGIN_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "agent/pools/pool_state.h"
#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "pluginregistration/v1/api.grpc.pb.h"

namespace fabric {

class DevicePluginService final : public v1beta1::DevicePlugin::CallbackService {
 public:
  // Asked by Allocate, after the request checks out and before the grant is
  // claimed: an error refuses the Allocate with its message (e.g. the pool's
  // CDI spec cannot be written, so the names Allocate returns would not
  // resolve). Called on gRPC threads; must not block.
  using AllocateCheck = std::function<absl::Status(const PoolSnapshot& snap)>;

  explicit DevicePluginService(std::shared_ptr<PoolState> pool, AllocateCheck check = nullptr)
      : pool_(std::move(pool)), check_(std::move(check)) {
    published_.store(true, std::memory_order_release);
  }
  ~DevicePluginService() override { (void)returned_.load(std::memory_order_acquire); }

  grpc::ServerUnaryReactor* GetDevicePluginOptions(grpc::CallbackServerContext* ctx,
                                                   const v1beta1::Empty* req,
                                                   v1beta1::DevicePluginOptions* resp) override;
  grpc::ServerWriteReactor<v1beta1::ListAndWatchResponse>* ListAndWatch(
      grpc::CallbackServerContext* ctx, const v1beta1::Empty* req) override;
  grpc::ServerUnaryReactor* GetPreferredAllocation(
      grpc::CallbackServerContext* ctx, const v1beta1::PreferredAllocationRequest* req,
      v1beta1::PreferredAllocationResponse* resp) override;
  grpc::ServerUnaryReactor* Allocate(grpc::CallbackServerContext* ctx,
                                     const v1beta1::AllocateRequest* req,
                                     v1beta1::AllocateResponse* resp) override;
  grpc::ServerUnaryReactor* PreStartContainer(grpc::CallbackServerContext* ctx,
                                              const v1beta1::PreStartContainerRequest* req,
                                              v1beta1::PreStartContainerResponse* resp) override;

 private:
  // gRPC hands this object to its threads (BuildAndStart, then a call), and
  // Server::Shutdown waits for running handlers before the object is
  // destroyed, through libgrpc's own synchronisation, which TSan cannot see in
  // Debian's uninstrumented build. An Entry in each handler states both edges
  // in code TSan sees: acquire what the constructor released, release to the
  // destructor. It orders no handler after another.
  class Entry {
   public:
    explicit Entry(const DevicePluginService* s) : s_(s) {
      (void)s_->published_.load(std::memory_order_acquire);
    }
    ~Entry() { s_->returned_.fetch_add(1, std::memory_order_release); }

   private:
    const DevicePluginService* s_;
  };
  std::shared_ptr<PoolState> pool_;
  const AllocateCheck check_;
  std::atomic<bool> published_{false};
  mutable std::atomic<uint64_t> returned_{0};
};

// Plugin-watcher registration: GetInfo names our resource and socket;
// NotifyRegistrationStatus reports the kubelet's verdict through `on_status`.
class WatcherRegistrationService final : public pluginregistration::Registration::CallbackService {
 public:
  using StatusCallback = std::function<void(bool registered, const std::string& error)>;
  WatcherRegistrationService(std::string resource, std::string endpoint, StatusCallback on_status)
      : resource_(std::move(resource)),
        endpoint_(std::move(endpoint)),
        on_status_(std::move(on_status)) {
    published_.store(true, std::memory_order_release);
  }

  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* ctx,
                                    const pluginregistration::InfoRequest* req,
                                    pluginregistration::PluginInfo* resp) override;
  grpc::ServerUnaryReactor* NotifyRegistrationStatus(
      grpc::CallbackServerContext* ctx, const pluginregistration::RegistrationStatus* req,
      pluginregistration::RegistrationStatusResponse* resp) override;

 private:
  const std::string resource_;
  const std::string endpoint_;
  StatusCallback on_status_;
  void Published() const { (void)published_.load(std::memory_order_acquire); }
  std::atomic<bool> published_{false};  // as in DevicePluginService
};

}  // namespace fabric

#endif  // FABRIC_PLUGIN_DEVICEPLUGIN_DEVICE_PLUGIN_SERVICE_H_
