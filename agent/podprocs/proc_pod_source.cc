#include "agent/podprocs/proc_pod_source.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "agent/base/logging.h"
#include "agent/base/unique_fd.h"
#include "agent/base/utf8.h"
#include "agent/podprocs/cgroup_path.h"
#include "agent/podprocs/net_dev.h"
#include "nlohmann/json.hpp"

namespace fabric::podprocs {
namespace {

// Kubernetes names are DNS subdomains or labels: 253 bytes at most.
constexpr size_t kMaxNameBytes = 253;
constexpr size_t kMaxStatBytes = 4096;
constexpr size_t kMaxCommBytes = 256;
constexpr size_t kMaxStatusBytes = 16384;
// Names of containers that leave every scan are dropped; this bounds a
// caller that only ever calls Names() without scanning.
constexpr size_t kMaxCachedNames = 16384;

absl::Status ErrnoStatus(int err, const std::string& what) {
  const std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ESRCH:  // the process exited while we read its files
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

struct DirCloser {
  void operator()(DIR* d) const { ::closedir(d); }
};

class RealFiles : public ProcFiles {
 public:
  absl::StatusOr<std::string> Read(const std::string& path, size_t max_bytes) override {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
    if (fd.get() < 0) return ErrnoStatus(errno, "open " + path);
    std::string out;
    size_t chunk = 4096;
    for (;;) {
      const size_t have = out.size();
      out.resize(have + chunk);
      const ssize_t n = ::read(fd.get(), out.data() + have, chunk);
      if (n < 0) {
        if (errno == EINTR) {
          out.resize(have);
          continue;
        }
        return ErrnoStatus(errno, "read " + path);
      }
      out.resize(have + static_cast<size_t>(n));
      if (n == 0) break;
      if (out.size() > max_bytes) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": longer than ", max_bytes, " bytes"));
      }
      chunk = std::min<size_t>(chunk * 2, 1 << 20);
    }
    return out;
  }

  absl::StatusOr<std::vector<DirEntry>> List(const std::string& path) override {
    std::unique_ptr<DIR, DirCloser> dir(::opendir(path.c_str()));
    if (!dir) return ErrnoStatus(errno, "opendir " + path);
    std::vector<DirEntry> entries;
    for (;;) {
      errno = 0;
      const dirent* e = ::readdir(dir.get());
      if (e == nullptr) {
        if (errno != 0) return ErrnoStatus(errno, "readdir " + path);
        break;
      }
      if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
      entries.push_back(DirEntry{e->d_name, static_cast<uint64_t>(e->d_ino),
                                 e->d_type == DT_DIR || e->d_type == DT_UNKNOWN});
    }
    return entries;
  }

  absl::StatusOr<FileId> Stat(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "stat " + path);
    return FileId{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  }
};

// A /proc entry that is a process: decimal, no sign, no leading zero.
bool ParsePid(const std::string& name, uint32_t* pid) {
  if (name.empty() || name.size() > 10 || name[0] == '0') return false;
  for (char c : name) {
    if (c < '0' || c > '9') return false;
  }
  uint64_t v = 0;
  if (!absl::SimpleAtoi(name, &v) || v > UINT32_MAX) return false;
  *pid = static_cast<uint32_t>(v);
  return true;
}

std::optional<std::string> StringAt(const nlohmann::json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

}  // namespace

std::unique_ptr<ProcFiles> RealProcFiles() { return std::make_unique<RealFiles>(); }

std::vector<RuntimeStateDir> DefaultRuntimeStateDirs() {
  return {{RuntimeKind::kContainerd, kContainerdStateDir}, {RuntimeKind::kCrio, kCrioStateDir}};
}

absl::StatusOr<uint32_t> ParseStatusTgid(absl::string_view status_text) {
  for (absl::string_view line : absl::StrSplit(status_text, '\n')) {
    if (!absl::ConsumePrefix(&line, "Tgid:")) continue;
    line = absl::StripAsciiWhitespace(line);
    uint32_t tgid = 0;
    if (line.empty() || line.size() > 10 ||
        line.find_first_not_of("0123456789") != absl::string_view::npos ||
        !absl::SimpleAtoi(line, &tgid) || tgid == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("status has a bad Tgid: '", EscapeBytes(line, 32), "'"));
    }
    return tgid;
  }
  return absl::InvalidArgumentError("status has no Tgid line");
}

