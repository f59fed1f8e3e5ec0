// DraPluginService: the kubelet's DRA plugin API (NodePrepareResources,
// NodeUnprepareResources), one implementation on v1 messages with two thin
// gRPC adapters, v1 and v1beta1 (the kubelet picks one at registration).
//
// The kubelet's contract, as pkg/kubelet/cm/dra/manager.go checks it:
//  - every claim of a request appears in the response map, keyed by UID
//    (a missing one fails the Pod: "NodePrepareResources left out N claims");
//  - one claim's failure is that claim's error string, never a gRPC error
//    (a gRPC error fails every claim of the call);
//  - prepare is idempotent: a claim already prepared gets the recorded
//    devices back without preparing again; unprepare of an unknown claim
//    succeeds;
//  - what was prepared is checkpointed (PreparedClaims) before the answer, so
//    a restarted agent answers the same.
#ifndef FABRIC_PLUGIN_DRA_DRA_PLUGIN_SERVICE_H_
#define FABRIC_PLUGIN_DRA_DRA_PLUGIN_SERVICE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "agent/base/latency_histogram.h"
#include "dra/v1/api.grpc.pb.h"
#include "dra/v1beta1/api.grpc.pb.h"
#include "plugin/dra/claim_allocation.h"
#include "plugin/dra/device_preparer.h"
#include "plugin/dra/prepared_claims.h"

namespace fabric::dra {

namespace drav1 = ::k8s::io::kubelet::pkg::apis::dra::v1;
namespace drav1beta1 = ::k8s::io::kubelet::pkg::apis::dra::v1beta1;

struct DraPluginOptions {
  std::string driver = kDriverName;
  // Our pool's name: the node name (one pool per node).
  std::string node_name;
  // Where PreparedClaims keeps its file (e.g. <agent state dir>/dra).
  std::string state_dir;
};

// What /metrics, /v1/node and fabricctl show of the DRA plugin.
struct DraPluginStats {
  uint64_t prepared_claims = 0;                // in the checkpoint now
  uint64_t prepare_calls = 0;                  // NodePrepareResources RPCs
  uint64_t unprepare_calls = 0;                // NodeUnprepareResources RPCs
  uint64_t prepare_errors = 0;                 // claims answered with an error by prepare
  uint64_t unprepare_errors = 0;               // claims answered with an error by unprepare
  LatencyHistogram::Snapshot prepare_latency;  // per NodePrepareResources RPC
  // Non-empty when the checkpoint could not be loaded at start (the plugin
  // then started with no prepared claims).
  std::string checkpoint_load_error;
};

class DraPluginService {
 public:
  // `allocations` and `preparer` must outlive the service. Loads the
  // checkpoint; a corrupt one is logged, kept in stats, and the service
  // starts empty.
  DraPluginService(DraPluginOptions options, ClaimAllocations* allocations,
                   DevicePreparer* preparer);
  ~DraPluginService();
  DraPluginService(const DraPluginService&) = delete;
  DraPluginService& operator=(const DraPluginService&) = delete;

  drav1::NodePrepareResourcesResponse Prepare(const drav1::NodePrepareResourcesRequest& request);
  drav1::NodeUnprepareResourcesResponse Unprepare(
      const drav1::NodeUnprepareResourcesRequest& request);

  DraPluginStats Stats() const;

  // The gRPC services to register on the plugin socket.
  grpc::Service* v1_service();
  grpc::Service* v1beta1_service();

 private:
  class V1Adapter;
  class V1beta1Adapter;
  // Serializes work on one claim UID (the kubelet may send the same claim in
  // two Pods' calls at once); different claims proceed in parallel.
  class ClaimLock;

  drav1::NodePrepareResourceResponse PrepareOne(const drav1::Claim& claim);
  std::string UnprepareOne(const drav1::Claim& claim);

  const DraPluginOptions options_;
  ClaimAllocations* const allocations_;
  DevicePreparer* const preparer_;
  std::unique_ptr<V1Adapter> v1_;
  std::unique_ptr<V1beta1Adapter> v1beta1_;

  mutable std::mutex mu_;
  std::condition_variable claim_released_;
  std::set<std::string> busy_claims_ ABSL_GUARDED_BY(mu_);
  PreparedClaims checkpoint_ ABSL_GUARDED_BY(mu_);
  std::string load_error_;
  std::atomic<uint64_t> prepare_calls_{0};
  std::atomic<uint64_t> unprepare_calls_{0};
  std::atomic<uint64_t> prepare_errors_{0};
  std::atomic<uint64_t> unprepare_errors_{0};
  LatencyHistogram prepare_latency_;
};

// v1beta1 <-> v1 message conversion (the messages are field-for-field the
// same, less v1's share_id). Exposed for tests and the kubelet simulator.
drav1::NodePrepareResourcesRequest ToV1(const drav1beta1::NodePrepareResourcesRequest& in);
drav1::NodeUnprepareResourcesRequest ToV1(const drav1beta1::NodeUnprepareResourcesRequest& in);
drav1beta1::NodePrepareResourcesResponse ToV1beta1(const drav1::NodePrepareResourcesResponse& in);
drav1beta1::NodeUnprepareResourcesResponse ToV1beta1(
    const drav1::NodeUnprepareResourcesResponse& in);
drav1beta1::NodePrepareResourcesRequest ToV1beta1(const drav1::NodePrepareResourcesRequest& in);
drav1beta1::NodeUnprepareResourcesRequest ToV1beta1(const drav1::NodeUnprepareResourcesRequest& in);
drav1::NodePrepareResourcesResponse ToV1(const drav1beta1::NodePrepareResourcesResponse& in);
drav1::NodeUnprepareResourcesResponse ToV1(const drav1beta1::NodeUnprepareResourcesResponse& in);

}  // namespace fabric::dra

#endif  // FABRIC_PLUGIN_DRA_DRA_PLUGIN_SERVICE_H_
