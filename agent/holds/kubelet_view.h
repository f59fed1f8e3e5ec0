// KubeletView: who holds which device, as the kubelet says it, and how far the
// saying can be trusted. The holds watcher (holds_watcher.h) builds one per
// round; the pool registry applies it to the cross-pool rule.
#ifndef FABRIC_AGENT_HOLDS_KUBELET_VIEW_H_
#define FABRIC_AGENT_HOLDS_KUBELET_VIEW_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "agent/podresources/pod_devices.h"

namespace fabric::holds {

struct KubeletView {
  // The PodResources List joined with the kubelet checkpoint: one entry per
  // (Pod, container, resource). Init containers come from the checkpoint;
  // a checkpoint entry whose Pod the List does not show has ns/pod empty and
  // pod_uid set.
  std::vector<podresources::PodDevices> entries;
  // When the observation started, on the registry's (monotonic) clock.
  absl::Time observed_at = absl::InfinitePast();
  // False while the view may miss holds (a kubelet restart has not settled,
  // List is failing): the registry then keeps every hold it knew and releases
  // no grant; it only adds what the view shows.
  bool complete = true;
  // True when a grant missing from a complete view proves that no Pod took it
  // up (List or checkpoint read after the kubelet recorded the allocation).
  // False (no source at all): unconfirmed grants lapse after their TTL only.
  bool proves_absence = true;
  // Why the view is incomplete, for logs and /readyz.
  std::string incomplete_reason;
};

// Joins List entries with checkpoint entries. A checkpoint Pod UID is matched
// to a listed Pod when one of its (container, resource) entries shares a
// device ID with the same (container, resource) of that Pod; its other
// entries (init containers) then carry the Pod's namespace and name.
std::vector<podresources::PodDevices> JoinListAndCheckpoint(
    const std::vector<podresources::PodDevices>& listed,
    const std::vector<podresources::PodDevices>& checkpointed);

// DRA mode's holds: the view of the allocated ResourceClaims plus the grants
// the device-plugin mode made before the node moved to DRA (the kubelet keeps
// them, and the Pods' containers keep their device nodes, until those Pods
// end). Complete only when both are; observed at the older of the two.
// Whether a missing grant proves anything is for the claims' view to say:
// DRA's grants are prepares, which only claims confirm.
KubeletView WithDevicePluginHolds(KubeletView claims, const KubeletView& device_plugin);

}  // namespace fabric::holds

#endif  // FABRIC_AGENT_HOLDS_KUBELET_VIEW_H_
