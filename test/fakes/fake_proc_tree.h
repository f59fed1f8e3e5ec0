// FakeProcTree: a /proc tree of host and Pod processes, and the container
// runtimes' config.json files, in the formats the kernel and the runtimes
// write, for ProcPodSource (agent/podprocs), the sampler test and the scale
// bench. TESTONLY (library fabric::podprocs_testing).
//
//   FakeProcTree tree(dir + "/proc");
//   const FakeContainer c{FakeProcTree::PodUid(7), FakeProcTree::ContainerId(7), "containerd"};
//   tree.AddPodProcess(100, c, CgroupStyle::kSystemdV2, /*netns_id=*/7, /*rx=*/1 << 20, 0);
//   tree.AddHostProcess(200, "rdma-tool");
//   tree.SetNetBytes(100, 5 << 20, 0);  // the counters went up
//   FakeProcTree::AddContainerdConfig(dir + "/k8s.io", c.container_id, "ns", "pod-7",
//                                     c.pod_uid, "trainer");
//   ProcPodSource source({.proc_root = tree.proc_root(),
//                         .runtime_dirs = {{RuntimeKind::kContainerd, dir + "/k8s.io"}}});
//
// Per process <root>/<pid>/: cgroup, stat (start time in field 22), status, comm,
// net/dev (lo plus eth0 with the given bytes), ns/net. ns/net is a symlink to
// <root>/.netns/net-<id>: processes given the same netns id share the file, so
// stat(2) gives them the same (st_dev, st_ino) as the kernel's nsfs does, and
// id kHostNetns is pid 1's. The tree is not removed: put it in a TempDir.
// An I/O failure aborts with a message (test code).
#ifndef FABRIC_TEST_FAKES_FAKE_PROC_TREE_H_
#define FABRIC_TEST_FAKES_FAKE_PROC_TREE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/podprocs/proc_pod_source.h"

namespace fabric::podprocs::testing {

// How the node lays out cgroups (/proc/<pid>/cgroup as the kernel prints it).
enum class CgroupStyle {
  // 0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<u_i_d>.slice/
  //    cri-containerd-<id>.scope (crio-<id>.scope, docker-<id>.scope)
  kSystemdV2,
  // 13 v1 lines (pids, memory, cpu,cpuacct, name=systemd, ...) with that path.
  kSystemdV1,
  // 0::/kubepods/burstable/pod<uid>/<id> (crio-<id>): k3s, rke2, kubeadm with cgroupfs.
  kCgroupfsV2,
  // v1 lines with /kubepods/burstable/pod<uid>/<id>, and 0::/.
  kCgroupfsV1,
  // 0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/...
  kKindV2,
  // 0::/../../kubepods-burstable-pod<u_i_d>.slice/...: read from another Pod's
  // cgroup namespace.
  kNamespacedV2,
};

enum class QosClass { kGuaranteed, kBurstable, kBestEffort };

struct FakeContainer {
  std::string pod_uid;                 // 36-char UID (or a static Pod's 32 hex)
  std::string container_id;            // 64 hex; empty: the Pod's own cgroup
  std::string runtime = "containerd";  // "containerd" | "cri-o" | "docker"
  QosClass qos = QosClass::kBurstable;
};

inline constexpr uint32_t kHostNetns = 0;

class FakeProcTree {
 public:
  // Creates `proc_root` with pid 1 (systemd, host netns, "0::/init.scope").
  explicit FakeProcTree(std::string proc_root);
  const std::string& proc_root() const { return root_; }

  // A process of `c`, in network namespace `netns_id` (kHostNetns: a
  // hostNetwork Pod) whose eth0 has counted `rx_bytes`/`tx_bytes`.
  void AddPodProcess(uint32_t pid, const FakeContainer& c, CgroupStyle style, uint32_t netns_id,
                     uint64_t rx_bytes = 0, uint64_t tx_bytes = 0, const std::string& comm = "app");
  // A process outside every Pod, in the host netns.
  void AddHostProcess(uint32_t pid, const std::string& comm,
                      const std::string& cgroup_text = "0::/system.slice/example.service\n");
  // Any process with the given cgroup file text. Each added process gets a
  // new start time (so a PID removed and added again is another process).
  void AddProcess(uint32_t pid, const std::string& comm, const std::string& cgroup_text,
                  uint32_t netns_id);

