#include "test/fakes/fake_proc_tree.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "agent/base/json_text.h"
#include "nlohmann/json.hpp"

namespace fabric::podprocs::testing {
namespace fs = std::filesystem;
namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "FakeProcTree: %s\n", what.c_str());
  std::abort();
}

std::string Underscored(std::string uid) {
  for (char& c : uid) {
    if (c == '-') c = '_';
  }
  return uid;
}

const char* QosName(QosClass q) {
  switch (q) {
    case QosClass::kBurstable:
      return "burstable";
    case QosClass::kBestEffort:
      return "besteffort";
    case QosClass::kGuaranteed:
      break;
  }
  return "";
}

// <prefix>[-<qos>]-pod<u_i_d>.slice, and its parents under `prefix`.slice.
std::string SystemdPodPath(const std::string& prefix, const FakeContainer& c) {
  const std::string qos = QosName(c.qos);
  std::string path = "/" + prefix + ".slice";
  std::string pod_slice = prefix;
  if (!qos.empty()) {
    pod_slice += "-" + qos;
    path += "/" + pod_slice + ".slice";
  }
  return path + "/" + pod_slice + "-pod" + Underscored(c.pod_uid) + ".slice";
}

std::string SystemdScope(const FakeContainer& c) {
  if (c.container_id.empty()) return "";
  if (c.runtime == "cri-o") return "/crio-" + c.container_id + ".scope";
  if (c.runtime == "docker") return "/docker-" + c.container_id + ".scope";
  return "/cri-containerd-" + c.container_id + ".scope";
}

std::string CgroupfsPath(const FakeContainer& c) {
  const std::string qos = QosName(c.qos);
  std::string path = "/kubepods" + (qos.empty() ? "" : "/" + qos) + "/pod" + c.pod_uid;
  if (c.container_id.empty()) return path;
  return path + (c.runtime == "cri-o" ? "/crio-" : "/") + c.container_id;
}

// The v1 hierarchies of a Debian 11 / EL8 node, every one with the same path
// (the kubelet places containers in all of them), as the kernel lists them.
std::string V1Lines(const std::string& path, const std::string& unified) {
  std::string out;
  const char* controllers[] = {"pids",  "hugetlb", "net_cls,net_prio", "perf_event", "cpu,cpuacct",
                               "blkio", "memory",  "devices",          "freezer",    "cpuset",
                               "misc",  "rdma"};
  int id = 13;
  for (const char* c : controllers) {
    out += std::to_string(id--) + ":" + c + ":" + (std::string(c) == "misc" ? "/" : path) + "\n";
  }
  out += "1:name=systemd:" + path + "\n";
  out += "0::" + unified + "\n";
  return out;
}

std::string NetDevLine(const std::string& name, uint64_t rx_bytes, uint64_t rx_packets,
                       uint64_t tx_bytes, uint64_t tx_packets) {
  // net/core/net-procfs.c dev_seq_printf_stats.
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "%6s:%8llu %7llu %4llu %4llu %4llu %5llu %10llu %9llu "
                "%8llu %7llu %4llu %4llu %4llu %5llu %7llu %10llu\n",
                name.c_str(), static_cast<unsigned long long>(rx_bytes),
                static_cast<unsigned long long>(rx_packets), 0ULL, 0ULL, 0ULL, 0ULL, 0ULL, 0ULL,
                static_cast<unsigned long long>(tx_bytes),
                static_cast<unsigned long long>(tx_packets), 0ULL, 0ULL, 0ULL, 0ULL, 0ULL, 0ULL);
  return buf;
}

}  // namespace

absl::StatusOr<std::string> CountingProcFiles::Read(const std::string& path, size_t max_bytes) {
  ++reads_[fs::path(path).filename().string()];
  if (before) {
    absl::Status s = before("read", path);
    if (!s.ok()) return s;
  }
  return real_->Read(path, max_bytes);
}

absl::StatusOr<std::vector<ProcFiles::DirEntry>> CountingProcFiles::List(const std::string& path) {
  ++lists_;
  if (before) {
    absl::Status s = before("list", path);
    if (!s.ok()) return s;
  }
  return real_->List(path);
}

