// PodResourcesClient: the kubelet PodResources v1 API over its unix socket
// (HostPaths::PodResourcesSocket()). Uses Get where the kubelet enables it and
// falls back to List (filtered by name+namespace; there is no Pod UID in the
// API) when Get is disabled or unimplemented. Calls are paced by a client-side
// token bucket so the agent stays well under the kubelet's own limit (100 QPS,
// burst 10, shared with every other PodResources client on the node).
#ifndef FABRIC_AGENT_PODRESOURCES_PODRESOURCES_CLIENT_H_
#define FABRIC_AGENT_PODRESOURCES_PODRESOURCES_CLIENT_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "agent/podresources/pod_devices.h"
#include "agent/podresources/token_bucket.h"
#include "podresources/v1/api.grpc.pb.h"

namespace fabric::podresources {

struct PodResourcesClientOptions {
  std::string socket_path;  // HostPaths::PodResourcesSocket()
  double qps = 20;          // client-side pacing, below the kubelet's 100
  int burst = 5;            // ... and its burst of 10
  std::chrono::milliseconds max_wait_for_token{2000};
  std::chrono::milliseconds rpc_timeout{10000};
  int max_receive_bytes = 16 * 1024 * 1024;  // as Multus (defaultPodResourcesMaxSize)
  int retries_on_rate_limit = 3;             // server said RESOURCE_EXHAUSTED
  bool use_get = true;                       // try Get before List
};

// Merges kubelet entries of one Pod: one PodDevices per (container, resource),
// duplicate device IDs (one entry per NUMA node) collapsed.
std::vector<PodDevices> MergePodResources(const v1::PodResources& pod);

class PodResourcesClient : public PodResourcesSource {
 public:
  explicit PodResourcesClient(PodResourcesClientOptions options);
  ~PodResourcesClient() override;

  absl::StatusOr<std::vector<PodDevices>> GetPodDevices(const std::string& ns,
                                                        const std::string& pod) override;
  absl::StatusOr<std::vector<PodDevices>> ListPodDevices() override;

  // True once the kubelet said Get is disabled (we then use List only).
  bool get_disabled() const { return get_disabled_.load(); }

 private:
  absl::Status Pace();

  PodResourcesClientOptions options_;
  TokenBucket limiter_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::PodResourcesLister::StubInterface> stub_;
  std::atomic<bool> get_disabled_{false};
};

}  // namespace fabric::podresources

#endif  // FABRIC_AGENT_PODRESOURCES_PODRESOURCES_CLIENT_H_
