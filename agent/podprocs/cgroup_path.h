// The Pod and container a process belongs to, from the text of
// /proc/<pid>/cgroup. Pure parsing, no I/O (fuzzed by
// test/fuzz/cgroup_fuzzer.cc).
//
// Accepted layouts (one path per line, "<hierarchy>:<controllers>:<path>"):
//   cgroup v2      0::/kubepods.slice/kubepods-burstable.slice/
//                     kubepods-burstable-pod<uid_with_underscores>.slice/
//                     cri-containerd-<64hex>.scope
//   cgroup v1      many lines; the pids, memory, cpu and name=systemd lines are
//                  preferred in that order, then the unified "0::" line of a
//                  hybrid host, then any other line naming a Pod.
//   systemd driver kubepods[-<qos>]-pod<uid>.slice with a container scope
//                  cri-containerd-<id>.scope, crio-<id>.scope or
//                  docker-<id>.scope (Guaranteed Pods have no QoS slice);
//                  any prefix that contains "kubepods" (kind's
//                  kubelet-kubepods-..., a custom --cgroup-root) and any
//                  ancestors (/system.slice/containerd.service/..., /docker/<id>/).
//                  Also runc's fallback form when systemd does not manage the
//                  tree: "kubepods-...-pod<uid>.slice:cri-containerd:<id>".
//   cgroupfs       /kubepods[/<qos>]/pod<uid>/<id> or .../pod<uid>/crio-<id>
//                  (k3s, rke2 and Docker's cgroupfs driver look the same).
//   namespaced     paths relative to the reader's cgroup namespace
//                  ("/../../kubepods-burstable-pod<uid>.slice/..."): ".."
//                  segments are skipped. A process in the reader's own Pod
//                  shows only its container ("/../cri-containerd-<id>.scope"),
//                  which names no Pod and is NotFound.
// Segments below the container's cgroup (".../cri-containerd-<id>.scope/init",
// ".../<id>/sub") belong to that container.
//
// CRI-O's conmon (crio-conmon-<id>.scope / crio-conmon-<id>) lives in the
// Pod's cgroup but is the runtime's monitor, not the container, and runs in
// the host network namespace: it is NotFound (skipped), so nothing reads a
// Pod's network bytes through it.
//
// A Pod UID is the canonical 36-character form (lowercase hex, dashes at
// 8-4-4-4-12) or, for a static Pod, the kubelet's 32-character hex hash of
// its manifest; a container ID is 64 lowercase hex characters. Anything else
// names no Pod: NotFound.
#ifndef FABRIC_AGENT_PODPROCS_CGROUP_PATH_H_
#define FABRIC_AGENT_PODPROCS_CGROUP_PATH_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "agent/podprocs/pod_processes.h"

namespace fabric::podprocs {

// /proc/<pid>/cgroup is a few hundred bytes; anything over this is not one.
inline constexpr size_t kMaxCgroupFileBytes = 64 * 1024;

// A Pod UID as the API server or the kubelet (static Pods) makes them.
bool IsPodUid(absl::string_view s);
// A 64-character lowercase hex container ID (containerd, CRI-O, Docker).
bool IsContainerId(absl::string_view s);

// One cgroup path ("/kubepods/burstable/pod<uid>/<id>"). NotFound when it
// names no Pod (and for conmon, see above).
absl::StatusOr<CgroupIdentity> ParseCgroupPath(absl::string_view path);

// ParseProcCgroup (pod_processes.h) is defined in cgroup_path.cc:
// InvalidArgument for text that is not a cgroup file (empty, over
// kMaxCgroupFileBytes, a NUL byte, not UTF-8, a line that is not
// "<digits>:<controllers>:/<path>"); NotFound when no line names a Pod.

}  // namespace fabric::podprocs

#endif  // FABRIC_AGENT_PODPROCS_CGROUP_PATH_H_