absl::StatusOr<ProcFiles::FileId> CountingProcFiles::Stat(const std::string& path) {
  ++stats_;
  if (before) {
    absl::Status s = before("stat", path);
    if (!s.ok()) return s;
  }
  return real_->Stat(path);
}

int CountingProcFiles::reads(const std::string& basename) const {
  auto it = reads_.find(basename);
  return it == reads_.end() ? 0 : it->second;
}

int CountingProcFiles::total_reads() const {
  int n = 0;
  for (const auto& [name, count] : reads_) n += count;
  return n;
}

void CountingProcFiles::Reset() {
  reads_.clear();
  lists_ = 0;
  stats_ = 0;
}

void WriteTestFile(const std::string& path, const std::string& contents) {
  // Plain syscalls: the scale bench writes trees of thousands of processes.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 && errno == ENOENT) {
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    if (ec) Die("mkdir for " + path + ": " + ec.message());
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  }
  if (fd < 0) Die("open " + path + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n <= 0) {
      ::close(fd);
      Die("write " + path + ": " + std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

FakeProcTree::FakeProcTree(std::string proc_root) : root_(std::move(proc_root)) {
  std::error_code ec;
  fs::create_directories(root_, ec);
  if (ec) Die("mkdir " + root_ + ": " + ec.message());
  AddProcess(1, "systemd", "0::/init.scope\n", kHostNetns);
}

std::string FakeProcTree::PidDir(uint32_t pid) const { return root_ + "/" + std::to_string(pid); }

void FakeProcTree::AddProcess(uint32_t pid, const std::string& comm, const std::string& cgroup_text,
                              uint32_t netns_id) {
  const std::string dir = PidDir(pid);
  if (::mkdir(dir.c_str(), 0755) != 0) {
    Die("mkdir " + dir + ": " + std::strerror(errno) + " (RemoveProcess first)");
  }
  for (const char* sub : {"/net", "/ns"}) {
    if (::mkdir((dir + sub).c_str(), 0755) != 0) Die("mkdir " + dir + sub);
  }
  const uint64_t start = next_start_time_;
  next_start_time_ += 37;
  start_times_[pid] = start;
  WriteTestFile(dir + "/cgroup", cgroup_text);
  WriteTestFile(dir + "/comm", comm + "\n");
  char stat[512];
  std::snprintf(stat, sizeof(stat),
                "%u (%s) S 1 %u %u 0 -1 4194560 1207 0 0 0 3 2 0 0 20 0 1 0 %llu 13168640 2336 "
                "18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 3 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
                pid, comm.c_str(), pid, pid, static_cast<unsigned long long>(start));
  WriteTestFile(dir + "/stat", stat);
  WriteTestFile(dir + "/status", StatusText(comm, pid, pid));
  WriteTestFile(dir + "/net/dev", NetDevText(0, 0));
  const std::string netns = root_ + "/.netns/net-" + std::to_string(netns_id);
  if (netns_written_.insert(netns_id).second) {
    WriteTestFile(netns, "net:[" + std::to_string(4026531840u + netns_id) + "]");
  }
  const std::string target = "../../.netns/net-" + std::to_string(netns_id);
  if (::symlink(target.c_str(), (dir + "/ns/net").c_str()) != 0) {
    Die("symlink " + dir + "/ns/net: " + std::strerror(errno));
  }
}

void FakeProcTree::AddPodProcess(uint32_t pid, const FakeContainer& c, CgroupStyle style,
                                 uint32_t netns_id, uint64_t rx_bytes, uint64_t tx_bytes,
                                 const std::string& comm) {
  AddProcess(pid, comm, CgroupText(c, style), netns_id);
  SetNetBytes(pid, rx_bytes, tx_bytes);
}

void FakeProcTree::AddHostProcess(uint32_t pid, const std::string& comm,
                                  const std::string& cgroup_text) {
  AddProcess(pid, comm, cgroup_text, kHostNetns);
}

void FakeProcTree::SetNetBytes(uint32_t pid, uint64_t rx_bytes, uint64_t tx_bytes) {
  SetNetDevText(pid, NetDevText(rx_bytes, tx_bytes));
}

void FakeProcTree::SetNetDevText(uint32_t pid, const std::string& text) {
  WriteTestFile(PidDir(pid) + "/net/dev", text);
}

void FakeProcTree::SetCgroupText(uint32_t pid, const std::string& text) {
  WriteTestFile(PidDir(pid) + "/cgroup", text);
}

void FakeProcTree::RemoveProcess(uint32_t pid) {
  // Kept aside, not deleted: its inode stays taken, so a process added again
  // under this PID gets another, as every new /proc/<pid> instance does.
  const std::string gone =
      root_ + "/.gone/" + std::to_string(pid) + "-" + std::to_string(start_times_[pid]);
  std::error_code ec;
  fs::create_directories(root_ + "/.gone", ec);
  fs::rename(PidDir(pid), gone, ec);
  if (ec) Die("move " + PidDir(pid) + " aside: " + ec.message());
  start_times_.erase(pid);
}

void FakeProcTree::AddThread(uint32_t tid, uint32_t tgid, const std::string& comm) {
  const std::string dir = PidDir(tgid) + "/task/" + std::to_string(tid);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) Die("mkdir " + dir + ": " + ec.message());
  const uint64_t start = next_start_time_;
  next_start_time_ += 37;
  start_times_[tid] = start;
  fs::copy_file(PidDir(tgid) + "/cgroup", dir + "/cgroup", ec);
  if (ec) Die("copy cgroup to " + dir + ": " + ec.message());
  WriteTestFile(dir + "/comm", comm + "\n");
  char stat[512];
  std::snprintf(stat, sizeof(stat),
                "%u (%s) S 1 %u %u 0 -1 4194368 12 0 0 0 0 0 0 0 20 0 3 0 %llu 13168640 2336 "
                "18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 -1 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
                tid, comm.c_str(), tgid, tgid, static_cast<unsigned long long>(start));
  WriteTestFile(dir + "/stat", stat);
  WriteTestFile(dir + "/status", StatusText(comm, tgid, tid));
  // /proc/<tid> resolves, as the kernel's does, but is no directory entry of
  // the root's own: readdir shows a link, which a scan skips.
  const std::string link = root_ + "/" + std::to_string(tid);
  const std::string target = std::to_string(tgid) + "/task/" + std::to_string(tid);
  if (::symlink(target.c_str(), link.c_str()) != 0) {
    Die("symlink " + link + ": " + std::strerror(errno));
  }
}

void FakeProcTree::RemoveThread(uint32_t tid, uint32_t tgid) {
  ::unlink((root_ + "/" + std::to_string(tid)).c_str());
  std::error_code ec;
  fs::remove_all(PidDir(tgid) + "/task/" + std::to_string(tid), ec);
  if (ec) Die("remove thread " + std::to_string(tid) + ": " + ec.message());
  start_times_.erase(tid);
}

std::string FakeProcTree::StatusText(const std::string& comm, uint32_t tgid, uint32_t pid) {
  return "Name:\t" + comm + "\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t" + std::to_string(tgid) +
         "\nNgid:\t0\nPid:\t" + std::to_string(pid) +
         "\nPPid:\t1\nTracerPid:\t0\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n"
         "FDSize:\t64\nThreads:\t1\n";
}

uint64_t FakeProcTree::StartTime(uint32_t pid) const {
  auto it = start_times_.find(pid);
  return it == start_times_.end() ? 0 : it->second;
}

std::string FakeProcTree::CgroupText(const FakeContainer& c, CgroupStyle style) {
  switch (style) {
    case CgroupStyle::kSystemdV2:
      return "0::" + SystemdPodPath("kubepods", c) + SystemdScope(c) + "\n";
    case CgroupStyle::kSystemdV1: {
      const std::string path = SystemdPodPath("kubepods", c) + SystemdScope(c);
      return V1Lines(path, path);
    }
    case CgroupStyle::kCgroupfsV2:
      return "0::" + CgroupfsPath(c) + "\n";
    case CgroupStyle::kCgroupfsV1:
      return V1Lines(CgroupfsPath(c), "/");
    case CgroupStyle::kKindV2:
      return "0::/kubelet.slice" + SystemdPodPath("kubelet-kubepods", c) + SystemdScope(c) + "\n";
    case CgroupStyle::kNamespacedV2: {
      // Seen from a container of another Pod in the same QoS class: up to
      // the QoS slice, then down.
      std::string path = SystemdPodPath("kubepods", c);
      path = path.substr(path.rfind('/'));
      return "0::/../.." + path + SystemdScope(c) + "\n";
    }
  }
  return "0::/\n";
}

std::string FakeProcTree::NetDevText(uint64_t rx_bytes, uint64_t tx_bytes) {
  return std::string(
             "Inter-|   Receive                                                |  Transmit\n"
             " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets "
             "errs drop fifo colls carrier compressed\n") +
         NetDevLine("lo", 16321172244ULL, 7416053, 16321172244ULL, 7416053) +
         NetDevLine("eth0", rx_bytes, rx_bytes / 1500, tx_bytes, tx_bytes / 1500);
}

std::string FakeProcTree::PodUid(uint32_t n) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%08x-5a1e-4c0d-8e2f-%012x", n, n * 2654435761u);
  return buf;
}

