// DraFront: the pools served through Dynamic Resource Allocation
// (resource.k8s.io/v1, Kubernetes 1.34+), fabric-dra's KubeletFront.
//   pools (PoolRegistry) --> SlicePublisher --> ResourceSlices (API server)
//                        --> DraHealthService (the kubelet's health stream)
//   ResourceClaims (watch) --> ClaimHolds --> PoolRegistry::SetHolds
//   kubelet NodePrepareResources --> DraPluginService --> DraDevicePreparer
//     (PoolRegistry::Claim + CDI names) and the prepared-claims checkpoint
// A device is served by one front only: fabric-dra never serves the
// device-plugin API, and the chart runs one of the two binaries per node.
#ifndef FABRIC_AGENT_DRA_FRONT_DRA_FRONT_H_
#define FABRIC_AGENT_DRA_FRONT_DRA_FRONT_H_

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "agent/daemon/kubelet_front.h"
#include "agent/daemon/side_files.h"
#include "agent/dra_front/claim_env_specs.h"
#include "agent/dra_front/claim_holds.h"
#include "agent/dra_front/dra_device_preparer.h"
#include "agent/dra_front/slice_publisher.h"
#include "agent/holds/holds_watcher.h"
#include "agent/kubeapi/kube_client.h"
#include "agent/kubeapi/watch.h"
#include "agent/podresources/podresources_client.h"
#include "agent/pools/pool_registry.h"
#include "plugin/dra/dra_health_service.h"
#include "plugin/dra/dra_plugin_service.h"
#include "plugin/dra/dra_server.h"

namespace fabric::dra {

struct DraFrontOptions {
  std::string node_name;
  std::string kubelet_root = "/var/lib/kubelet";
  std::string plugins_registry_dir;  // empty: <kubelet_root>/plugins_registry
  std::string state_dir;             // the prepared-claims checkpoint goes in <state_dir>/dra
  // Where the claims' engine-environment CDI entries go (ClaimEnvSpecs;
  // mirrored in <state_dir>/dra/claim-cdi). Empty: pools' env presets are
  // not applied in DRA mode.
  std::string cdi_dir;
  SliceOptions slices;
  absl::Duration slice_resync = absl::Minutes(1);
  // Grants the device-plugin mode made before the node moved to DRA: read
  // from PodResources and the kubelet's device-manager checkpoint, as
  // device-plugin mode does. Empty paths: not read.
  std::string podresources_socket;
  std::string kubelet_checkpoint;
  absl::Duration device_plugin_holds_interval = absl::Seconds(2);
};

class DraFront : public KubeletFront {
 public:
  // `client` is owned; `registry`, `side_files` and `readiness` are borrowed.
  DraFront(DraFrontOptions options, std::unique_ptr<kubeapi::KubeClient> client,
           PoolRegistry* registry, SideFileWriter* side_files, status::ReadinessReasons* readiness);
  ~DraFront() override;

  absl::Status AddPool(std::shared_ptr<PoolState> pool) override;
  void RemovePool(const std::string& resource) override;
  void RefreshHolds() override;
  void OnGrant() override;
  absl::Status Start() override;
  void Stop() override;
  sampler::HoldsState HoldsState() const override;
  holds::HoldsStatus holds_status() const override;
  void FillStatus(status::StatusInput* in) const override;
  std::string NotReadyReason() const override;
  std::string MetricsText() const override;

 private:
  class PoolWatch;  // a PoolSubscriber that pokes the publisher
  std::vector<std::shared_ptr<const PoolSnapshot>> Snapshots() const;
  DraNames Names() const;
  // The pools changed: slices, health stream and holds follow.
  void OnPoolsChanged();
  void PublishHealth();
  // The pools as the slices show them: a device that a device-plugin grant
  // holds is withdrawn from every pool, its own included, since the scheduler
  // cannot see that grant.
  std::vector<std::shared_ptr<const PoolSnapshot>> PublishedSnapshots() const;
  // Either source of holds changed: the registry gets both as one view.
  void OnClaimsView(const holds::KubeletView& view);
  void OnDevicePluginView(const holds::KubeletView& view);
  void ApplyHoldsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(views_mu_);

  const DraFrontOptions options_;
  std::unique_ptr<kubeapi::KubeClient> client_;
  PoolRegistry* const registry_;
  status::ReadinessReasons* const readiness_;
  std::unique_ptr<SlicePublisher> publisher_;
  std::unique_ptr<ClaimHolds> claims_;
  std::unique_ptr<kubeapi::Watch> claim_watch_;
  std::thread claim_thread_;
  std::unique_ptr<ClaimEnvSpecs> env_specs_;  // null without a CDI dir
  std::unique_ptr<DraDevicePreparer> preparer_;
  std::unique_ptr<DraPluginService> plugin_;
  std::unique_ptr<DraHealthService> health_;
  std::unique_ptr<DraServer> server_;
  std::unique_ptr<podresources::PodResourcesClient> podresources_;
  std::unique_ptr<holds::HoldsWatcher> device_plugin_holds_;  // null: not read
  mutable std::mutex views_mu_;
  std::optional<holds::KubeletView> claims_view_ ABSL_GUARDED_BY(views_mu_);
  std::optional<holds::KubeletView> device_plugin_view_ ABSL_GUARDED_BY(views_mu_);
  // (resource, unit ID) of the device-plugin grants, for PublishedSnapshots.
  std::set<std::pair<std::string, std::string>> device_plugin_units_ ABSL_GUARDED_BY(views_mu_);
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<PoolWatch>> watches_;  // by resource
  bool started_ = false;
};

}  // namespace fabric::dra

#endif  // FABRIC_AGENT_DRA_FRONT_DRA_FRONT_H_
