// Internals shared by the simulator's source files: kubelet_sim.cc (lifecycle,
// observations, helpers), kubelet_sim_registration.cc (Register, ListAndWatch,
// plugin watcher) and kubelet_sim_allocation.cc (admission, checkpoint).
#ifndef FABRIC_TOOLS_KUBELET_SIM_KUBELET_SIM_INTERNAL_H_
#define FABRIC_TOOLS_KUBELET_SIM_KUBELET_SIM_INTERNAL_H_

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <atomic>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "tools/kubelet-sim/kubelet_sim.h"

namespace fabric::sim {
namespace internal {

inline constexpr char kHealthy[] = "Healthy";
inline constexpr char kVersion[] = "v1beta1";
inline constexpr char kCheckpointName[] = "kubelet_internal_checkpoint";
inline constexpr char kDevicePluginType[] = "DevicePlugin";

// Shared by the kubelet_sim*.cc files (not part of the library's interface).
const std::vector<std::string>& SupportedVersions();
bool IsSupportedVersion(const std::string& v);
bool IsSocket(const std::string& path);
// The kubelet's start-up cleanup of device-plugins (see kubelet_sim.cc).
absl::Status CleanupPluginDirectory(const std::string& dir, KubeletVersion version);
// A fresh connection per dial (no shared subchannel), optionally with the
// "localhost" authority newer kubelets set.
std::shared_ptr<grpc::Channel> NewChannel(const std::string& socket_path, bool localhost_authority);
// grpc.DialContext(..., WithBlock()) with a timeout: true once READY.
bool DialBlocking(const std::shared_ptr<grpc::Channel>& channel, absl::Duration timeout,
                  const std::function<bool()>& aborted);
std::vector<std::string> SortedNatural(const std::set<std::string>& ids);

}  // namespace internal

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

}  // namespace fabric::sim

#endif  // FABRIC_TOOLS_KUBELET_SIM_KUBELET_SIM_INTERNAL_H_