std::string FakeProcTree::ContainerId(uint32_t n) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08x", n);
  std::string id = buf;
  while (id.size() < 64) id += "c0ffee5eed";
  return id.substr(0, 64);
}

namespace {
// linux.namespaces of an OCI spec: a network entry unless the Pod is hostNetwork.
void AddNamespaces(nlohmann::json& doc, std::optional<bool> host_network) {
  if (!host_network) return;
  nlohmann::json nss = nlohmann::json::array(
      {{{"type", "pid"}}, {{"type", "ipc"}}, {{"type", "uts"}}, {{"type", "mount"}}});
  if (!*host_network) nss.push_back({{"type", "network"}, {"path", "/var/run/netns/cni-0"}});
  doc["linux"] = {{"namespaces", nss}};
}
}  // namespace

void FakeProcTree::AddContainerdConfig(const std::string& dir, const std::string& container_id,
                                       const std::string& ns, const std::string& pod,
                                       const std::string& pod_uid, const std::string& container,
                                       bool sandbox, std::optional<bool> host_network) {
  nlohmann::json ann = {
      {"io.kubernetes.cri.container-type", sandbox ? "sandbox" : "container"},
      {"io.kubernetes.cri.sandbox-id", container_id},
      {"io.kubernetes.cri.sandbox-name", pod},
      {"io.kubernetes.cri.sandbox-namespace", ns},
      {"io.kubernetes.cri.sandbox-uid", pod_uid},
  };
  if (!sandbox) {
    ann["io.kubernetes.cri.container-name"] = container;
    ann["io.kubernetes.cri.image-name"] = "registry.example/trainer:1";
  }
  nlohmann::json doc = {{"ociVersion", "1.1.0"},
                        {"process", {{"args", {sandbox ? "/pause" : "/bin/sh"}}}},
                        {"root", {{"path", "rootfs"}}},
                        {"annotations", ann}};
  AddNamespaces(doc, host_network);
  WriteTestFile(dir + "/" + container_id + "/config.json", DumpJson(doc));
}

void FakeProcTree::AddCrioConfig(const std::string& dir, const std::string& container_id,
                                 const std::string& ns, const std::string& pod,
                                 const std::string& pod_uid, const std::string& container,
                                 bool sandbox, std::optional<bool> host_network) {
  const nlohmann::json ann = {
      {"io.kubernetes.cri-o.ContainerType", sandbox ? "sandbox" : "container"},
      {"io.kubernetes.cri-o.ContainerID", container_id},
      {"io.kubernetes.container.name", sandbox ? "POD" : container},
      {"io.kubernetes.pod.name", pod},
      {"io.kubernetes.pod.namespace", ns},
      {"io.kubernetes.pod.uid", pod_uid},
  };
  nlohmann::json doc = {{"ociVersion", "1.0.2-dev"},
                        {"process", {{"args", {sandbox ? "/pause" : "/bin/sh"}}}},
                        {"root", {{"path", "merged"}}},
                        {"annotations", ann}};
  AddNamespaces(doc, host_network);
  WriteTestFile(dir + "/" + container_id + "/userdata/config.json", DumpJson(doc));
}

}  // namespace fabric::podprocs::testing