absl::StatusOr<uint64_t> ParseStatStartTime(absl::string_view stat_text) {
  const size_t paren = stat_text.rfind(')');
  if (paren == absl::string_view::npos) {
    return absl::InvalidArgumentError("stat has no ')' after comm");
  }
  // Fields from 3 (state) on; starttime is field 22.
  std::vector<absl::string_view> fields =
      absl::StrSplit(stat_text.substr(paren + 1), absl::ByAnyChar(" \n"), absl::SkipEmpty());
  constexpr size_t kStartTimeIndex = 22 - 3;
  uint64_t start = 0;
  if (fields.size() <= kStartTimeIndex || fields[kStartTimeIndex].empty() ||
      fields[kStartTimeIndex].size() > 20 ||
      fields[kStartTimeIndex].find_first_not_of("0123456789") != absl::string_view::npos ||
      !absl::SimpleAtoi(fields[kStartTimeIndex], &start)) {
    return absl::InvalidArgumentError(
        absl::StrCat("stat has no start time (field 22): '", EscapeBytes(stat_text), "'"));
  }
  return start;
}

absl::StatusOr<ContainerNames> ParseRuntimeConfig(RuntimeKind kind, absl::string_view json_text) {
  if (json_text.size() > kMaxRuntimeConfigBytes) {
    return absl::InvalidArgumentError(absl::StrCat("config of ", json_text.size(), " bytes"));
  }
  const nlohmann::json doc = nlohmann::json::parse(json_text.begin(), json_text.end(), nullptr,
                                                   /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return absl::InvalidArgumentError("config is not a JSON object");
  }
  auto ann = doc.find("annotations");
  if (ann == doc.end() || !ann->is_object()) {
    return absl::InvalidArgumentError("config has no annotations");
  }
  const bool containerd = kind == RuntimeKind::kContainerd;
  std::optional<std::string> ns = StringAt(
      *ann, containerd ? "io.kubernetes.cri.sandbox-namespace" : "io.kubernetes.pod.namespace");
  std::optional<std::string> pod =
      StringAt(*ann, containerd ? "io.kubernetes.cri.sandbox-name" : "io.kubernetes.pod.name");
  std::optional<std::string> uid =
      StringAt(*ann, containerd ? "io.kubernetes.cri.sandbox-uid" : "io.kubernetes.pod.uid");
  std::optional<std::string> type = StringAt(
      *ann, containerd ? "io.kubernetes.cri.container-type" : "io.kubernetes.cri-o.ContainerType");
  std::optional<std::string> container = StringAt(
      *ann, containerd ? "io.kubernetes.cri.container-name" : "io.kubernetes.container.name");
  if (!ns || !pod || !uid) {
    return absl::InvalidArgumentError("config lacks the Pod's namespace, name or UID");
  }
  ContainerNames names;
  names.sandbox = type.has_value() && *type == "sandbox";
  if (!names.sandbox && !container) {
    return absl::InvalidArgumentError("config lacks the container name");
  }
  if (!IsPodUid(*uid)) {
    return absl::InvalidArgumentError(absl::StrCat("bad Pod UID '", EscapeBytes(*uid), "'"));
  }
  for (const auto& [what, value] : {std::pair<const char*, const std::string*>{"namespace", &*ns},
                                    {"pod", &*pod},
                                    {"container", names.sandbox ? nullptr : &*container}}) {
    if (value == nullptr) continue;
    absl::Status ok = CheckExternalName(what, *value, kMaxNameBytes);
    if (!ok.ok() || value->empty()) {
      return ok.ok() ? absl::InvalidArgumentError(absl::StrCat("empty ", what)) : ok;
    }
  }
  names.ns = *ns;
  names.pod = *pod;
  names.pod_uid = *uid;
  // A hostNetwork Pod's sandbox and containers get no network namespace in
  // their spec; the others create or join one.
  if (auto linux = doc.find("linux"); linux != doc.end() && linux->is_object()) {
    if (auto nss = linux->find("namespaces"); nss != linux->end() && nss->is_array()) {
      bool network = false;
      for (const nlohmann::json& n : *nss) {
        network = network || (n.is_object() && StringAt(n, "type") == "network");
      }
      names.host_network = !network;
    }
  }
  // A sandbox (pause) has no container name in containerd and "POD" in CRI-O:
  // the same (none) for both.
  if (!names.sandbox) names.container = *container;
  return names;
}

ProcPodSource::ProcPodSource(Options options, std::unique_ptr<ProcFiles> files)
    : options_(std::move(options)), files_(files ? std::move(files) : RealProcFiles()) {}

