#include "agent/podprocs/proc_pod_source.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "agent/podprocs/cgroup_path.h"
#include "test/fakes/fake_proc_tree.h"
#include "test/testing/test_dirs.h"

namespace fabric::podprocs {
namespace {

using testing::CgroupStyle;
using testing::CountingProcFiles;
using testing::FakeContainer;
using testing::FakeProcTree;
using ::testing::HasSubstr;
using testing::kHostNetns;
using testing::WriteTestFile;

FakeContainer Container(uint32_t n, const char* runtime = "containerd") {
  return FakeContainer{FakeProcTree::PodUid(n), FakeProcTree::ContainerId(n), runtime};
}

class ProcPodSourceTest : public ::testing::Test {
 protected:
  ProcPodSourceTest() : tree_(dir_.path() + "/proc") {}

  // A source over the tree whose reads `files_` counts.
  std::unique_ptr<ProcPodSource> Source(std::vector<RuntimeStateDir> runtime_dirs = {}) {
    auto files = std::make_unique<CountingProcFiles>();
    files_ = files.get();
    ProcPodSource::Options options;
    options.proc_root = tree_.proc_root();
    options.runtime_dirs = std::move(runtime_dirs);
    return std::make_unique<ProcPodSource>(std::move(options), std::move(files));
  }

  static std::set<uint32_t> Pids(const std::vector<PodProcess>& procs) {
    std::set<uint32_t> out;
    for (const PodProcess& p : procs) out.insert(p.pid);
    return out;
  }

