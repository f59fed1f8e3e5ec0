// PoolRegistry: the one owner of the configured pools. It turns the node
// (inventory + health, from the inventory owner) and the configuration into
// one PoolSnapshot per pool, and it owns the cross-pool rule:
//
//   A device held through an exclusive pool is withdrawn from every other
//   pool that selects it, and a device held through any pool is withdrawn
//   from every exclusive pool that selects it. Exclusive and shared are never
//   both granted.
//
// "Held" means either seen in the kubelet's view (SetHolds: PodResources List
// joined with the kubelet checkpoint) or granted moments ago by Allocate
// (Claim) and not yet seen there. A view that may be incomplete (a kubelet
// restart that has not settled, a failing List) only adds holds: none is
// lifted and no grant released until a complete view says so. Claim records the
// grant and publishes the withdrawal from the same call, so a second Allocate
// through the conflicting pool that races the first one is refused with an
// error naming the device and the other pool, instead of both succeeding. A
// recorded grant that PodResources never shows (admission failed after
// Allocate, the Pod was deleted at once) is released after `grant_ttl`.
//
// Every method is CPU only: no disk, no RPC, so Allocate never waits on I/O.
// Writers of files (CDI, NFD) and the status views read view() and do their
// I/O outside this lock.
#ifndef FABRIC_AGENT_POOLS_POOL_REGISTRY_H_
#define FABRIC_AGENT_POOLS_POOL_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent/base/mono_clock.h"
#include "agent/config/config.h"
#include "agent/holds/kubelet_view.h"
#include "agent/model/device.h"
#include "agent/podresources/pod_devices.h"
#include "agent/pools/pool_snapshot.h"
#include "agent/pools/pool_state.h"

namespace fabric {

// The node as the pools last saw it: discovered devices, every device ever
// seen (a removed one stays listed Unhealthy) and health.
struct NodeView {
  NodeInventory inventory;
  std::map<std::string, RdmaDevice> known;  // every device ever seen, by name
  std::map<std::string, DeviceHealth> health;
};

struct PoolRegistryOptions {
  // When set, snapshots carry the CDI kind of each pool (resource name ->
  // "vendor/class") so Allocate also names CDI devices.
  std::function<std::string(const std::string&)> cdi_kind;
  // How long a grant recorded by Allocate withdraws its device from
  // conflicting pools without PodResources confirming it. The kubelet records
  // the allocation before Allocate's admission returns, so a live grant shows
  // in the next List (2 s period, 100 ms after each Allocate). 60 s covers
  // ~30 failed or rate-limited Lists in a row before a grant lapses, yet
  // frees a grant no Pod took up within a minute, so capacity cannot leak.
  absl::Duration grant_ttl = absl::Seconds(60);
  // A List that started this long after a grant and does not show it proves
  // no Pod holds it (the kubelet records an allocation as soon as Allocate
  // returns): the grant is released then, not after grant_ttl. Without this a
  // Pod deleted within a second of its admission withdrew the device for 60 s.
  absl::Duration grant_settle = absl::Seconds(1);
  // A device gone from the node (hot-unplug, VF or rxe removed) stays listed
  // Unhealthy so the kubelet keeps its allocations; once nothing holds it for
  // this long it is forgotten, so capacity does not grow on nodes where
  // devices come and go.
  absl::Duration forget_removed_after = absl::Minutes(5);
  // Every duration above is measured on this clock: monotonic, so an NTP step
  // neither drops pending grants nor keeps them forever.
  std::function<absl::Time()> clock = [] { return MonotonicNow(); };
};

// What a (resource, device ID) from the kubelet stands for.
struct ResolvedUnit {
  std::string resource;
  std::string id;
  std::string device;  // the RDMA device, e.g. "mlx5_0"
  bool exclusive = true;
  bool efa = false;
};

class PoolRegistry {
 public:
  struct Changes {
    std::vector<std::shared_ptr<PoolState>> added;  // serve these
    std::vector<std::string> removed;               // stop serving these
  };
  struct PoolView {
    PoolConfig config;
    std::shared_ptr<PoolState> state;
    std::shared_ptr<const PoolSnapshot> snapshot;
    uint64_t allocated_units = 0;  // distinct units the kubelet's view holds
    size_t withdrawn_units = 0;
    size_t pending_grants = 0;  // granted, not yet seen in PodResources
  };
  // A consistent copy for writers and status views.
  struct View {
    NodeView node;
    Config config;
    std::vector<PoolView> pools;  // in config order
    std::vector<PodDeviceHold> holds;
  };

