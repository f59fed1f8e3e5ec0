// ClaimHolds: who holds which device in DRA mode, from the API server.
// A watch on ResourceClaims keeps every claim whose allocation names our
// driver and our pool (the node). Each allocated device becomes a hold of its
// pool unit for the Pods the claim is reserved for (or for the claim alone
// while it is allocated but not reserved yet), so PoolRegistry::SetHolds can
// apply the exclusive/shared rule exactly as the PodResources view does in
// device-plugin mode. It also answers the prepare-time question "what was
// this claim allocated" with a fresh GET, as the kubelet's own helper does.
#ifndef FABRIC_AGENT_DRA_FRONT_CLAIM_HOLDS_H_
#define FABRIC_AGENT_DRA_FRONT_CLAIM_HOLDS_H_

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "agent/dra/dra_names.h"
#include "agent/holds/kubelet_view.h"
#include "agent/kubeapi/kube_client.h"
#include "agent/kubeapi/watch.h"
#include "plugin/dra/claim_allocation.h"

namespace fabric::dra {

inline constexpr char kResourceClaimsPath[] = "/apis/resource.k8s.io/v1/resourceclaims";

struct ClaimHoldsOptions {
  std::string driver = kDriverName;
  std::string node_name;  // our pool's name
};

struct ClaimHoldsStatus {
  bool listed = false;     // the first List answered: the view is complete
  size_t claims = 0;       // claims with at least one device of ours
  uint64_t events = 0;     // watch events seen
  uint64_t rejected = 0;   // claims whose allocation could not be read
  std::string last_error;  // the watch's last failure
};

class ClaimHolds : public kubeapi::WatchHandler, public ClaimAllocations {
 public:
  // `names` gives the current published names (they follow the pools);
  // `on_view` receives the holds after each change (on the watch thread).
  ClaimHolds(ClaimHoldsOptions options, kubeapi::KubeClient* client,
             std::function<DraNames()> names,
             std::function<void(const holds::KubeletView&)> on_view);

  // WatchHandler (the watch thread).
  void OnList(const kubeapi::ObjectList& list) override;
  void OnEvent(const kubeapi::WatchEvent& event) override;
  void OnError(const absl::Status& error, absl::Duration retry_in) override;

  // ClaimAllocations (gRPC threads): a GET of the claim, parsed for our
  // driver and pool.
  absl::StatusOr<ClaimAllocation> Get(const std::string& claim_namespace, const std::string& name,
                                      const std::string& uid) override;

  // The holds now (also after the pools changed: names are re-resolved).
  holds::KubeletView View() const;
  // Re-sends the view (the pools changed, so unit IDs may have).
  void Republish();
  ClaimHoldsStatus status() const;

 private:
  struct Claim {
    std::string ns, name;
    std::vector<std::pair<std::string, std::string>> pods;  // (name, uid) reserved for
    std::vector<std::string> devices;                       // published names, ours
  };
  // The claim's entry, or nullopt when none of its devices is ours.
  std::optional<Claim> Parse(const nlohmann::json& obj, std::string* uid);
  void Publish();

  const ClaimHoldsOptions options_;
  kubeapi::KubeClient* const client_;
  const std::function<DraNames()> names_;
  const std::function<void(const holds::KubeletView&)> on_view_;
  mutable std::mutex mu_;
  std::map<std::string, Claim> claims_;  // by UID
  ClaimHoldsStatus status_;
};

}  // namespace fabric::dra

#endif  // FABRIC_AGENT_DRA_FRONT_CLAIM_HOLDS_H_