  fabric::testing::TempDir dir_{"podprocs"};
  FakeProcTree tree_;
  CountingProcFiles* files_ = nullptr;
};

TEST_F(ProcPodSourceTest, ScanFindsPodProcessesInEveryStyle) {
  tree_.AddPodProcess(100, Container(1), CgroupStyle::kSystemdV2, 1);
  tree_.AddPodProcess(101, Container(2, "cri-o"), CgroupStyle::kSystemdV1, 2);
  tree_.AddPodProcess(102, Container(3), CgroupStyle::kCgroupfsV2, 3);
  tree_.AddPodProcess(103, Container(4, "cri-o"), CgroupStyle::kCgroupfsV1, 4);
  tree_.AddPodProcess(104, Container(5), CgroupStyle::kKindV2, 5);
  tree_.AddPodProcess(105, Container(6), CgroupStyle::kNamespacedV2, 6);
  tree_.AddHostProcess(200, "sshd");
  tree_.AddHostProcess(2, "kthreadd", "0::/\n");
  // Not processes: /proc/self, /proc/net, a stray file.
  WriteTestFile(tree_.proc_root() + "/net/dev", FakeProcTree::NetDevText(1, 1));
  WriteTestFile(tree_.proc_root() + "/0123", "");
  std::filesystem::create_directory_symlink("100", tree_.proc_root() + "/self");

  auto source = Source();
  absl::StatusOr<std::vector<PodProcess>> procs = source->ScanPods();
  ASSERT_TRUE(procs.ok()) << procs.status();
  ASSERT_EQ(procs->size(), 6u);
  for (uint32_t i = 0; i < 6; ++i) {
    EXPECT_EQ((*procs)[i].pid, 100 + i);
    EXPECT_EQ((*procs)[i].identity.pod_uid, FakeProcTree::PodUid(i + 1));
    EXPECT_EQ((*procs)[i].identity.container_id, FakeProcTree::ContainerId(i + 1));
  }
  EXPECT_EQ((*procs)[1].identity.runtime, "cri-o");
  EXPECT_EQ((*procs)[3].identity.runtime, "cri-o");
  EXPECT_EQ(source->last_scan_stats().pids, 9u);  // 1, 2, 100-105, 200
}

TEST_F(ProcPodSourceTest, RescanReadsOnlyNewPids) {
  constexpr uint32_t kHost = 1900, kPods = 99;  // 2,000 processes with pid 1
  for (uint32_t i = 0; i < kHost; ++i) tree_.AddHostProcess(1000 + i, "worker");
  for (uint32_t i = 0; i < kPods; ++i) {
    tree_.AddPodProcess(5000 + i, Container(i), CgroupStyle::kSystemdV2, i + 1);
  }
  auto source = Source();
  ASSERT_TRUE(source->ScanPods().ok());
  EXPECT_EQ(files_->reads("cgroup"), 2000);
  EXPECT_EQ(files_->reads("stat"), 2000);
  EXPECT_EQ(source->last_scan_stats().pod_processes, kPods);

  // Processes seen outside a Pod are read once more (runc moves a new
  // process into its container after starting it), Pod processes are not.
  files_->Reset();
  ASSERT_TRUE(source->ScanPods().ok());
  EXPECT_EQ(files_->reads("cgroup"), static_cast<int>(kHost + 1));
  EXPECT_EQ(files_->reads("stat"), 0);

  // Unchanged: one readdir, no file read at all.
  files_->Reset();
  absl::StatusOr<std::vector<PodProcess>> procs = source->ScanPods();
  ASSERT_TRUE(procs.ok());
  EXPECT_EQ(procs->size(), kPods);
  EXPECT_EQ(files_->total_reads(), 0);
  EXPECT_EQ(files_->lists(), 1);
  EXPECT_EQ(source->last_scan_stats().cgroup_reads, 0u);

  // Three new processes cost three reads; exited ones leave the cache.
  tree_.AddPodProcess(9000, Container(500), CgroupStyle::kSystemdV2, 500);
  tree_.AddPodProcess(9001, Container(501), CgroupStyle::kSystemdV2, 501);
  tree_.AddHostProcess(9002, "new");
  tree_.RemoveProcess(5000);
  tree_.RemoveProcess(1000);
  files_->Reset();
  procs = source->ScanPods();
  ASSERT_TRUE(procs.ok());
  EXPECT_EQ(files_->reads("cgroup"), 3);
  EXPECT_EQ(procs->size(), kPods + 1);
  EXPECT_EQ(Pids(*procs).count(5000), 0u);
  EXPECT_EQ(Pids(*procs).count(9001), 1u);

  // PID 5000 comes back as another process: read again.
  tree_.AddHostProcess(5000, "reused");
  files_->Reset();
  procs = source->ScanPods();
  ASSERT_TRUE(procs.ok());
  EXPECT_EQ(files_->reads("cgroup"), 2);  // 5000, and 9002 once more
  EXPECT_EQ(Pids(*procs).count(5000), 0u);
}

// A PID reused between two scans, which never saw it missing: the cache is
// keyed by PID and start time, so the new process is identified afresh (its
// /proc/<pid> has another inode, as every new instance does).
TEST_F(ProcPodSourceTest, APidReusedBetweenScansIsAnotherProcess) {
  tree_.AddPodProcess(100, Container(1), CgroupStyle::kSystemdV2, 1);
  tree_.AddHostProcess(200, "host-tool");
  tree_.AddPodProcess(300, Container(3), CgroupStyle::kSystemdV2, 3);
  auto source = Source();
  ASSERT_TRUE(source->ScanPods().ok());
  ASSERT_TRUE(source->ScanPods().ok());  // 200 confirmed outside every Pod

  tree_.RemoveProcess(100);  // Pod 1's process exits; the PID goes to Pod 2's
  tree_.AddPodProcess(100, Container(2), CgroupStyle::kSystemdV2, 2);
  tree_.RemoveProcess(200);  // the host tool exits; the PID goes to Pod 4's
  tree_.AddPodProcess(200, Container(4), CgroupStyle::kSystemdV2, 4);
  files_->Reset();
  absl::StatusOr<std::vector<PodProcess>> procs = source->ScanPods();
  ASSERT_TRUE(procs.ok());
  std::map<uint32_t, std::string> containers;
  for (const PodProcess& p : *procs) containers[p.pid] = p.identity.container_id;
  EXPECT_EQ(containers[100], FakeProcTree::ContainerId(2));
  EXPECT_EQ(containers[200], FakeProcTree::ContainerId(4));
  EXPECT_EQ(containers[300], FakeProcTree::ContainerId(3));
  EXPECT_EQ(source->last_scan_stats().reused, 2u);
  EXPECT_EQ(files_->reads("stat"), 2) << "only the two changed PIDs";

  // Unchanged again: one readdir, no file read.
  files_->Reset();
  ASSERT_TRUE(source->ScanPods().ok());
  EXPECT_EQ(files_->total_reads(), 0);
  EXPECT_EQ(source->last_scan_stats().reused, 0u);
}

// The sampler scans, then identifies the resources' owners: a PID the scan
// listed (and checked) costs no read; one it did not is checked.
TEST_F(ProcPodSourceTest, IdentifyTrustsTheLastScan) {
  tree_.AddPodProcess(100, Container(1), CgroupStyle::kSystemdV2, 1);
  tree_.AddHostProcess(200, "tool");
  auto source = Source();
  ASSERT_TRUE(source->ScanPods().ok());
  ASSERT_TRUE(source->ScanPods().ok());  // 200 confirmed outside every Pod
  files_->Reset();
  EXPECT_EQ(source->Identify(100)->identity.container_id, FakeProcTree::ContainerId(1));
  EXPECT_EQ(source->Identify(200).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*source->ProcessOf(100), 100u);
  EXPECT_EQ(files_->total_reads(), 0);
  tree_.AddPodProcess(300, Container(3), CgroupStyle::kSystemdV2, 3);  // after the scan
  EXPECT_EQ(source->Identify(300)->identity.container_id, FakeProcTree::ContainerId(3));
  EXPECT_EQ(files_->reads("stat"), 1);
}

// The kernel names a resource's owner by its creating thread; /proc/<tid>
// resolves though readdir does not list it.
TEST_F(ProcPodSourceTest, ThreadsResolveToTheirProcessAndAreNotScanned) {
  tree_.AddPodProcess(100, Container(1), CgroupStyle::kSystemdV2, 1);
  tree_.AddThread(107, 100, "qp-setup");
  auto source = Source();
  absl::StatusOr<std::vector<PodProcess>> procs = source->ScanPods();
  ASSERT_TRUE(procs.ok());
  EXPECT_THAT(Pids(*procs), ::testing::ElementsAre(100u)) << "a thread is no process";
  EXPECT_EQ(*source->ProcessOf(107), 100u);
  EXPECT_EQ(*source->ProcessOf(100), 100u);
  tree_.RemoveThread(107, 100);
  EXPECT_EQ(source->ProcessOf(107).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(source->ProcessOf(4242).status().code(), absl::StatusCode::kNotFound);
}

TEST(ParseStatusTgid, KernelFormat) {
  EXPECT_EQ(*ParseStatusTgid(FakeProcTree::StatusText("worker", 100, 107)), 100u);
  EXPECT_EQ(*ParseStatusTgid("Name:\tx\nTgid:\t 42\nPid:\t43\n"), 42u);
  for (const char* bad : {"Name:\tx\n", "Tgid:\t\n", "Tgid:\t-1\n", "Tgid:\t0\n",
                          "Tgid:\t99999999999\n", "Tgid:\t4x\n"}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(ParseStatusTgid(bad).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST_F(ProcPodSourceTest, ProcessMovedIntoPodAfterFirstScanIsFound) {
  // runc start: first in the shim's cgroup, then in the container's.
  tree_.AddHostProcess(300, "runc:[2:INIT]", "0::/system.slice/containerd.service\n");
  auto source = Source();
  absl::StatusOr<std::vector<PodProcess>> procs = source->ScanPods();
  ASSERT_TRUE(procs.ok());
  EXPECT_TRUE(procs->empty());
  tree_.SetCgroupText(300, FakeProcTree::CgroupText(Container(9), CgroupStyle::kSystemdV2));
  procs = source->ScanPods();
  ASSERT_TRUE(procs.ok());
  ASSERT_EQ(procs->size(), 1u);
  EXPECT_EQ((*procs)[0].identity.container_id, FakeProcTree::ContainerId(9));
}

TEST_F(ProcPodSourceTest, VanishedPidsAreSkippedSilently) {
  tree_.AddPodProcess(100, Container(1), CgroupStyle::kSystemdV2, 1);
  tree_.AddPodProcess(101, Container(2), CgroupStyle::kSystemdV2, 2);
  tree_.AddPodProcess(102, Container(3), CgroupStyle::kSystemdV2, 3);
  tree_.AddPodProcess(103, Container(4), CgroupStyle::kSystemdV2, 4);
  auto source = Source();
  const std::string root = tree_.proc_root();
  files_->before = [&](const std::string& op, const std::string& path) -> absl::Status {
    // 100 exits after readdir, before its stat is read; 101 between its
    // stat and its cgroup; 102's read fails with ESRCH (mapped to NotFound).
    if (op == "read" && path == root + "/100/stat") tree_.RemoveProcess(100);
    if (op == "read" && path == root + "/101/cgroup") tree_.RemoveProcess(101);
    if (op == "read" && path == root + "/102/cgroup") {
      return absl::NotFoundError(path + ": No such process");
    }
    return absl::OkStatus();
  };
  absl::StatusOr<std::vector<PodProcess>> procs = source->ScanPods();
  ASSERT_TRUE(procs.ok()) << procs.status();
  EXPECT_EQ(Pids(*procs), std::set<uint32_t>{103});
  EXPECT_EQ(source->last_scan_stats().vanished, 3u);
  EXPECT_EQ(source->last_scan_stats().unreadable, 0u);

  // An empty cgroup read (exited between open and read) is a vanish too.
  files_->before = nullptr;
  tree_.AddPodProcess(104, Container(5), CgroupStyle::kSystemdV2, 5);
  tree_.SetCgroupText(104, "");
  procs = source->ScanPods();
  ASSERT_TRUE(procs.ok());
  EXPECT_EQ(source->last_scan_stats().vanished, 1u);  // 104; 102 reads now
  EXPECT_EQ(Pids(*procs), (std::set<uint32_t>{102, 103}));
}

TEST_F(ProcPodSourceTest, HostileCgroupFileIsNotAPod) {
  tree_.AddPodProcess(100, Container(1), CgroupStyle::kSystemdV2, 1);
  tree_.SetCgroupText(100, std::string(kMaxCgroupFileBytes * 2, '\n'));
  tree_.AddPodProcess(101, Container(2), CgroupStyle::kSystemdV2, 2);
  tree_.SetCgroupText(101, std::string("0::/\0\xff", 6));
  auto source = Source();
  absl::StatusOr<std::vector<PodProcess>> procs = source->ScanPods();
  ASSERT_TRUE(procs.ok());
  EXPECT_TRUE(procs->empty());
  EXPECT_EQ(source->Identify(100).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ProcPodSourceTest, ScanFailsOnlyWithoutProcRoot) {
  ProcPodSource::Options options;
  options.proc_root = dir_.path() + "/missing";
  ProcPodSource source(options);
  absl::StatusOr<std::vector<PodProcess>> procs = source.ScanPods();
  EXPECT_EQ(procs.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(procs.status().message(), HasSubstr(options.proc_root));
}

TEST_F(ProcPodSourceTest, IdentifyChecksStartTime) {
  tree_.AddPodProcess(100, Container(1), CgroupStyle::kCgroupfsV1, 1);
  tree_.AddHostProcess(200, "sshd");
  auto source = Source();
  absl::StatusOr<PodProcess> p = source->Identify(100);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->identity.pod_uid, FakeProcTree::PodUid(1));
  EXPECT_EQ(source->Identify(200).status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<PodProcess> gone = source->Identify(999);
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gone.status().message(), HasSubstr("999"));

  // Cached: one stat read, no cgroup read.
  files_->Reset();
  ASSERT_TRUE(source->Identify(100).ok());
  EXPECT_EQ(files_->reads("cgroup"), 0);
  EXPECT_EQ(files_->reads("stat"), 1);

  // PID 100 is reused by a host process between two calls (no scan between).
  tree_.RemoveProcess(100);
  tree_.AddHostProcess(100, "reused");
  EXPECT_EQ(source->Identify(100).status().code(), absl::StatusCode::kNotFound);
  // And 200 by a Pod process.
  tree_.RemoveProcess(200);
  tree_.AddPodProcess(200, Container(2), CgroupStyle::kSystemdV2, 2);
  p = source->Identify(200);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->identity.container_id, FakeProcTree::ContainerId(2));
}

TEST(ParseStatStartTime, CommWithSpacesAndParens) {
  EXPECT_EQ(*ParseStatStartTime("13887 (cat) R 13881 13881 9271 0 -1 4194304 101 0 0 0 0 0 0 0 "
                                "20 0 1 0 1177388 3133440 414 18446744073709551615 0 0\n"),
            1177388u);
  EXPECT_EQ(*ParseStatStartTime("42 (a) b) (c ) S 1 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 "
                                "987654321 0 0\n"),
            987654321u);
  EXPECT_FALSE(ParseStatStartTime("42 (x) S 1 2 3\n").ok());
  EXPECT_FALSE(ParseStatStartTime("42 x S").ok());
  EXPECT_FALSE(ParseStatStartTime("42 (x) S 1 42 42 0 -1 4 1 0 0 0 0 0 0 0 20 0 1 0 -5 0").ok());
  EXPECT_FALSE(ParseStatStartTime("").ok());
}

TEST_F(ProcPodSourceTest, NetDevBytes) {
  tree_.AddPodProcess(100, Container(1), CgroupStyle::kSystemdV2, 7, 5 << 20, 3 << 20);
  auto source = Source();
  absl::StatusOr<NetBytes> b = source->NetDevBytes(100);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->rx_bytes, 5u << 20);
  EXPECT_EQ(b->tx_bytes, 3u << 20);
  EXPECT_EQ(b->interfaces, std::vector<std::string>{"eth0"});
  tree_.SetNetBytes(100, 6 << 20, 4 << 20);
  b = source->NetDevBytes(100);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->rx_bytes, 6u << 20);

  absl::StatusOr<NetBytes> gone = source->NetDevBytes(4242);
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gone.status().message(), HasSubstr("4242"));
  tree_.SetNetDevText(100, "not net/dev\n");
  absl::StatusOr<NetBytes> bad = source->NetDevBytes(100);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("/100/net/dev"));
}

TEST_F(ProcPodSourceTest, InHostNetns) {
  tree_.AddPodProcess(100, Container(1), CgroupStyle::kSystemdV2, 7);
  tree_.AddPodProcess(101, Container(1), CgroupStyle::kSystemdV2, 7);  // same Pod netns
  tree_.AddPodProcess(102, Container(2), CgroupStyle::kSystemdV2, 8);
  tree_.AddPodProcess(103, Container(3), CgroupStyle::kSystemdV2, kHostNetns);  // hostNetwork
  auto source = Source();
  EXPECT_EQ(*source->InHostNetns(100), false);
  EXPECT_EQ(*source->InHostNetns(103), true);
  EXPECT_EQ(*source->InHostNetns(1), true);

  // Two plain files are two namespaces; a symlink to one of them is the same.
  WriteTestFile(dir_.path() + "/nsA", "a");
  std::filesystem::remove(tree_.proc_root() + "/102/ns/net");
  WriteTestFile(tree_.proc_root() + "/102/ns/net", "plain");
  EXPECT_EQ(*source->InHostNetns(102), false);
  std::filesystem::remove(tree_.proc_root() + "/1/ns/net");
  std::filesystem::create_symlink(tree_.proc_root() + "/102/ns/net",
                                  tree_.proc_root() + "/1/ns/net");
  EXPECT_EQ(*source->InHostNetns(102), true);

  absl::StatusOr<bool> gone = source->InHostNetns(4242);
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gone.status().message(), HasSubstr("4242"));

