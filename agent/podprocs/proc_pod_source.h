// The real ProcSource: host processes from an injected proc root
// (HostPaths::proc_root, "/proc" on a node), names from the container
// runtimes' state directories when the agent can read them.
//
// Privilege: the agent must run in the host PID namespace (hostPID) to see
// other Pods' processes at all. /proc/<pid>/cgroup, stat, comm and net/dev are
// world-readable; /proc/<pid>/ns/net (InHostNetns) needs the same UID as the
// process or CAP_SYS_PTRACE (ptrace access mode PTRACE_MODE_READ_FSCREDS).
// Without it InHostNetns is PermissionDenied and the caller reports the Pod's
// other_bytes as unknown rather than guessing.
#ifndef FABRIC_AGENT_PODPROCS_PROC_POD_SOURCE_H_
#define FABRIC_AGENT_PODPROCS_PROC_POD_SOURCE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/base/host_paths.h"
#include "agent/podprocs/pod_processes.h"

namespace fabric::podprocs {

// The file access seam under ProcPodSource, so tests count what a scan reads.
// Errors: NotFound when the file (or its process) is gone (ENOENT, ESRCH),
// PermissionDenied (EACCES, EPERM), InvalidArgument when longer than
// `max_bytes`, Internal otherwise; each names the path.
class ProcFiles {
 public:
  struct FileId {
    uint64_t dev = 0;
    uint64_t ino = 0;
    bool operator==(const FileId&) const = default;
  };
  // One readdir entry: its inode number comes free with the name. /proc gives
  // each /proc/<pid> instance a new inode (get_next_ino), so a PID reused by
  // another process shows a different one.
  struct DirEntry {
    std::string name;
    uint64_t ino = 0;
    bool directory = true;  // d_type DT_DIR (or DT_UNKNOWN)
  };
  virtual ~ProcFiles() = default;
  virtual absl::StatusOr<std::string> Read(const std::string& path, size_t max_bytes) = 0;
  // Entries of a directory (readdir order), without "." and "..".
  virtual absl::StatusOr<std::vector<DirEntry>> List(const std::string& path) = 0;
  // stat(2), following symlinks (for /proc/<pid>/ns/net: the namespace's inode).
  virtual absl::StatusOr<FileId> Stat(const std::string& path) = 0;
};

// open/read/close, readdir, stat on the real filesystem.
std::unique_ptr<ProcFiles> RealProcFiles();

enum class RuntimeKind { kContainerd, kCrio };

// Where a runtime keeps each container's OCI config.json:
//   containerd: <dir>/<id>/config.json
//   CRI-O:      <dir>/<id>/userdata/config.json
struct RuntimeStateDir {
  RuntimeKind kind = RuntimeKind::kContainerd;
  std::string dir;
};

// containerd's k8s.io task folder and CRI-O's overlay-containers, at their
// default host locations.
inline constexpr char kContainerdStateDir[] =
    "/run/containerd/io.containerd.runtime.v2.task/k8s.io";
inline constexpr char kCrioStateDir[] = "/run/containers/storage/overlay-containers";
std::vector<RuntimeStateDir> DefaultRuntimeStateDirs();

// An OCI config.json is tens of kilobytes; a bigger one is not read.
inline constexpr size_t kMaxRuntimeConfigBytes = 1 << 20;

// The names in one OCI config.json's annotations (containerd's
// io.kubernetes.cri.sandbox-namespace / sandbox-name / sandbox-uid /
// container-name / container-type, CRI-O's io.kubernetes.pod.namespace /
// pod.name / pod.uid / io.kubernetes.container.name /
// io.kubernetes.cri-o.ContainerType). Never throws. InvalidArgument when the
// text is not JSON, lacks the namespace, Pod name, UID or (for a
// non-sandbox container) the container name, or a name fails
// CheckExternalName (UTF-8, no control characters, at most 253 bytes).
absl::StatusOr<ContainerNames> ParseRuntimeConfig(RuntimeKind kind, absl::string_view json_text);

// What one ScanPods did, for tests and the scale bench.
struct ScanStats {
  size_t pids = 0;           // numeric entries under the proc root
  size_t pod_processes = 0;  // returned
  size_t cgroup_reads = 0;   // /proc/<pid>/cgroup files read
  size_t vanished = 0;       // PIDs gone between readdir and read (not errors)
  size_t reused = 0;         // cached PIDs that are another process now
  size_t unreadable = 0;     // other read errors (skipped, logged at debug)
};

class ProcPodSource : public ProcSource {
 public:
  struct Options {
    std::string proc_root = "/proc";
    // Looked up in order for Names(); empty: no names from runtimes.
    std::vector<RuntimeStateDir> runtime_dirs;
  };
  // `files` null: RealProcFiles().
  explicit ProcPodSource(Options options, std::unique_ptr<ProcFiles> files = nullptr);

