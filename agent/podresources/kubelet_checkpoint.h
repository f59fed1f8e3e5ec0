// The kubelet's device-manager checkpoint
// (<device-plugin dir>/kubelet_internal_checkpoint): every allocation the
// kubelet's device manager holds, by Pod UID, container (init containers
// included), resource and device ID. The kubelet writes it after every
// allocation and every device-list update, reads it back at start, and keeps
// an entry until it garbage-collects the Pod at a later allocation. It is the
// kubelet's own accounting, so it stays complete where the PodResources List
// is not: right after a kubelet restart (List answers [] until the pod manager
// is filled) and for plain init containers (List reports app and sidecar
// containers only).
//
// Shape (pkg/kubelet/cm/devicemanager/checkpoint): {"Data": {"PodDeviceEntries":
// [{"PodUID", "ContainerName", "ResourceName", "DeviceIDs", "AllocResp"}],
// "RegisteredDevices": {...}}, "Checksum": N}. DeviceIDs is a map NUMA node ->
// IDs since v1.20 and a plain list before; both are read.
#ifndef FABRIC_AGENT_PODRESOURCES_KUBELET_CHECKPOINT_H_
#define FABRIC_AGENT_PODRESOURCES_KUBELET_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "agent/podresources/pod_devices.h"

namespace fabric::podresources {

// Limits on what is accepted from the file (a real node has a few hundred
// entries at most).
inline constexpr size_t kMaxCheckpointBytes = 16 << 20;
inline constexpr size_t kMaxCheckpointEntries = 100000;

// One PodDevices per entry (ns and pod empty, pod_uid set), device IDs in
// first-seen order without duplicates. kInvalidArgument naming the problem for
// anything that is not the kubelet's shape; never throws.
absl::StatusOr<std::vector<PodDevices>> ParseKubeletCheckpoint(absl::string_view json);

// Reads and parses the file, re-parsing only when it changed (inode, size or
// mtime), so a 2 s poll costs one stat when nothing happens.
class KubeletCheckpointReader {
 public:
  explicit KubeletCheckpointReader(std::string path) : path_(std::move(path)) {}
  // kNotFound when the file does not exist.
  absl::StatusOr<std::vector<PodDevices>> Read();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  struct Stamp {
    uint64_t ino = 0, size = 0;
    int64_t mtime_ns = 0;
    bool operator==(const Stamp&) const = default;
  };
  bool have_ = false;
  Stamp stamp_;
  std::vector<PodDevices> last_;
};

}  // namespace fabric::podresources

#endif  // FABRIC_AGENT_PODRESOURCES_KUBELET_CHECKPOINT_H_
