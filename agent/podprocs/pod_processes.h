// Which Pod and container a host process belongs to, and the bytes of a Pod's
// own network namespace. Read from /proc (the agent runs in the host PID
// namespace for this) and, where mounted, the container runtime's state
// directory for names.
//
// A process's Pod comes from its cgroup path: cgroup v1 or v2, the systemd or
// cgroupfs driver, containerd (cri-containerd-<id>.scope, <id>), CRI-O
// (crio-<id>.scope, crio-<id>) and Docker (docker-<id>.scope, <id>) naming, and
// paths relative to the reader's cgroup namespace ("/../../kubepods...").
#ifndef FABRIC_AGENT_PODPROCS_POD_PROCESSES_H_
#define FABRIC_AGENT_PODPROCS_POD_PROCESSES_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fabric::podprocs {

struct CgroupIdentity {
  std::string pod_uid;       // "0a1b2c3d-...", dashes restored from the systemd form
  std::string container_id;  // 64 hex; empty for a Pod-level cgroup
  std::string runtime;       // "containerd" | "cri-o" | "docker" | "" (unknown)
  bool operator==(const CgroupIdentity&) const = default;
};

// Parses the text of /proc/<pid>/cgroup. NotFound when the process is not in
// a Pod's cgroup (a host process, a kernel thread); InvalidArgument for text
// that is not a cgroup file.
absl::StatusOr<CgroupIdentity> ParseProcCgroup(absl::string_view text);

struct PodProcess {
  uint32_t pid = 0;
  CgroupIdentity identity;
};

// Names from the runtime's record of a container (its OCI config annotations:
// containerd's io.kubernetes.cri.*, CRI-O's io.kubernetes.pod.* /
// io.kubernetes.container.name).
struct ContainerNames {
  std::string ns, pod, pod_uid, container;
  bool sandbox = false;  // the Pod's pause container
  // Whether the container's OCI spec leaves the network namespace out (a
  // hostNetwork Pod), when its config lists linux.namespaces at all.
  std::optional<bool> host_network;
};

struct NetBytes {
  uint64_t rx_bytes = 0;
  uint64_t tx_bytes = 0;
  std::vector<std::string> interfaces;  // summed; "lo" is never counted
};

// The host-access seam (fake trees in tests).
class ProcSource {
 public:
  virtual ~ProcSource() = default;
  // Every process that belongs to a Pod, by PID. A process's cgroup is read
  // once while its PID stays (a cache keyed by PID and start time).
  virtual absl::StatusOr<std::vector<PodProcess>> ScanPods() = 0;
  // One process (an RDMA resource's owner): NotFound when it is gone or not
  // in a Pod.
  virtual absl::StatusOr<PodProcess> Identify(uint32_t pid) = 0;
  // The process (thread group) a task belongs to: the kernel names an RDMA
  // resource's owner by the thread that created it, which may be any thread
  // of the process. The PID itself for a process's main thread; NotFound when
  // the task is gone.
  virtual absl::StatusOr<uint32_t> ProcessOf(uint32_t tid) = 0;
  // The interface bytes of the process's network namespace (/proc/<pid>/net/dev).
  virtual absl::StatusOr<NetBytes> NetDevBytes(uint32_t pid) = 0;
  // Whether the process shares the host's network namespace (a hostNetwork
  // Pod): its /proc/<pid>/ns/net against /proc/1/ns/net.
  virtual absl::StatusOr<bool> InHostNetns(uint32_t pid) = 0;
  // /proc/<pid>/comm, for processes outside Pods that own resources.
  virtual std::string Comm(uint32_t pid) = 0;
  // The runtime's names for a container, when its state directory is readable.
  virtual std::optional<ContainerNames> Names(const CgroupIdentity& id) = 0;
};

}  // namespace fabric::podprocs

#endif  // FABRIC_AGENT_PODPROCS_POD_PROCESSES_H_
