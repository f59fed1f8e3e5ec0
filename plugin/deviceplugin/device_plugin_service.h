// The kubelet-facing gRPC services of one pool, on the callback API:
// v1beta1.DevicePlugin (ListAndWatch as a ServerWriteReactor that coalesces
// updates) and, in plugin-watcher mode, pluginregistration.Registration.
#ifndef FABRIC_PLUGIN_DEVICEPLUGIN_DEVICE_PLUGIN_SERVICE_H_
#define FABRIC_PLUGIN_DEVICEPLUGIN_DEVICE_PLUGIN_SERVICE_H_

#include <functional>
#include <memory>
#include <string>

#include "agent/pools/pool_state.h"
#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "pluginregistration/v1/api.grpc.pb.h"

namespace fabric {

class DevicePluginService final : public v1beta1::DevicePlugin::CallbackService {
 public:
  explicit DevicePluginService(std::shared_ptr<PoolState> pool) : pool_(std::move(pool)) {}

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
  std::shared_ptr<PoolState> pool_;
};

// Plugin-watcher registration: GetInfo names our resource and socket;
// NotifyRegistrationStatus reports the kubelet's verdict through `on_status`.
class WatcherRegistrationService final : public pluginregistration::Registration::CallbackService {
 public:
  using StatusCallback = std::function<void(bool registered, const std::string& error)>;
  WatcherRegistrationService(std::string resource, std::string endpoint, StatusCallback on_status)
      : resource_(std::move(resource)),
        endpoint_(std::move(endpoint)),
        on_status_(std::move(on_status)) {}

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
};

}  // namespace fabric

#endif  // FABRIC_PLUGIN_DEVICEPLUGIN_DEVICE_PLUGIN_SERVICE_H_
