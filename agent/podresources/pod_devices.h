// What the agent needs from the kubelet's PodResources API: which device IDs
// of which resource each container of a Pod was allocated.
#ifndef FABRIC_AGENT_PODRESOURCES_POD_DEVICES_H_
#define FABRIC_AGENT_PODRESOURCES_POD_DEVICES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fabric::podresources {

// One (container, resource) allocation, merged across the kubelet's
// per-(device, NUMA node) duplicate entries; device_ids keep first-seen order.
struct PodDevices {
  std::string ns;
  std::string pod;
  std::string container;
  std::string resource;
  std::vector<std::string> device_ids;
  // The Pod's UID where known: the kubelet checkpoint names Pods only by UID
  // (ns and pod are then empty until a List entry is matched to it); the v1
  // List API has no UID.
  std::string pod_uid;
  // An init container's grant: the checkpoint has it for a Pod the List
  // shows, while the List (app and sidecar containers only) does not.
  bool init_container = false;

  bool operator==(const PodDevices&) const = default;
};

// The interface the rest of the agent uses; PodResourcesClient is the real
// one, tests provide fakes.
class PodResourcesSource {
 public:
  virtual ~PodResourcesSource() = default;
  // The Pod's allocations (possibly empty). kNotFound if the kubelet does not
  // know the Pod; kUnavailable/kResourceExhausted if the kubelet cannot answer.
  virtual absl::StatusOr<std::vector<PodDevices>> GetPodDevices(const std::string& ns,
                                                                const std::string& pod) = 0;
  // Every active Pod's allocations.
  virtual absl::StatusOr<std::vector<PodDevices>> ListPodDevices() = 0;
};

}  // namespace fabric::podresources

#endif  // FABRIC_AGENT_PODRESOURCES_POD_DEVICES_H_
