// DraHealthService: the kubelet's DRA health stream
// (v1alpha1.DRAResourceHealth/NodeWatchResources, Kubernetes 1.34+ with the
// ResourceHealthStatus gate), which feeds Pods' allocatedResourcesStatus.
//
// Each message is the full list of published devices: the kubelet marks a
// device missing from a message Unknown, and one not re-reported within its
// health timeout Unknown as well, so the list is sent on every change and
// re-sent every `resend_period` without one.
#ifndef FABRIC_PLUGIN_DRA_DRA_HEALTH_SERVICE_H_
#define FABRIC_PLUGIN_DRA_DRA_HEALTH_SERVICE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "dra/health/v1alpha1/api.grpc.pb.h"

namespace fabric::dra {

struct DeviceHealthEntry {
  std::string device;  // the published device name
  bool healthy = false;
  std::string message;  // why, when unhealthy ("port DOWN", "device removed")
  bool operator==(const DeviceHealthEntry&) const = default;
};

class DraHealthService final : public ::v1alpha1::DRAResourceHealth::Service {
 public:
  // `pool`: our pool's name (the node name).
  explicit DraHealthService(std::string pool, absl::Duration resend_period = absl::Seconds(10));
  ~DraHealthService() override;

  // The published devices' health now. Streams get a message only if this
  // changes something (set of devices, a verdict or a message).
  void Publish(std::vector<DeviceHealthEntry> devices);
  // Ends every open stream cleanly (status OK); later streams work again.
  // Call before shutting the server down.
  void EndStreams();

  int open_streams() const;
  uint64_t messages_sent() const;
  // The message the next stream gets first (tests).
  ::v1alpha1::NodeWatchResourcesResponse Current() const;

  grpc::Status NodeWatchResources(
      grpc::ServerContext* ctx, const ::v1alpha1::NodeWatchResourcesRequest* request,
      grpc::ServerWriter<::v1alpha1::NodeWatchResourcesResponse>* writer) override;

 private:
  struct Tracked {
    DeviceHealthEntry entry;
    int64_t since_unix = 0;  // when this verdict or message was first published
  };
  ::v1alpha1::NodeWatchResourcesResponse BuildLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string pool_;
  const absl::Duration resend_period_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::vector<Tracked> devices_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;  // EndStreams bumps it
  int open_streams_ ABSL_GUARDED_BY(mu_) = 0;
  std::condition_variable streams_closed_;
  std::atomic<uint64_t> messages_sent_{0};
};

}  // namespace fabric::dra

#endif  // FABRIC_PLUGIN_DRA_DRA_HEALTH_SERVICE_H_