  // Rewrites the process's net/dev (lo with some bytes, eth0 with these).
  void SetNetBytes(uint32_t pid, uint64_t rx_bytes, uint64_t tx_bytes);
  void SetNetDevText(uint32_t pid, const std::string& text);
  void SetCgroupText(uint32_t pid, const std::string& text);
  // The process exits: its directory goes.
  void RemoveProcess(uint32_t pid);
  // A thread `tid` of process `tgid` (added before): <tgid>/task/<tid> with
  // its own stat, status (Tgid: tgid) and comm, reachable as /proc/<tid>
  // but, like the kernel's, not listed as a process.
  void AddThread(uint32_t tid, uint32_t tgid, const std::string& comm = "worker");
  void RemoveThread(uint32_t tid, uint32_t tgid);
  // /proc/<pid>/status as the kernel prints its first lines.
  static std::string StatusText(const std::string& comm, uint32_t tgid, uint32_t pid);
  uint64_t StartTime(uint32_t pid) const;

  // /proc/<pid>/cgroup text for a process of `c` on a node laid out as `style`.
  static std::string CgroupText(const FakeContainer& c, CgroupStyle style);
  // /proc/<pid>/net/dev as the kernel prints it: lo (never counted) and eth0.
  static std::string NetDevText(uint64_t rx_bytes, uint64_t tx_bytes);
  // Deterministic, distinct, valid IDs for Pod / container number n.
  static std::string PodUid(uint32_t n);
  static std::string ContainerId(uint32_t n);

  // containerd: <dir>/<container_id>/config.json with io.kubernetes.cri.*
  // annotations (container-type "sandbox" and no container-name when
  // `sandbox`).
  static void AddContainerdConfig(const std::string& dir, const std::string& container_id,
                                  const std::string& ns, const std::string& pod,
                                  const std::string& pod_uid, const std::string& container,
                                  bool sandbox = false,
                                  std::optional<bool> host_network = std::nullopt);
  // CRI-O: <dir>/<container_id>/userdata/config.json with io.kubernetes.pod.*
  // annotations (container name "POD" for a sandbox).
  // Both: `host_network` set writes linux.namespaces, with a network entry
  // unless true (a hostNetwork Pod's spec has none).
  static void AddCrioConfig(const std::string& dir, const std::string& container_id,
                            const std::string& ns, const std::string& pod,
                            const std::string& pod_uid, const std::string& container,
                            bool sandbox = false, std::optional<bool> host_network = std::nullopt);

 private:
  std::string PidDir(uint32_t pid) const;
  std::string root_;
  uint64_t next_start_time_ = 1177388;
  std::map<uint32_t, uint64_t> start_times_;
  std::set<uint32_t> netns_written_;
};

// ProcFiles over the real filesystem that counts what it is asked, for
// "a re-scan reads only new PIDs" tests and the scale bench. The source owns
// it; keep a raw pointer to read the counts.
class CountingProcFiles : public ProcFiles {
 public:
  CountingProcFiles() : real_(RealProcFiles()) {}
  absl::StatusOr<std::string> Read(const std::string& path, size_t max_bytes) override;
  absl::StatusOr<std::vector<DirEntry>> List(const std::string& path) override;
  absl::StatusOr<FileId> Stat(const std::string& path) override;

  // Reads of files named `basename` ("cgroup", "stat", "dev", "config.json").
  int reads(const std::string& basename) const;
  int total_reads() const;
  int lists() const { return lists_; }
  int stats() const { return stats_; }
  void Reset();
  // Runs before each Read/List/Stat is passed on (to make a PID vanish
  // mid-scan, or to fail a path): a non-OK status is returned instead.
  std::function<absl::Status(const std::string& op, const std::string& path)> before;

 private:
  std::unique_ptr<ProcFiles> real_;
  std::map<std::string, int> reads_;
  int lists_ = 0;
  int stats_ = 0;
};

// Writes `contents` to `path`, creating parent directories; aborts on failure.
void WriteTestFile(const std::string& path, const std::string& contents);

}  // namespace fabric::podprocs::testing

#endif  // FABRIC_TEST_FAKES_FAKE_PROC_TREE_H_