  explicit PoolRegistry(PoolRegistryOptions options = {});

  // Called (outside the lock) after anything in view() changed: what is
  // advertised, the node, or who holds what.
  void SetOnChange(std::function<void()> fn);
  // Called (outside the lock) after each grant Claim recorded.
  void SetOnGrant(std::function<void()> fn);

  // Installs a configuration. Pools whose name, mode and token count are
  // unchanged keep their PoolState (server and streams); others are new.
  Changes ApplyConfig(const Config& config);

  // A new node view (from discovery / health). Every snapshot is rebuilt.
  void SetNode(const NodeInventory& inventory, const std::map<std::string, DeviceHealth>& health);

  // The kubelet's view of who holds what (see holds::KubeletView). Grants it
  // shows are confirmed (they are holds now). A complete view replaces the
  // holds; grants it does not show are released if they are grant_settle
  // older than the observation (when it proves absence), and in any case once
  // older than grant_ttl. An incomplete view keeps every earlier hold and
  // every grant. Returns true when holds, counts or withdrawals changed.
  bool SetHolds(const holds::KubeletView& view);

  // Releases grants older than grant_ttl (for nodes with no PodResources API;
  // elsewhere only a successful List releases them).
  void ExpireGrants();

  // The cross-pool rule at Allocate time. kFailedPrecondition naming the
  // device and the other pool if a device of `ids` is held or was just granted
  // through a conflicting pool; kNotFound for an unknown pool or ID. On OK
  // the grant is recorded and the withdrawal already published.
  absl::Status Claim(const std::string& resource, const std::vector<std::string>& ids);

  // The CNI side's question: which device a (resource, ID) grants.
  std::optional<ResolvedUnit> Resolve(const std::string& resource, const std::string& id) const;

  View view() const;
  NodeView node() const;
  Config config() const;
  std::vector<PodDeviceHold> holds() const;
  std::vector<std::shared_ptr<PoolState>> pools() const;  // in config order

 private:
  struct Grant {
    std::string resource, id, device;
    absl::Time at;
  };
  std::shared_ptr<const PoolSnapshot> BuildLocked(const PoolConfig& pool) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Recomputes withdrawals from holds + grants; true if they changed.
  bool RecomputeWithdrawnLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RebuildAllLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rebuilds every snapshot, then withdrawals from the new unit lists, then
  // the snapshots again if the withdrawals changed.
  void RefreshLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ExpireGrantsLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pools other than `resource` that hold or were just granted `device`
  // and conflict with `resource`.
  std::vector<std::string> ConflictsLocked(const std::string& resource,
                                           const std::string& device) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Conflict(const PoolConfig& a, const PoolConfig* b) const;
  void Notify(bool changed, bool granted);
  // Forgets removed devices nothing holds after forget_removed_after; true if
  // any was forgotten.
  bool ForgetRemovedLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const PoolRegistryOptions options_;
  mutable std::mutex mu_;
  Config config_ ABSL_GUARDED_BY(mu_);
  NodeView node_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<PoolState>> pools_ ABSL_GUARDED_BY(mu_);
  // Devices each pool has ever selected: a removed one stays listed Unhealthy.
  std::map<std::string, std::vector<std::string>> members_ ABSL_GUARDED_BY(mu_);
  std::vector<PodDeviceHold> holds_ ABSL_GUARDED_BY(mu_);                          // sorted
  std::set<std::pair<std::string, std::string>> held_units_ ABSL_GUARDED_BY(mu_);  // (pool, ID)
  std::map<std::string, uint64_t> allocated_ ABSL_GUARDED_BY(mu_);
  // Recorded by Claim, keyed by (resource, unit ID): a repeated grant of the
  // same unit refreshes its time, so the map is bounded by the unit count.
  std::map<std::pair<std::string, std::string>, Grant> grants_ ABSL_GUARDED_BY(mu_);
  // pool -> unit ID -> why it is withdrawn
  std::map<std::string, std::map<std::string, std::string>> withdrawn_ ABSL_GUARDED_BY(mu_);
  // device -> pools it is held or granted through (from holds_ and grants_).
  std::map<std::string, std::set<std::string>> used_via_ ABSL_GUARDED_BY(mu_);
  // Known devices the node no longer shows, since when.
  std::map<std::string, absl::Time> gone_since_ ABSL_GUARDED_BY(mu_);
  std::function<void()> on_change_;  // set before use, never changed after
  std::function<void()> on_grant_;
};

}  // namespace fabric

#endif  // FABRIC_AGENT_POOLS_POOL_REGISTRY_H_