  // readdir(proc_root), then for each PID not seen before (or seen once
  // outside a Pod, see below) its stat start time and cgroup. The cache is
  // keyed by PID and start time: a cached PID whose directory inode changed
  // (readdir gives it) has its start time read again, and a different one is
  // another process, identified afresh. PIDs no longer listed leave the
  // cache. An unchanged node costs one readdir and no file reads. A PID first
  // seen outside every Pod is read once more on the next scan before it is
  // trusted: runc starts a container's (or an exec's) process in the
  // runtime's cgroup and moves it into the container's an instant later.
  // Error only when proc_root cannot be listed.
  absl::StatusOr<std::vector<PodProcess>> ScanPods() override;
  // A PID the last scan listed is answered from the cache (the scan checked
  // its instance); any other has its start time checked (one read of
  // /proc/<pid>/stat), so a reused PID is never attributed to the Pod of the
  // process that had it before. The sampler scans right before it asks.
  absl::StatusOr<PodProcess> Identify(uint32_t pid) override;
  // /proc/<tid>/status's Tgid (a thread's /proc/<tid> exists, unlisted).
  absl::StatusOr<uint32_t> ProcessOf(uint32_t tid) override;
  absl::StatusOr<NetBytes> NetDevBytes(uint32_t pid) override;
  // Cached per process while its PID stays (a scan finds reuse).
  absl::StatusOr<bool> InHostNetns(uint32_t pid) override;
  std::string Comm(uint32_t pid) override;
  // By container ID, from the runtime directory that matches the identity's
  // runtime (all of them when unknown). Found names are cached until the
  // container's processes leave a scan, and so is a config that is there but
  // unusable (not JSON, too big, unclean names); a missing one is looked for
  // again next time. A config whose UID differs from the cgroup's Pod UID is
  // not trusted (nullopt).
  std::optional<ContainerNames> Names(const CgroupIdentity& id) override;

  ScanStats last_scan_stats() const;

 private:
  struct Entry {
    uint64_t start_time = 0;
    uint64_t dir_ino = 0;                    // of /proc/<pid> when last listed
    std::optional<bool> in_host_netns;       // InHostNetns, once told
    bool listed = false;                     // by the last scan (not only Identify'd)
    std::optional<CgroupIdentity> identity;  // nullopt: not in a Pod
    bool confirmed = false;                  // a non-Pod result read twice
  };
  enum class ReadResult { kOk, kVanished, kError };

  std::string PidPath(uint32_t pid, const char* rel) const;
  // Reads the start time and the cgroup of `pid` into `entry`.
  ReadResult ReadIdentity(uint32_t pid, Entry* entry, ScanStats* stats);
  ReadResult ReadCgroup(uint32_t pid, std::optional<CgroupIdentity>* identity, ScanStats* stats);
  absl::StatusOr<uint64_t> ReadStartTime(uint32_t pid);
  // ns/net of `pid` against pid 1's (needs ptrace rights over `pid`), else
  // the runtime's record.
  absl::StatusOr<bool> InHostNetnsUncached(uint32_t pid);
  absl::StatusOr<bool> InHostNetnsByLink(uint32_t pid);

  const Options options_;
  const std::unique_ptr<ProcFiles> files_;
  mutable std::mutex mu_;
  std::map<uint32_t, Entry> cache_;
  // By container ID; nullopt: a config that exists but is not usable (read
  // once, not every period).
  std::map<std::string, std::optional<ContainerNames>> names_;
  ScanStats last_stats_;
};

// The source for a node: proc root from `paths`, the default runtime dirs.
std::unique_ptr<ProcSource> OpenProcPodSource(const HostPaths& paths);

// The Tgid line of /proc/<pid>/status text: the process a task belongs to.
// InvalidArgument when there is none.
absl::StatusOr<uint32_t> ParseStatusTgid(absl::string_view status_text);

// Field 22 (starttime, clock ticks since boot) of /proc/<pid>/stat text.
// comm (field 2) may hold spaces and ')', so fields are counted after the
// last ')'. InvalidArgument otherwise.
absl::StatusOr<uint64_t> ParseStatStartTime(absl::string_view stat_text);

}  // namespace fabric::podprocs

#endif  // FABRIC_AGENT_PODPROCS_PROC_POD_SOURCE_H_