std::unique_ptr<ProcSource> OpenProcPodSource(const HostPaths& paths) {
  ProcPodSource::Options options;
  options.proc_root = paths.proc_root.empty() ? "/proc" : paths.proc_root;
  options.runtime_dirs = DefaultRuntimeStateDirs();
  return std::make_unique<ProcPodSource>(std::move(options));
}

std::string ProcPodSource::PidPath(uint32_t pid, const char* rel) const {
  return absl::StrCat(options_.proc_root, "/", pid, "/", rel);
}

absl::StatusOr<uint64_t> ProcPodSource::ReadStartTime(uint32_t pid) {
  absl::StatusOr<std::string> text = files_->Read(PidPath(pid, "stat"), kMaxStatBytes);
  if (!text.ok()) return text.status();
  if (text->empty()) return absl::NotFoundError(absl::StrCat("process ", pid, " is gone"));
  absl::StatusOr<uint64_t> start = ParseStatStartTime(*text);
  if (!start.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(PidPath(pid, "stat"), ": ", start.status().message()));
  }
  return start;
}

ProcPodSource::ReadResult ProcPodSource::ReadCgroup(uint32_t pid,
                                                    std::optional<CgroupIdentity>* identity,
                                                    ScanStats* stats) {
  ++stats->cgroup_reads;
  absl::StatusOr<std::string> text = files_->Read(PidPath(pid, "cgroup"), kMaxCgroupFileBytes);
  if (!text.ok()) {
    if (absl::IsNotFound(text.status())) return ReadResult::kVanished;
    if (absl::IsInvalidArgument(text.status())) {  // over the cap: no cgroup file of a Pod
      identity->reset();
      return ReadResult::kOk;
    }
    LogDebug(Component::kAgent, "podprocs: {}", text.status().message());
    return ReadResult::kError;
  }
  if (text->empty()) return ReadResult::kVanished;  // exited between open and read
  absl::StatusOr<CgroupIdentity> parsed = ParseProcCgroup(*text);
  if (parsed.ok()) {
    *identity = *std::move(parsed);
  } else {
    identity->reset();
  }
  return ReadResult::kOk;
}

ProcPodSource::ReadResult ProcPodSource::ReadIdentity(uint32_t pid, Entry* entry,
                                                      ScanStats* stats) {
  absl::StatusOr<uint64_t> start = ReadStartTime(pid);
  if (!start.ok()) {
    if (absl::IsNotFound(start.status())) return ReadResult::kVanished;
    LogDebug(Component::kAgent, "podprocs: {}", start.status().message());
    return ReadResult::kError;
  }
  entry->start_time = *start;
  const ReadResult r = ReadCgroup(pid, &entry->identity, stats);
  entry->confirmed = entry->identity.has_value();
  return r;
}

absl::StatusOr<std::vector<PodProcess>> ProcPodSource::ScanPods() {
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<std::vector<ProcFiles::DirEntry>> listed = files_->List(options_.proc_root);
  if (!listed.ok()) return listed.status();

  ScanStats stats;
  std::map<uint32_t, Entry> next;
  for (const ProcFiles::DirEntry& listing : *listed) {
    uint32_t pid = 0;
    if (!listing.directory || !ParsePid(listing.name, &pid)) continue;
    ++stats.pids;
    auto old = cache_.find(pid);
    std::optional<uint64_t> start;  // read already, for a PID whose instance changed
    if (old != cache_.end() && old->second.dir_ino != listing.ino) {
      // Another /proc/<pid> instance: the same process (its dentry was
      // reclaimed) only if the start time says so.
      absl::StatusOr<uint64_t> now = ReadStartTime(pid);
      if (!now.ok() && absl::IsNotFound(now.status())) {
        ++stats.vanished;
        continue;
      }
      if (now.ok() && *now == old->second.start_time) {
        old->second.dir_ino = listing.ino;
      } else {
        ++stats.reused;
        old = cache_.end();  // a new process under an old PID: identify it afresh
        if (now.ok()) start = *now;
      }
    }
    if (old != cache_.end()) {
      Entry entry = std::move(old->second);
      if (!entry.confirmed) {
        // Seen outside a Pod once: look again before trusting it (runc
        // moves a new process into its container's cgroup after starting it).
        const ReadResult r = ReadCgroup(pid, &entry.identity, &stats);
        if (r == ReadResult::kVanished) {
          ++stats.vanished;
          continue;
        }
        if (r == ReadResult::kError) ++stats.unreadable;
        entry.confirmed = true;
      }
      next.emplace(pid, std::move(entry));
      continue;
    }
    Entry entry;
    entry.dir_ino = listing.ino;
    ReadResult read;
    if (start) {
      entry.start_time = *start;
      read = ReadCgroup(pid, &entry.identity, &stats);
      entry.confirmed = entry.identity.has_value();
    } else {
      read = ReadIdentity(pid, &entry, &stats);
    }
    switch (read) {
      case ReadResult::kVanished:
        ++stats.vanished;
        continue;
      case ReadResult::kError:
        ++stats.unreadable;  // kept unconfirmed: read once more next scan
        entry.identity.reset();
        entry.confirmed = false;
        break;
      case ReadResult::kOk:
        break;
    }
    next.emplace(pid, std::move(entry));
  }
  for (auto& [pid, entry] : next) entry.listed = true;
  cache_ = std::move(next);  // PIDs not listed any more are gone

  std::vector<PodProcess> out;
  std::set<std::string> live_containers;
  for (const auto& [pid, entry] : cache_) {
    if (!entry.identity) continue;
    out.push_back(PodProcess{pid, *entry.identity});
    live_containers.insert(entry.identity->container_id);
  }
  for (auto it = names_.begin(); it != names_.end();) {
    it = live_containers.count(it->first) ? std::next(it) : names_.erase(it);
  }
  stats.pod_processes = out.size();
  last_stats_ = stats;
  return out;
}