  // The agent lacks ptrace access (another UID, no CAP_SYS_PTRACE).
  const std::string root = tree_.proc_root();
  files_->before = [&](const std::string& op, const std::string& path) -> absl::Status {
    if (op == "stat" && path == root + "/100/ns/net") {
      return absl::PermissionDeniedError("stat " + path + ": Permission denied");
    }
    return absl::OkStatus();
  };
  absl::StatusOr<bool> denied = source->InHostNetns(100);
  EXPECT_EQ(denied.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(denied.status().message(), HasSubstr("CAP_SYS_PTRACE"));
  EXPECT_THAT(denied.status().message(), HasSubstr("/100/ns/net"));
}

// Without ptrace rights the runtime's record answers: a spec without a
// network namespace is a hostNetwork Pod's.
// Told once per process: a Pod's processes never leave their netns, and the
// sampler asks for every Pod every period. A reused PID is asked afresh.
TEST_F(ProcPodSourceTest, InHostNetnsIsToldOncePerProcess) {
  tree_.AddPodProcess(100, Container(1), CgroupStyle::kSystemdV2, 7);
  auto source = Source();
  ASSERT_TRUE(source->ScanPods().ok());
  EXPECT_EQ(*source->InHostNetns(100), false);
  files_->Reset();
  EXPECT_EQ(*source->InHostNetns(100), false);
  EXPECT_EQ(files_->stats(), 0);
  tree_.RemoveProcess(100);  // another process, in the host's netns, takes the PID
  tree_.AddPodProcess(100, Container(2), CgroupStyle::kSystemdV2, kHostNetns);
  ASSERT_TRUE(source->ScanPods().ok());
  EXPECT_EQ(*source->InHostNetns(100), true);
}

TEST_F(ProcPodSourceTest, InHostNetnsFromTheRuntimeRecordWhenNsNetIsDenied) {
  const std::string runtime_dir = dir_.path() + "/containerd/k8s.io";
  const std::string crio_dir = dir_.path() + "/crio/overlay-containers";
  FakeContainer own = Container(1), host = Container(2), crio_host = Container(3),
                silent = Container(4);
  crio_host.runtime = "cri-o";
  tree_.AddPodProcess(100, own, CgroupStyle::kSystemdV2, 7);
  tree_.AddPodProcess(101, host, CgroupStyle::kSystemdV2, kHostNetns);
  tree_.AddPodProcess(102, crio_host, CgroupStyle::kSystemdV2, kHostNetns);
  tree_.AddPodProcess(103, silent, CgroupStyle::kSystemdV2, kHostNetns);
  FakeProcTree::AddContainerdConfig(runtime_dir, own.container_id, "ns", "own", own.pod_uid, "c",
                                    false, /*host_network=*/false);
  FakeProcTree::AddContainerdConfig(runtime_dir, host.container_id, "ns", "host", host.pod_uid, "",
                                    /*sandbox=*/true, /*host_network=*/true);
  FakeProcTree::AddCrioConfig(crio_dir, crio_host.container_id, "ns", "crio", crio_host.pod_uid,
                              "c", false, /*host_network=*/true);
  // No linux.namespaces in the record: it says nothing either way.
  FakeProcTree::AddContainerdConfig(runtime_dir, silent.container_id, "ns", "silent",
                                    silent.pod_uid, "c");
  ProcPodSource::Options o;
  o.proc_root = tree_.proc_root();
  o.runtime_dirs = {{RuntimeKind::kContainerd, runtime_dir}, {RuntimeKind::kCrio, crio_dir}};
  auto files = std::make_unique<CountingProcFiles>();
  CountingProcFiles* counting = files.get();
  ProcPodSource source(o, std::move(files));
  counting->before = [](const std::string& op, const std::string& path) -> absl::Status {
    if (op == "stat" && absl::EndsWith(path, "/ns/net") && !absl::EndsWith(path, "/1/ns/net")) {
      return absl::PermissionDeniedError("stat " + path + ": Permission denied");
    }
    return absl::OkStatus();
  };
  EXPECT_EQ(*source.InHostNetns(100), false);
  EXPECT_EQ(*source.InHostNetns(101), true);
  EXPECT_EQ(*source.InHostNetns(102), true);
  absl::StatusOr<bool> silent_answer = source.InHostNetns(103);
  EXPECT_EQ(silent_answer.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(silent_answer.status().message(), HasSubstr("no runtime record says either"));
}

TEST_F(ProcPodSourceTest, Comm) {
  tree_.AddHostProcess(200, "ib_write_bw");
  tree_.AddHostProcess(201, "x");
  WriteTestFile(tree_.proc_root() + "/201/comm", "bad\xff\x1b[2J\n");
  auto source = Source();
  EXPECT_EQ(source->Comm(200), "ib_write_bw");
  EXPECT_EQ(source->Comm(201), "bad\\xff\\x1b[2J");
  EXPECT_EQ(source->Comm(4242), "");
}

TEST_F(ProcPodSourceTest, RealProcSmoke) {
  ProcPodSource source(ProcPodSource::Options{});
  absl::StatusOr<std::vector<PodProcess>> procs = source.ScanPods();
  ASSERT_TRUE(procs.ok()) << procs.status();
  EXPECT_GT(source.last_scan_stats().pids, 0u);
  const uint32_t self = static_cast<uint32_t>(getpid());
  EXPECT_EQ(source.Comm(self), "podprocs_test");
  absl::StatusOr<NetBytes> b = source.NetDevBytes(self);
  EXPECT_TRUE(b.ok()) << b.status();
  absl::StatusOr<bool> host = source.InHostNetns(self);
  EXPECT_TRUE(host.ok() || absl::IsPermissionDenied(host.status())) << host.status();
}

class NamesTest : public ProcPodSourceTest {
 protected:
  std::string containerd_dir() const { return dir_.path() + "/containerd/k8s.io"; }
  std::string crio_dir() const { return dir_.path() + "/overlay-containers"; }
  std::unique_ptr<ProcPodSource> NamesSource() {
    return Source({{RuntimeKind::kContainerd, containerd_dir()}, {RuntimeKind::kCrio, crio_dir()}});
  }
};

TEST_F(NamesTest, ContainerdAndCrio) {
  const FakeContainer a = Container(1), b = Container(2, "cri-o");
  const FakeContainer sandbox = Container(3), crio_sandbox = Container(4, "cri-o");
  FakeProcTree::AddContainerdConfig(containerd_dir(), a.container_id, "ml", "trainer-0", a.pod_uid,
                                    "worker");
  FakeProcTree::AddCrioConfig(crio_dir(), b.container_id, "ml", "trainer-1", b.pod_uid, "worker");
  FakeProcTree::AddContainerdConfig(containerd_dir(), sandbox.container_id, "ml", "trainer-2",
                                    sandbox.pod_uid, "", /*sandbox=*/true);
  FakeProcTree::AddCrioConfig(crio_dir(), crio_sandbox.container_id, "ml", "trainer-3",
                              crio_sandbox.pod_uid, "", /*sandbox=*/true);
  auto source = NamesSource();
  // The wrong runtime's directory is not read.
  EXPECT_FALSE(source->Names({a.pod_uid, a.container_id, "cri-o"}).has_value());
  EXPECT_EQ(files_->reads("config.json"), 1);  // CRI-O's, missing
  CgroupIdentity id{a.pod_uid, a.container_id, "containerd"};
  std::optional<ContainerNames> n = source->Names(id);
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->ns, "ml");
  EXPECT_EQ(n->pod, "trainer-0");
  EXPECT_EQ(n->pod_uid, a.pod_uid);
  EXPECT_EQ(n->container, "worker");
  EXPECT_FALSE(n->sandbox);

  n = source->Names({b.pod_uid, b.container_id, "cri-o"});
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->pod, "trainer-1");
  EXPECT_EQ(n->container, "worker");
  // Unknown runtime (cgroupfs): every directory is tried.
  n = source->Names({b.pod_uid, b.container_id, ""});
  ASSERT_TRUE(n.has_value());

