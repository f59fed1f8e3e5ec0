// CniService: the agent side of fabric-cni. For each CNI command forwarded
// by the plugin it finds the Pod's fabric devices (PodResources), and in
// exclusive RDMA netns mode moves the exclusively allocated ones into the Pod
// netns and back; in shared mode it records the Pod<->device attribution and
// changes nothing. EFA devices and shared tokens are never moved: that is
// reported (log, returned warning, state), not silently skipped.
//
// DEL never fails for a Pod that is already gone: if the Pod netns no longer
// exists and a moved device is not yet back in the host netns (the kernel
// returns it when the netns is destroyed), DEL succeeds, the record is kept
// with release_pending, and GC finishes the job.
#ifndef FABRIC_AGENT_CNI_SERVICE_CNI_SERVICE_H_
#define FABRIC_AGENT_CNI_SERVICE_CNI_SERVICE_H_

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/base/host_paths.h"
#include "agent/cni_service/attachment_store.h"
#include "agent/cni_service/device_resolver.h"
#include "agent/netns/rdma_netlink.h"
#include "agent/podresources/pod_devices.h"
#include "fabric/agent/v1/agent.pb.h"

namespace fabric::cni_service {

namespace agentpb = ::fabric::agent::v1;

class CniService {
 public:
  // State lives in <paths.state_dir>/cni. All pointers are borrowed and must
  // outlive the service.
  CniService(const HostPaths& paths, podresources::PodResourcesSource* pod_resources,
             const DeviceResolver* resolver, netns::RdmaNetlink* rdma);

  // Errors carry absl codes the plugin maps to CNI codes: kInvalidArgument
  // (bad request), kUnavailable (kubelet/netlink unreachable: try again),
  // kFailedPrecondition (a device could not be moved / CHECK mismatch).
  absl::StatusOr<agentpb::CniResponse> Add(const agentpb::CniRequest& req);
  absl::StatusOr<agentpb::CniResponse> Del(const agentpb::CniRequest& req);
  absl::StatusOr<agentpb::CniResponse> Check(const agentpb::CniRequest& req);
  absl::StatusOr<agentpb::GcResponse> Gc(const agentpb::GcRequest& req);
  agentpb::StatusResponse Status();

  // Releases records whose Pod netns no longer exists (the sandbox is gone
  // but no DEL/GC reached the agent, e.g. it was down during DEL; runtimes
  // do not all send CNI GC). Never touches a record whose netns still exists,
  // so a kubelet restart cannot make it strip devices from running Pods.
  // The daemon calls it at start and periodically. Returns records released.
  absl::StatusOr<int> ReconcileGoneNetns();

  // The current attribution (for metrics labels, fabricctl, debugging).
  absl::StatusOr<std::vector<AttachmentRecord>> Attachments() const;

  // How a CNI_NETNS path is verified to be a network namespace before the
  // service takes its lock (default: netns::CheckNetnsPath, which needs nsfs).
  // Tests that stand plain files in for namespaces replace it.
  using NetnsCheck = std::function<absl::Status(const std::string& path)>;
  void SetNetnsCheckForTest(NetnsCheck check) { netns_check_ = std::move(check); }

 private:
  struct Plan {
    std::vector<AttachedDevice> devices;
    std::vector<std::string> warnings;
    std::string mode_name = "shared";  // "shared" | "exclusive" | "unknown"
  };
  // The CNI_NETNS check, run before the lock; OK for an empty path.
  absl::Status CheckNetns(const std::string& path) const;
  // A retried ADD: every device the record says was moved must be in the Pod
  // netns. One still in the host netns (an earlier ADD stopped between
  // recording and moving) is moved now; one anywhere else fails the ADD.
  absl::Status EnsureMoved(const AttachmentRecord& rec);
  // The Pod's allocations from the kubelet (PodResources Get, which the client
  // turns into a filtered List where the kubelet disables Get). An RPC that a
  // slow or rate-limiting kubelet can stretch to seconds: never called with
  // mu_ held, so one Pod's lookup does not hold up every other CNI call.
  // A Pod the kubelet does not know has no devices.
  absl::StatusOr<std::vector<podresources::PodDevices>> FetchAllocations(const std::string& ns,
                                                                         const std::string& pod);
  // What ADD does for a Pod with these allocations (no side effects). mu_ held.
  absl::StatusOr<Plan> PlanFrom(const std::vector<podresources::PodDevices>& allocations);
  // ADD of an attachment already recorded: the record answers. mu_ held.
  absl::StatusOr<agentpb::CniResponse> AddRecorded(const AttachmentRecord& existing,
                                                   const agentpb::CniRequest& req,
                                                   const absl::Status& netns_ok);
  // Moves every kMoved device of `rec` back to the host netns. Returns true
  // if all are confirmed back; false if some could not be confirmed yet
  // because the Pod netns is gone; an error if a move back failed.
  absl::StatusOr<bool> Release(const AttachmentRecord& rec, std::vector<std::string>* warnings);
  bool InHost(const std::string& device);

  std::mutex mu_;  // one CNI operation at a time, except PodResources lookups
  podresources::PodResourcesSource* pod_resources_;
  const DeviceResolver* resolver_;
  netns::RdmaNetlink* rdma_;
  AttachmentStore store_;
  NetnsCheck netns_check_;
};

}  // namespace fabric::cni_service

#endif  // FABRIC_AGENT_CNI_SERVICE_CNI_SERVICE_H_