absl::StatusOr<PodProcess> ProcPodSource::Identify(uint32_t pid) {
  std::lock_guard<std::mutex> lock(mu_);
  // The last scan checked this PID's instance (its /proc inode, else its
  // start time) moments ago: no file read. Any other PID is checked here.
  if (auto it = cache_.find(pid);
      it != cache_.end() && it->second.listed && (it->second.identity || it->second.confirmed)) {
    if (!it->second.identity) {
      return absl::NotFoundError(absl::StrCat("process ", pid, " is not in a Pod"));
    }
    return PodProcess{pid, *it->second.identity};
  }
  absl::StatusOr<uint64_t> start = ReadStartTime(pid);
  if (!start.ok()) {
    if (absl::IsNotFound(start.status())) {
      return absl::NotFoundError(absl::StrCat("process ", pid, " is gone"));
    }
    return start.status();
  }
  auto it = cache_.find(pid);
  const bool cached = it != cache_.end() && it->second.start_time == *start &&
                      (it->second.identity || it->second.confirmed);
  if (!cached) {
    Entry entry;
    entry.start_time = *start;
    ScanStats ignored;
    switch (ReadCgroup(pid, &entry.identity, &ignored)) {
      case ReadResult::kVanished:
        cache_.erase(pid);
        return absl::NotFoundError(absl::StrCat("process ", pid, " is gone"));
      case ReadResult::kError:
        return absl::UnavailableError(absl::StrCat("cannot read ", PidPath(pid, "cgroup")));
      case ReadResult::kOk:
        break;
    }
    entry.confirmed = entry.identity.has_value();
    it = cache_.insert_or_assign(pid, std::move(entry)).first;
  }
  if (!it->second.identity) {
    return absl::NotFoundError(absl::StrCat("process ", pid, " is not in a Pod"));
  }
  return PodProcess{pid, *it->second.identity};
}

absl::StatusOr<uint32_t> ProcPodSource::ProcessOf(uint32_t tid) {
  std::lock_guard<std::mutex> lock(mu_);
  // The last scan listed it: a process (readdir lists thread group leaders
  // only). Identify checks its start time next, as for any PID.
  if (auto it = cache_.find(tid); it != cache_.end() && it->second.listed) return tid;
  const std::string path = PidPath(tid, "status");
  absl::StatusOr<std::string> text = files_->Read(path, kMaxStatusBytes);
  if (!text.ok()) {
    if (absl::IsNotFound(text.status())) {
      return absl::NotFoundError(absl::StrCat("task ", tid, " is gone"));
    }
    return text.status();
  }
  if (text->empty()) return absl::NotFoundError(absl::StrCat("task ", tid, " is gone"));
  absl::StatusOr<uint32_t> tgid = ParseStatusTgid(*text);
  if (!tgid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", tgid.status().message()));
  }
  return tgid;
}

absl::StatusOr<NetBytes> ProcPodSource::NetDevBytes(uint32_t pid) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string path = PidPath(pid, "net/dev");
  absl::StatusOr<std::string> text = files_->Read(path, kMaxNetDevFileBytes);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("net bytes of process ", pid, ": ", text.status().message()));
  }
  absl::StatusOr<NetBytes> bytes = ParseNetDev(*text);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", bytes.status().message()));
  }
  return bytes;
}