  n = source->Names({sandbox.pod_uid, sandbox.container_id, "containerd"});
  ASSERT_TRUE(n.has_value());
  EXPECT_TRUE(n->sandbox);
  EXPECT_EQ(n->container, "");
  n = source->Names({crio_sandbox.pod_uid, crio_sandbox.container_id, "cri-o"});
  ASSERT_TRUE(n.has_value());
  EXPECT_TRUE(n->sandbox);
  EXPECT_EQ(n->container, "");  // CRI-O's "POD"

  // A missing config is nullopt.
  EXPECT_FALSE(source->Names({a.pod_uid, FakeProcTree::ContainerId(99), "containerd"}));
  // A config naming another Pod than the cgroup says is not trusted.
  EXPECT_FALSE(source->Names({FakeProcTree::PodUid(77), a.container_id, "containerd"}));
}

TEST_F(NamesTest, CachedByContainerUntilItLeavesTheScan) {
  const FakeContainer a = Container(1);
  tree_.AddPodProcess(100, a, CgroupStyle::kSystemdV2, 1);
  FakeProcTree::AddContainerdConfig(containerd_dir(), a.container_id, "ml", "p", a.pod_uid, "c");
  auto source = NamesSource();
  ASSERT_TRUE(source->ScanPods().ok());
  const CgroupIdentity id{a.pod_uid, a.container_id, "containerd"};
  ASSERT_TRUE(source->Names(id).has_value());
  ASSERT_TRUE(source->Names(id).has_value());
  EXPECT_EQ(files_->reads("config.json"), 1);
  ASSERT_TRUE(source->ScanPods().ok());
  ASSERT_TRUE(source->Names(id).has_value());
  EXPECT_EQ(files_->reads("config.json"), 1);
  // The container's processes are gone: its names leave with them.
  tree_.RemoveProcess(100);
  ASSERT_TRUE(source->ScanPods().ok());
  ASSERT_TRUE(source->Names(id).has_value());
  EXPECT_EQ(files_->reads("config.json"), 2);
}

TEST_F(NamesTest, HostileConfigs) {
  const std::string uid = FakeProcTree::PodUid(1);
  auto containerd_doc = [&](const std::string& ns, const std::string& pod,
                            const std::string& container) {
    return "{\"annotations\":{\"io.kubernetes.cri.sandbox-namespace\":\"" + ns +
           "\",\"io.kubernetes.cri.sandbox-name\":\"" + pod +
           "\",\"io.kubernetes.cri.sandbox-uid\":\"" + uid +
           "\",\"io.kubernetes.cri.container-type\":\"container\","
           "\"io.kubernetes.cri.container-name\":\"" +
           container + "\"}}";
  };
  ASSERT_TRUE(ParseRuntimeConfig(RuntimeKind::kContainerd, containerd_doc("ml", "p", "c")).ok());
  const std::string hostile[] = {
      "",
      "not json",
      "[1,2,3]",
      "{\"annotations\":[]}",
      "{\"annotations\":{}}",
      containerd_doc("ml", "p", "c").substr(0, 60),      // truncated
      containerd_doc("ml\xff\xfe", "p", "c"),            // not UTF-8
      containerd_doc("ml", "p\\u0000x", "c"),            // NUL (escaped)
      containerd_doc("ml", "p\\u001b[31m", "c"),         // ESC (escaped)
      containerd_doc("ml", "p", "c\xc2\x85"),            // C1 control (NEL)
      containerd_doc("ml", std::string(300, 'p'), "c"),  // over 253
      containerd_doc("", "p", "c"),                      // empty namespace
      "{\"annotations\":{\"io.kubernetes.cri.sandbox-namespace\":1}}",
      "{\"annotations\":{\"io.kubernetes.cri.sandbox-namespace\":\"ml\","
      "\"io.kubernetes.cri.sandbox-name\":\"p\",\"io.kubernetes.cri.sandbox-uid\":\"" +
          uid + "\"}}",  // a container without a name
      "{\"annotations\":{\"io.kubernetes.cri.sandbox-namespace\":\"ml\","
      "\"io.kubernetes.cri.sandbox-name\":\"p\",\"io.kubernetes.cri.sandbox-uid\":\"../../x\","
      "\"io.kubernetes.cri.container-name\":\"c\"}}",   // not a UID
      std::string(2000, '[') + std::string(2000, ']'),  // deep nesting
      "{\"annotations\":" + std::string(kMaxRuntimeConfigBytes, ' ') + "{}}",
  };
  for (const std::string& text : hostile) {
    SCOPED_TRACE(text.substr(0, 120));
    EXPECT_EQ(ParseRuntimeConfig(RuntimeKind::kContainerd, text).status().code(),
              absl::StatusCode::kInvalidArgument);
  }

  // Through the source: not read past the cap, nullopt, and not read again.
  const FakeContainer big = Container(1), bad = Container(2);
  WriteTestFile(containerd_dir() + "/" + big.container_id + "/config.json",
                containerd_doc("ml", "p", "c") + std::string(kMaxRuntimeConfigBytes, ' '));
  WriteTestFile(containerd_dir() + "/" + bad.container_id + "/config.json",
                containerd_doc("ml\xff", "p", "c"));
  auto source = NamesSource();
  EXPECT_FALSE(source->Names({big.pod_uid, big.container_id, "containerd"}).has_value());
  EXPECT_FALSE(source->Names({bad.pod_uid, bad.container_id, "containerd"}).has_value());
  EXPECT_FALSE(source->Names({bad.pod_uid, bad.container_id, "containerd"}).has_value());
  EXPECT_EQ(files_->reads("config.json"), 2);
}

TEST(OpenProcPodSource, UsesHostPathsProcRoot) {
  fabric::testing::TempDir dir("podprocs");
  FakeProcTree tree(dir.path() + "/p");
  tree.AddPodProcess(100, Container(1), CgroupStyle::kSystemdV2, 1);
  HostPaths paths = HostPaths::Defaults();
  EXPECT_EQ(paths.proc_root, "/proc");
  paths.proc_root = tree.proc_root();
  std::unique_ptr<ProcSource> source = OpenProcPodSource(paths);
  absl::StatusOr<std::vector<PodProcess>> procs = source->ScanPods();
  ASSERT_TRUE(procs.ok());
  ASSERT_EQ(procs->size(), 1u);
  EXPECT_EQ((*procs)[0].pid, 100u);
}

}  // namespace
}  // namespace fabric::podprocs
