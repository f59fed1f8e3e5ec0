// DraServer: the DRA kubelet plugin's two sockets and their upkeep.
//  - <kubelet-root>/plugins/<driver>/dra.sock: DRAPlugin v1 and v1beta1 and
//    v1alpha1.DRAResourceHealth;
//  - <plugins_registry>/<driver>-reg.sock: pluginregistration.Registration,
//    which the kubelet's plugin watcher finds and asks GetInfo (type
//    "DRAPlugin", the absolute endpoint, supported_versions
//    ["v1.DRAPlugin", "v1beta1.DRAPlugin"]).
// Stale sockets are removed at start; a socket deleted under us (a kubelet
// restart or cleanup) is served again, as plugin/deviceplugin does: an
// inotify watch on both directories, an eventfd to stop, and a periodic
// safety-net check.
#ifndef FABRIC_PLUGIN_DRA_DRA_SERVER_H_
#define FABRIC_PLUGIN_DRA_DRA_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "plugin/dra/claim_allocation.h"
#include "pluginregistration/v1/api.grpc.pb.h"

namespace grpc {
class Server;
}

namespace fabric::dra {

class DraPluginService;
class DraHealthService;

inline constexpr char kPluginType[] = "DRAPlugin";
// What the kubelet reads as gRPC services in supported_versions (not the
// proto service names), newest first.
inline const std::vector<std::string>& SupportedServices() {
  static const std::vector<std::string> v = {"v1.DRAPlugin", "v1beta1.DRAPlugin"};
  return v;
}

// Plugin-watcher registration for a DRA driver.
class DraRegistrationService final : public pluginregistration::Registration::Service {
 public:
  using StatusCallback = std::function<void(bool registered, const std::string& error)>;
  // `versions`: what GetInfo offers (tests offer less than SupportedServices()).
  DraRegistrationService(std::string driver, std::string endpoint, StatusCallback on_status,
                         std::vector<std::string> versions = SupportedServices())
      : driver_(std::move(driver)),
        endpoint_(std::move(endpoint)),
        on_status_(std::move(on_status)),
        versions_(std::move(versions)) {}
  grpc::Status GetInfo(grpc::ServerContext* ctx, const pluginregistration::InfoRequest* request,
                       pluginregistration::PluginInfo* info) override;
  grpc::Status NotifyRegistrationStatus(grpc::ServerContext* ctx,
                                        const pluginregistration::RegistrationStatus* status,
                                        pluginregistration::RegistrationStatusResponse*) override;

 private:
  const std::string driver_;
  const std::string endpoint_;
  const StatusCallback on_status_;
  const std::vector<std::string> versions_;
};

struct DraServerOptions {
  std::string kubelet_root;          // "/var/lib/kubelet"
  std::string plugins_registry_dir;  // empty: <kubelet_root>/plugins_registry
  std::string driver = kDriverName;
  // The safety-net check of both sockets, without inotify events.
  absl::Duration check_period = absl::Seconds(5);
};

struct DraRegistrationState {
  bool registered = false;       // the kubelet's last NotifyRegistrationStatus
  uint64_t registrations = 0;    // successful ones so far
  uint64_t socket_restarts = 0;  // sockets served again after deletion
  std::string last_error;
};

class DraServer {
 public:
  // `plugin` and `health` must outlive the server.
  DraServer(DraServerOptions options, DraPluginService* plugin, DraHealthService* health);
  ~DraServer();
  DraServer(const DraServer&) = delete;
  DraServer& operator=(const DraServer&) = delete;

  // Serves both sockets (plugin first: the kubelet dials it right after
  // GetInfo) and starts the watch thread.
  absl::Status Start();
  // Ends health streams, stops both servers, removes our sockets. Idempotent.
  void Stop();

  std::string plugin_socket() const { return plugin_socket_; }
  std::string registration_socket() const { return registration_socket_; }
  DraRegistrationState registration() const;

 private:
  struct Served;
  absl::Status StartPluginLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(lifecycle_mu_);
  absl::Status StartRegistrationLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(lifecycle_mu_);
  void StopServedLocked(std::unique_ptr<Served>* served)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(lifecycle_mu_);
  void Run();
  void Reconcile();
  void AddWatches();

  const DraServerOptions options_;
  DraPluginService* const plugin_;
  DraHealthService* const health_;
  const std::string plugin_dir_;
  const std::string registry_dir_;
  const std::string plugin_socket_;
  const std::string registration_socket_;

  std::mutex lifecycle_mu_;  // Start/Stop vs. the watch thread's restarts
  bool running_ ABSL_GUARDED_BY(lifecycle_mu_) = false;
  std::unique_ptr<Served> plugin_server_ ABSL_GUARDED_BY(lifecycle_mu_);
  std::unique_ptr<DraRegistrationService> registration_service_ ABSL_GUARDED_BY(lifecycle_mu_);
  std::unique_ptr<Served> registration_server_ ABSL_GUARDED_BY(lifecycle_mu_);

  mutable std::mutex state_mu_;
  DraRegistrationState state_ ABSL_GUARDED_BY(state_mu_);

  int inotify_fd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;
};

}  // namespace fabric::dra

#endif  // FABRIC_PLUGIN_DRA_DRA_SERVER_H_