absl::StatusOr<bool> ProcPodSource::InHostNetns(uint32_t pid) {
  {
    // A process keeps its network namespace (a Pod's processes never leave
    // theirs): told once while its PID stays the same process.
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = cache_.find(pid); it != cache_.end() && it->second.in_host_netns) {
      return *it->second.in_host_netns;
    }
  }
  absl::StatusOr<bool> answer = InHostNetnsUncached(pid);
  if (answer.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = cache_.find(pid); it != cache_.end()) it->second.in_host_netns = *answer;
  }
  return answer;
}

absl::StatusOr<bool> ProcPodSource::InHostNetnsUncached(uint32_t pid) {
  absl::StatusOr<bool> by_link = InHostNetnsByLink(pid);
  if (!absl::IsPermissionDenied(by_link.status())) return by_link;
  // No ptrace rights over the process (another UID, or capabilities the agent
  // lacks, as a pause process or a root container has against an agent that
  // drops them all): its runtime record says whether its spec has a netns.
  absl::StatusOr<PodProcess> p = Identify(pid);
  if (p.ok()) {
    if (std::optional<ContainerNames> n = Names(p->identity); n && n->host_network) {
      return *n->host_network;
    }
  }
  return absl::PermissionDeniedError(
      absl::StrCat(by_link.status().message(), "; no runtime record says either"));
}

absl::StatusOr<bool> ProcPodSource::InHostNetnsByLink(uint32_t pid) {
  std::lock_guard<std::mutex> lock(mu_);
  auto netns = [&](uint32_t p) -> absl::StatusOr<ProcFiles::FileId> {
    absl::StatusOr<ProcFiles::FileId> id = files_->Stat(PidPath(p, "ns/net"));
    if (absl::IsPermissionDenied(id.status())) {
      return absl::PermissionDeniedError(absl::StrCat(
          id.status().message(), " (reading a process's ns/net needs its UID or CAP_SYS_PTRACE)"));
    }
    if (absl::IsNotFound(id.status())) {
      return absl::NotFoundError(absl::StrCat("process ", p, " is gone: ", id.status().message()));
    }
    return id;
  };
  absl::StatusOr<ProcFiles::FileId> mine = netns(pid);
  if (!mine.ok()) return mine.status();
  absl::StatusOr<ProcFiles::FileId> host = netns(1);
  if (!host.ok()) return host.status();
  return *mine == *host;
}

std::string ProcPodSource::Comm(uint32_t pid) {
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<std::string> text = files_->Read(PidPath(pid, "comm"), kMaxCommBytes);
  if (!text.ok()) return "";
  std::string comm = *std::move(text);
  while (!comm.empty() && (comm.back() == '\n' || comm.back() == ' ')) comm.pop_back();
  // PR_SET_NAME takes any bytes: keep the name printable.
  return CheckExternalName("comm", comm, kMaxCommBytes).ok() ? comm : EscapeBytes(comm, 64);
}

std::optional<ContainerNames> ProcPodSource::Names(const CgroupIdentity& id) {
  if (!IsContainerId(id.container_id)) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = names_.find(id.container_id); it != names_.end()) {
    if (!it->second || it->second->pod_uid != id.pod_uid) return std::nullopt;
    return it->second;
  }
  if (names_.size() >= kMaxCachedNames) names_.clear();
  for (const RuntimeStateDir& dir : options_.runtime_dirs) {
    const bool containerd = dir.kind == RuntimeKind::kContainerd;
    if ((id.runtime == "containerd" && !containerd) || (id.runtime == "cri-o" && containerd) ||
        id.runtime == "docker") {
      continue;
    }
    const std::string path = absl::StrCat(dir.dir, "/", id.container_id,
                                          containerd ? "/config.json" : "/userdata/config.json");
    absl::StatusOr<std::string> text = files_->Read(path, kMaxRuntimeConfigBytes);
    if (absl::IsNotFound(text.status())) continue;
    absl::StatusOr<ContainerNames> names =
        text.ok() ? ParseRuntimeConfig(dir.kind, *text) : text.status();
    if (!names.ok()) {
      LogDebug(Component::kAgent, "podprocs: {}: {}", path, names.status().message());
      names_.emplace(id.container_id, std::nullopt);
      return std::nullopt;
    }
    names_.emplace(id.container_id, *names);
    // The cgroup is the kernel's word; a config naming another Pod is not used.
    if (names->pod_uid != id.pod_uid) return std::nullopt;
    return *names;
  }
  return std::nullopt;
}

ScanStats ProcPodSource::last_scan_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_stats_;
}

}  // namespace fabric::podprocs
