#include "agent/sampler/sampler.h"

#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <thread>

#include "absl/status/status.h"
#include "agent/sysfs/sysfs_discovery.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/fake_sysfs.h"
#include "test/testing/status_matchers.h"

namespace fabric::sampler {
namespace {

using restrack::RdmaResource;
using restrack::ResourceKind;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kPod1[] = "11111111-1111-1111-1111-111111111111";
constexpr char kPod2[] = "22222222-2222-2222-2222-222222222222";
constexpr char kPod3[] = "33333333-3333-3333-3333-333333333333";
constexpr char kPod4[] = "44444444-4444-4444-4444-444444444444";
const std::string kSandbox1(64, 'a');
const std::string kMain1(64, 'b');
const std::string kSide1(64, 'c');

// Counts every list, open and read of a counter file.
class CountingFiles : public CounterFiles {
 public:
  absl::StatusOr<std::vector<std::string>> List(const std::string& dir) override {
    lists++;
    return CounterFiles::List(dir);
  }
  int Open(const std::string& path) override {
    opens++;
    return CounterFiles::Open(path);
  }
  ssize_t Read(int fd, char* buf, size_t size) override {
    reads++;
    return CounterFiles::Read(fd, buf, size);
  }
  std::atomic<int> lists{0}, opens{0}, reads{0};
};

class FakeResources : public restrack::ResourceSource {
 public:
  absl::StatusOr<std::vector<RdmaResource>> Dump() override {
    dumps++;
    if (!error.ok()) return error;
    return resources;
  }
  restrack::DumpNotes LastDumpNotes() const override { return notes; }
  std::vector<RdmaResource> resources;
  restrack::DumpNotes notes;
  absl::Status error;
  int dumps = 0;
};

// A /proc of a few processes: Pod processes by PID, host processes by comm;
// any other PID is gone.
class FakeProcs : public podprocs::ProcSource {
 public:
  absl::StatusOr<std::vector<podprocs::PodProcess>> ScanPods() override {
    if (!scan_error.ok()) return scan_error;
    std::vector<podprocs::PodProcess> out;
    for (const auto& [pid, id] : pods) out.push_back({pid, id});
    return out;
  }
  absl::StatusOr<podprocs::PodProcess> Identify(uint32_t pid) override {
    identify_calls[pid]++;
    if (denied.count(pid))
      return absl::PermissionDeniedError(absl::StrCat("/proc/", pid, ": EACCES"));
    auto it = pods.find(pid);
    if (it == pods.end()) return absl::NotFoundError(absl::StrCat("pid ", pid, ": not in a Pod"));
    return podprocs::PodProcess{pid, it->second};
  }
  absl::StatusOr<uint32_t> ProcessOf(uint32_t tid) override {
    if (auto t = threads.find(tid); t != threads.end()) return t->second;
    if (pods.count(tid) || comms.count(tid) || denied.count(tid)) return tid;
    return absl::NotFoundError(absl::StrCat("task ", tid, " is gone"));
  }
  absl::StatusOr<podprocs::NetBytes> NetDevBytes(uint32_t pid) override {
    netdev_calls.push_back(pid);
    if (gone.count(pid)) return absl::NotFoundError(absl::StrCat("/proc/", pid, "/net/dev"));
    auto it = net.find(pid);
    if (it == net.end()) return absl::UnavailableError(absl::StrCat("/proc/", pid, "/net/dev"));
    return it->second;
  }
  absl::StatusOr<bool> InHostNetns(uint32_t pid) override {
    if (gone.count(pid)) return absl::NotFoundError(absl::StrCat("/proc/", pid, "/ns/net"));
    if (netns_denied.count(pid)) {
      return absl::PermissionDeniedError(absl::StrCat("/proc/", pid, "/ns/net: EACCES"));
    }
    return host_netns.count(pid) > 0;
  }
  std::string Comm(uint32_t pid) override {
    auto it = comms.find(pid);
    return it == comms.end() ? "" : it->second;
  }
  std::optional<podprocs::ContainerNames> Names(const podprocs::CgroupIdentity& id) override {
    names_calls[id.container_id]++;
    auto it = names.find(id.container_id);
    if (it == names.end()) return std::nullopt;
    return it->second;
  }

  std::map<uint32_t, podprocs::CgroupIdentity> pods;
  std::map<uint32_t, std::string> comms;
  std::map<uint32_t, uint32_t> threads;  // tid -> its process
  std::set<uint32_t> denied;             // Identify: EACCES
  std::set<uint32_t> host_netns, netns_denied, gone;
  std::map<uint32_t, podprocs::NetBytes> net;
  std::map<std::string, podprocs::ContainerNames> names;  // by container ID
  absl::Status scan_error;
  std::map<uint32_t, int> identify_calls;
  std::map<std::string, int> names_calls;
  std::vector<uint32_t> netdev_calls;
};

// A user's resource (pid > 0) or ib_core's (pid 0); a QP is RC and RTS.
RdmaResource Res(ResourceKind kind, const std::string& dev, uint32_t pid, uint64_t mr_bytes = 0) {
  RdmaResource r;
  r.kind = kind;
  r.device = dev;
  r.pid = pid;
  r.mr_bytes = mr_bytes;
  if (pid == 0) r.kern_name = "ib_core";
  if (kind == ResourceKind::kQp) {
    r.qp_type = pid == 0 ? restrack::kQpTypeGsi : 2;
    r.qp_state = restrack::kQpStateRts;
  }
  return r;
}

class SamplerTest : public ::testing::Test {
 protected:
  SamplerOptions Options() {
    SamplerOptions o;
    o.paths = fs_.paths();
    o.clock = [this] { return now_; };
    return o;
  }
  SamplerInputs Inputs() {
    SamplerInputs in;
    in.devices = [this] { return devices_; };
    return in;
  }
  void Discover() {
    auto inv = DiscoverNode(fs_.paths());
    ASSERT_OK(inv);
    devices_ = inv->devices;
  }
  const DeviceTraffic* Traffic(const Sample& s, const std::string& dev) {
    for (const auto& t : s.traffic) {
      if (t.device == dev) return &t;
    }
    return nullptr;
  }

  testing::FakeSysfs fs_;
  std::vector<RdmaDevice> devices_;
  absl::Time now_ = absl::FromUnixSeconds(1000);
};

TEST_F(SamplerTest, TrafficOfEfaMlx5AndRxe) {
  fs_.AddEfa("rdmap79s0", "0000:4f:00.0", {});
  testing::Mlx5Options two_ports;
  two_ports.num_ports = 2;
  fs_.AddMlx5("mlx5_0", "0000:3b:00.0", two_ports);
  fs_.AddRxe("rxe0", "eth0");
  fs_.SetCounter("rdmap79s0", 1, "tx_bytes", 1000);
  fs_.SetCounter("rdmap79s0", 1, "rx_bytes", 24);
  fs_.SetCounter("rdmap79s0", 1, "tx_pkts", 3);
  fs_.SetCounter("rdmap79s0", 1, "rx_pkts", 4);
  fs_.SetCounter("rdmap79s0", 1, "rdma_read_bytes", 500);
  fs_.SetCounter("rdmap79s0", 1, "send_bytes", 7);
  fs_.SetPmaCounter("mlx5_0", 1, "port_xmit_data", 10);
  fs_.SetPmaCounter("mlx5_0", 1, "port_rcv_data", 5);
  fs_.SetPmaCounter("mlx5_0", 2, "port_xmit_data", 100);
  fs_.SetPmaCounter("mlx5_0", 1, "port_xmit_packets", 6);
  fs_.SetPmaCounter("mlx5_0", 2, "port_rcv_packets", 1);
  fs_.SetCounter("rxe0", 1, "sent_pkts", 143000);
  fs_.SetCounter("rxe0", 1, "rcvd_pkts", 12);
  Discover();
  Sampler s(Options(), Inputs(), nullptr, nullptr);
  SamplePtr sample = s.TakeNow();
  ASSERT_NE(sample, nullptr);
  EXPECT_EQ(sample->seq, 1u);
  EXPECT_EQ(sample->mono, now_);
  ASSERT_EQ(sample->counters.size(), 3u);

  const DeviceTraffic* efa = Traffic(*sample, "rdmap79s0");
  ASSERT_NE(efa, nullptr);
  EXPECT_TRUE(efa->readable);
  EXPECT_EQ(efa->kind, DeviceKind::kEfa);
  EXPECT_EQ(efa->bytes, 1024u);
  EXPECT_EQ(efa->packets, 7u);
  EXPECT_EQ(efa->split.at("rdma_read_bytes"), 500u);
  EXPECT_EQ(efa->split.at("send_bytes"), 7u);
  EXPECT_EQ(efa->split.size(), 6u);  // the fake tree has every EFA port counter

  const DeviceTraffic* mlx = Traffic(*sample, "mlx5_0");
  ASSERT_NE(mlx, nullptr);
  EXPECT_TRUE(mlx->readable);
  EXPECT_EQ(mlx->bytes, (10u + 5u + 100u) * 4);  // summed over ports, in 4-octet words
  EXPECT_EQ(mlx->packets, 7u);
  EXPECT_TRUE(mlx->split.empty());

  const DeviceTraffic* rxe = Traffic(*sample, "rxe0");
  ASSERT_NE(rxe, nullptr);
  EXPECT_TRUE(rxe->readable);
  EXPECT_FALSE(rxe->bytes.has_value()) << "rxe counts no bytes";
  EXPECT_EQ(rxe->packets, 143012u);
}

// EFA on kernels before the device/port split (< ~5.14): everything at one
// level; a counter at both levels is taken from the port, never summed twice.
TEST(TrafficOfTest, EfaCountersAtEitherLevel) {
  RdmaDevice dev;
  dev.name = "rdmap79s0";
  dev.kind = DeviceKind::kEfa;
  DeviceCounters c;
  c.device = dev.name;
  c.hw = {{"0", "tx_bytes", 10}, {"0", "rx_bytes", 5}, {"0", "rx_pkts", 2}};
  DeviceTraffic t = TrafficOf(dev, c);
  EXPECT_EQ(t.bytes, 15u);
  EXPECT_EQ(t.packets, 2u);
  EXPECT_TRUE(t.split.empty());
  c.hw.push_back({"1", "tx_bytes", 100});
  t = TrafficOf(dev, c);
  EXPECT_EQ(t.bytes, 105u);
  c.hw.clear();
  t = TrafficOf(dev, c);
  EXPECT_FALSE(t.bytes.has_value());
  EXPECT_FALSE(t.packets.has_value());
}

TEST_F(SamplerTest, DeviceWithUnreadableCountersIsMarked) {
  fs_.AddEfa("rdmap79s0", "0000:4f:00.0", {});
  fs_.AddMlx5("mlx5_0", "0000:3b:00.0", {});
  Discover();
  // In a Pod's netns: the host's view has no counters of it, while the
  // inventory keeps it listed.
  fs_.MoveOutOfHostNetns("mlx5_0");
  Sampler s(Options(), Inputs(), nullptr, nullptr);
  SamplePtr first = s.TakeNow();
  const DeviceTraffic* t = Traffic(*first, "mlx5_0");
  ASSERT_NE(t, nullptr);
  EXPECT_FALSE(t->readable);
  EXPECT_THAT(t->error, HasSubstr("mlx5_0"));
  EXPECT_FALSE(t->bytes.has_value());
  EXPECT_TRUE(Traffic(*first, "rdmap79s0")->readable);
  EXPECT_EQ(s.status().unreadable_devices, 1u);
  EXPECT_EQ(s.status().last_counter_error, t->error);
  // Back in the host's netns: readable from the next round on (a device
  // with no counter listed is listed again every round, not every 5 min).
  fs_.ReturnToHostNetns("mlx5_0");
  fs_.SetPmaCounter("mlx5_0", 1, "port_xmit_data", 3);
  SamplePtr second = s.TakeNow();
  EXPECT_TRUE(Traffic(*second, "mlx5_0")->readable);
  EXPECT_EQ(Traffic(*second, "mlx5_0")->bytes, 12u);
  EXPECT_EQ(s.status().unreadable_devices, 0u);
}

// Once a device's counters are known a round opens and lists nothing: one
// read per counter, and every counter exactly once per round.
TEST_F(SamplerTest, EachRoundReadsEveryCounterOnceAndOpensNothingAfterTheFirst) {
  fs_.AddEfa("rdmap79s0", "0000:4f:00.0", {});
  fs_.AddMlx5("mlx5_0", "0000:3b:00.0", {});
  Discover();
  CountingFiles files;
  SamplerOptions o = Options();
  o.files = &files;
  Sampler s(o, Inputs(), nullptr, nullptr);
  SamplePtr first = s.TakeNow();
  size_t counters = 0;
  for (const auto& c : first->counters) counters += c.hw.size() + c.pma.size();
  ASSERT_GT(counters, 30u);
  EXPECT_EQ(static_cast<size_t>(files.opens), counters);
  EXPECT_EQ(static_cast<size_t>(files.reads), counters);
  files.opens = files.lists = files.reads = 0;
  fs_.SetCounter("rdmap79s0", 1, "tx_bytes", 4242);
  for (int i = 0; i < 3; ++i) {
    SamplePtr next = s.TakeNow();
    EXPECT_EQ(Traffic(*next, "rdmap79s0")->bytes, 4242u);
  }
  EXPECT_EQ(files.opens, 0);
  EXPECT_EQ(files.lists, 0);
  EXPECT_EQ(static_cast<size_t>(files.reads), 3 * counters);
}

TEST_F(SamplerTest, RingIsBoundedOldestFirst) {
  fs_.AddEfa("rdmap79s0", "0000:4f:00.0", {});
  Discover();
  SamplerOptions o = Options();
  o.period = absl::Seconds(5);
  o.max_window = absl::Seconds(22);  // ceil(22 / 5) + 2 = 7
  Sampler s(o, Inputs(), nullptr, nullptr);
  EXPECT_EQ(s.capacity(), 7u);
  EXPECT_EQ(s.Latest(), nullptr);
  s.ReadRing([](const SampleRing& ring) { EXPECT_EQ(ring.size(), 0u); });
  for (int i = 0; i < 20; ++i) {
    now_ += absl::Seconds(5);
    s.TakeNow();
  }
  s.ReadRing([&](const SampleRing& ring) {
    const std::vector<size_t> slots = ring.Slots();
    ASSERT_EQ(slots.size(), 7u);
    for (size_t i = 0; i < slots.size(); ++i) {
      EXPECT_EQ(ring.header(slots[i]).seq, 14 + i);
      if (i > 0) {
        EXPECT_EQ(ring.header(slots[i]).mono - ring.header(slots[i - 1]).mono, absl::Seconds(5));
      }
      // Every kept sample keeps its traffic; only the newest Sample its counters.
      EXPECT_NE(ring.devices().at("rdmap79s0").traffic.At(slots[i], 14 + i), nullptr) << i;
    }
  });
  EXPECT_EQ(s.Latest()->seq, 20u);
  EXPECT_EQ(s.Latest()->counters.size(), 1u);
  EXPECT_EQ(s.status().rounds, 20u);
  EXPECT_GT(s.status().ring_bytes, 0u);
  // The default: 10 minutes at 5 s.
  Sampler d(SamplerOptions{}, {}, nullptr, nullptr);
  EXPECT_EQ(d.capacity(), 122u);
}

TEST_F(SamplerTest, ObservationOffSaysSo) {
  Sampler s(Options(), Inputs(), nullptr, nullptr);
  SamplePtr sample = s.TakeNow();
  EXPECT_FALSE(sample->resources_ok);
  EXPECT_EQ(sample->resources_error, "observation is off (--observe)");
  EXPECT_FALSE(sample->procs_ok);
  EXPECT_EQ(sample->procs_error, "observation is off (--observe)");
  EXPECT_EQ(s.status().last_resources_error, sample->resources_error);
}

TEST_F(SamplerTest, SourceErrorsAreCarried) {
  FakeResources res;
  FakeProcs procs;
  res.error = absl::UnavailableError("NETLINK_RDMA: EPROTONOSUPPORT");
  procs.scan_error = absl::PermissionDeniedError("/proc: EACCES");
  Sampler s(Options(), Inputs(), &res, &procs);
  SamplePtr sample = s.TakeNow();
  EXPECT_FALSE(sample->resources_ok);
  EXPECT_EQ(sample->resources_error, "NETLINK_RDMA: EPROTONOSUPPORT");
  EXPECT_FALSE(sample->procs_ok);
  EXPECT_EQ(sample->procs_error, "/proc: EACCES");
  EXPECT_EQ(s.status().last_procs_error, "/proc: EACCES");
}

// Each owner PID is identified once per round however many resources it
// owns; Pod, host and kernel owners go to their own lists; an owner gone
// before it could be identified is counted.
TEST_F(SamplerTest, OwnersIdentifiedOncePerRoundAndSplit) {
  FakeResources res;
  FakeProcs procs;
  procs.pods[100] = {kPod1, kMain1, "containerd"};
  procs.pods[101] = {kPod1, kMain1, "containerd"};
  procs.pods[110] = {kPod1, kSide1, "containerd"};
  procs.comms[200] = "ib_write_bw";
  // 300: gone (Identify NotFound, no comm).
  res.resources = {
      Res(ResourceKind::kPd, "rxe0", 100),       Res(ResourceKind::kCq, "rxe0", 100),
      Res(ResourceKind::kQp, "rxe0", 100),       Res(ResourceKind::kQp, "rxe0", 100),
      Res(ResourceKind::kMr, "rxe0", 100, 4096), Res(ResourceKind::kMr, "rxe0", 101, 8192),
      Res(ResourceKind::kQp, "mlx5_0", 100),     Res(ResourceKind::kQp, "rxe0", 110),
      Res(ResourceKind::kQp, "rxe0", 200),       Res(ResourceKind::kCq, "rxe0", 200),
      Res(ResourceKind::kQp, "rxe0", 0),         Res(ResourceKind::kCq, "rxe0", 0),
      Res(ResourceKind::kPd, "mlx5_0", 0),       Res(ResourceKind::kQp, "rxe0", 300),
      Res(ResourceKind::kCq, "rxe0", 300),
  };
  Sampler s(Options(), Inputs(), &res, &procs);
  for (int round = 1; round <= 2; ++round) {
    SamplePtr sample = s.TakeNow();
    ASSERT_TRUE(sample->resources_ok);
    for (uint32_t pid : {100u, 101u, 110u, 200u}) {
      EXPECT_EQ(procs.identify_calls[pid], round) << "pid " << pid;
    }
    EXPECT_EQ(procs.identify_calls.count(0), 0u) << "kernel-owned: nothing to identify";
    EXPECT_EQ(procs.identify_calls.count(300), 0u) << "gone: no process to identify";

    ASSERT_EQ(sample->owned.size(), 3u);
    std::map<std::pair<std::string, std::string>, ContainerOwned> by;
    for (const auto& c : sample->owned) {
      EXPECT_EQ(c.pod_uid, kPod1);
      by[{c.container_id, c.device}] = c;
    }
    const ContainerOwned& main_rxe = by[{kMain1, "rxe0"}];
    EXPECT_EQ(main_rxe.owned,
              (Owned{.qp = 2, .cq = 1, .mr = 2, .pd = 1, .qp_active = 2, .mr_bytes = 4096 + 8192}));
    EXPECT_THAT(main_rxe.pids, ElementsAre(100u, 101u));
    const ContainerOwned& main_mlx = by[std::make_pair(kMain1, std::string("mlx5_0"))];
    const ContainerOwned& side_rxe = by[std::make_pair(kSide1, std::string("rxe0"))];
    EXPECT_EQ(main_mlx.owned, (Owned{.qp = 1, .qp_active = 1}));
    EXPECT_EQ(side_rxe.owned, (Owned{.qp = 1, .qp_active = 1}));

    ASSERT_EQ(sample->host_owned.size(), 1u);
    EXPECT_EQ(sample->host_owned[0].pid, 200u);
    EXPECT_EQ(sample->host_owned[0].comm, "ib_write_bw");
    EXPECT_EQ(sample->host_owned[0].device, "rxe0");
    EXPECT_EQ(sample->host_owned[0].owned, (Owned{.qp = 1, .cq = 1, .qp_active = 1}));

    // ib_core's GSI QP is the stack's own: no QP of it moves a workload's bytes.
    ASSERT_EQ(sample->kernel_owned.size(), 2u);
    EXPECT_EQ(sample->kernel_owned.at("rxe0").at("ib_core"), (Owned{.qp = 1, .cq = 1}));
    EXPECT_EQ(sample->kernel_owned.at("mlx5_0").at("ib_core"), (Owned{.pd = 1}));
    // 300 exited before it could be identified: its QP is nobody's known.
    EXPECT_EQ(sample->owners_exited, 1u);
    EXPECT_EQ(sample->owners_unreadable, 0u);
    EXPECT_EQ(sample->unattributed.at("rxe0"), (Owned{.qp = 1, .cq = 1, .qp_active = 1}));
  }
  EXPECT_EQ(res.dumps, 2);
}

// The kernel names a resource's creating thread: its process owns it. A
// thread that exited leaves pid 0 without a kern_name: a user's resource
// whose owner is not known, never the kernel's.
TEST_F(SamplerTest, ThreadsAreTheirProcessAndDeadThreadsAreNotTheKernel) {
  FakeResources res;
  FakeProcs procs;
  procs.pods[100] = {kPod1, kMain1, "containerd"};
  procs.threads[107] = 100;  // the engine's handshake thread
  procs.comms[200] = "nfs-tool";
  procs.threads[207] = 200;
  RdmaResource orphan = Res(ResourceKind::kQp, "rxe0", 0);
  orphan.kern_name.clear();  // created by a thread that has exited
  orphan.qp_type = 2;
  RdmaResource probe = Res(ResourceKind::kQp, "rxe0", 107);
  probe.qp_state = restrack::kQpStateReset;  // fi_getinfo's probe QP
  res.resources = {Res(ResourceKind::kQp, "rxe0", 107), probe, Res(ResourceKind::kQp, "rxe0", 207),
                   orphan, Res(ResourceKind::kCq, "rxe0", 100)};
  Sampler s(Options(), Inputs(), &res, &procs);
  SamplePtr sample = s.TakeNow();
  ASSERT_EQ(sample->owned.size(), 1u);
  EXPECT_THAT(sample->owned[0].pids, ElementsAre(100u)) << "the process, not the thread";
  EXPECT_EQ(sample->owned[0].owned, (Owned{.qp = 2, .cq = 1, .qp_active = 1}));
  ASSERT_EQ(sample->host_owned.size(), 1u);
  EXPECT_EQ(sample->host_owned[0].pid, 200u);
  EXPECT_EQ(sample->host_owned[0].comm, "nfs-tool");
  EXPECT_EQ(procs.identify_calls[100], 1) << "each process once, whichever thread";
  EXPECT_EQ(procs.identify_calls.count(107), 0u);
  EXPECT_TRUE(sample->kernel_owned.empty());
  EXPECT_EQ(sample->unattributed.at("rxe0"), (Owned{.qp = 1, .qp_active = 1}));
  EXPECT_EQ(sample->owners_exited, 0u);
}

// A user resource the kernel names no owner for: its creating thread exited.
RdmaResource Orphan(ResourceKind kind, const std::string& dev, uint32_t id) {
  RdmaResource r = Res(kind, dev, 0);
  r.kern_name.clear();
  r.id = id;
  if (kind == ResourceKind::kQp) r.qp_type = 2;  // RC
  return r;
}

// Issue 32, item 15: a QP whose creating thread exited is dumped without a
// PID, but with its PD (pdn), and the PD with its device context (ctxn): the
// owner of either is the process that made the QP (a thread of it made them).
// Booked there; "unknown" only where neither has an owner.
TEST_F(SamplerTest, AResourceWhoseCreatorExitedIsBookedToItsPdOrContextOwner) {
  FakeResources res;
  FakeProcs procs;
  procs.pods[100] = {kPod1, kMain1, "containerd"};
  procs.threads[107] = 100;
  // rxe0: QPs from a worker thread that exited, in a PD of a thread that stays.
  RdmaResource qa = Orphan(ResourceKind::kQp, "rxe0", 17),
               qb = Orphan(ResourceKind::kQp, "rxe0", 18);
  qa.pdn = qb.pdn = 3;
  RdmaResource pd = Res(ResourceKind::kPd, "rxe0", 107);
  pd.id = 3;
  pd.ctxn = 0;
  // rxe1: PD, CQ, MR and QP from a thread that exited, the device opened by
  // the main thread (test/e2e's e2e-verbs-actor "exit").
  RdmaResource q1 = Orphan(ResourceKind::kQp, "rxe1", 5);
  q1.pdn = 1;
  RdmaResource mr1 = Orphan(ResourceKind::kMr, "rxe1", 2);
  mr1.pdn = 1;
  mr1.mr_bytes = 8192;
  RdmaResource pd1 = Orphan(ResourceKind::kPd, "rxe1", 1);
  pd1.ctxn = 4;
  RdmaResource cq1 = Orphan(ResourceKind::kCq, "rxe1", 7);
  cq1.ctxn = 4;
  RdmaResource ctx1 = Res(ResourceKind::kCtx, "rxe1", 100);
  ctx1.id = 4;
  // No owner anywhere: the PD's and the context's creators are gone too.
  RdmaResource lost = Orphan(ResourceKind::kQp, "rxe0", 30);
  lost.pdn = 8;
  RdmaResource lost_pd = Orphan(ResourceKind::kPd, "rxe0", 8);
  lost_pd.ctxn = 9;
  RdmaResource lost_ctx = Orphan(ResourceKind::kCtx, "rxe0", 9);
  // A PD number is the device's own: rxe1 has no PD 3.
  RdmaResource elsewhere = Orphan(ResourceKind::kQp, "rxe1", 31);
  elsewhere.pdn = 3;
  res.resources = {qa, qb, lost, pd, lost_pd, lost_ctx, q1, elsewhere, cq1, mr1, pd1, ctx1};
  Sampler s(Options(), Inputs(), &res, &procs);
  SamplePtr sample = s.TakeNow();
  ASSERT_TRUE(sample->resources_ok);
  std::map<std::string, ContainerOwned> by_device;
  for (const ContainerOwned& c : sample->owned) by_device[c.device] = c;
  ASSERT_EQ(by_device.size(), 2u);
  EXPECT_EQ(by_device["rxe0"].owned, (Owned{.qp = 2, .pd = 1, .qp_active = 2, .adopted = 2}));
  EXPECT_THAT(by_device["rxe0"].pids, ElementsAre(100u));
  EXPECT_EQ(
      by_device["rxe1"].owned,
      (Owned{.qp = 1, .cq = 1, .mr = 1, .pd = 1, .qp_active = 1, .mr_bytes = 8192, .adopted = 4}));
  EXPECT_THAT(by_device["rxe1"].pids, ElementsAre(100u));
  EXPECT_EQ(sample->unattributed.at("rxe0"), (Owned{.qp = 1, .pd = 1, .qp_active = 1}));
  EXPECT_EQ(sample->unattributed.at("rxe1"), (Owned{.qp = 1, .qp_active = 1}));
  EXPECT_TRUE(sample->host_owned.empty());
  EXPECT_EQ(sample->owners_exited, 0u);
  EXPECT_EQ(procs.identify_calls[100], 1) << "each process once, however it is reached";
}

// An owner whose /proc cannot be read is said apart from one that exited.
TEST_F(SamplerTest, UnreadableOwnersAreNotExitedOnes) {
  FakeResources res;
  FakeProcs procs;
  procs.denied = {400};
  res.resources = {Res(ResourceKind::kQp, "rxe0", 400), Res(ResourceKind::kQp, "rxe0", 500)};
  Sampler s(Options(), Inputs(), &res, &procs);
  SamplePtr sample = s.TakeNow();
  EXPECT_EQ(sample->owners_unreadable, 1u);
  EXPECT_EQ(sample->owners_exited, 1u);
  EXPECT_THAT(sample->owner_error, HasSubstr("/proc/400: EACCES"));
  EXPECT_EQ(sample->unattributed.at("rxe0").qp, 2u);
}

// One device's failed dump is carried, the others' resources still count;
// an implicit ODP MR (length UINT64_MAX) saturates the sum, never wraps it.
TEST_F(SamplerTest, FailedDevicesAndOdpMrs) {
  FakeResources res;
  FakeProcs procs;
  procs.pods[100] = {kPod1, kMain1, "containerd"};
  res.resources = {Res(ResourceKind::kMr, "rxe0", 100, UINT64_MAX),
                   Res(ResourceKind::kMr, "rxe0", 100, 4096)};
  res.notes.failed_devices["mlx5_0"] = "RDMA_NLDEV_CMD_RES_QP_GET ...: the kernel answered EIO";
  Sampler s(Options(), Inputs(), &res, &procs);
  SamplePtr sample = s.TakeNow();
  ASSERT_TRUE(sample->resources_ok);
  ASSERT_EQ(sample->owned.size(), 1u);
  EXPECT_EQ(sample->owned[0].owned.mr, 2u);
  EXPECT_EQ(sample->owned[0].owned.mr_bytes, UINT64_MAX);
  EXPECT_THAT(sample->resources_failed, ElementsAre(::testing::Pair("mlx5_0", HasSubstr("EIO"))));
}

// Resources but no /proc source: owners cannot be told, and say so.
TEST_F(SamplerTest, OwnersWithoutProcSourceAreUnidentified) {
  FakeResources res;
  res.resources = {Res(ResourceKind::kQp, "rxe0", 100), Res(ResourceKind::kCq, "rxe0", 100),
                   Res(ResourceKind::kQp, "rxe0", 0)};
  Sampler s(Options(), Inputs(), &res, nullptr);
  SamplePtr sample = s.TakeNow();
  EXPECT_TRUE(sample->resources_ok);
  EXPECT_TRUE(sample->owned.empty());
  EXPECT_TRUE(sample->host_owned.empty());
  EXPECT_EQ(sample->unattributed.at("rxe0"), (Owned{.qp = 1, .cq = 1, .qp_active = 1}));
  EXPECT_EQ(sample->kernel_owned.at("rxe0").at("ib_core").qp, 1u);
}

// One process per Pod (the lowest PID) tells its netns: a hostNetwork Pod
// has no bytes of its own; a netns that cannot be read says why; a process
// that exits meanwhile gives way to the Pod's next one.
TEST_F(SamplerTest, PodNetThroughTheLowestPid) {
  FakeProcs procs;
  procs.pods[60] = {kPod1, kMain1, "containerd"};
  procs.pods[50] = {kPod1, kSandbox1, "containerd"};
  procs.pods[70] = {kPod2, std::string(64, 'd'), "cri-o"};
  procs.pods[80] = {kPod3, std::string(64, 'e'), "containerd"};
  procs.pods[90] = {kPod4, std::string(64, 'f'), "containerd"};
  procs.pods[95] = {kPod4, std::string(64, 'f'), "containerd"};
  procs.net[50] = {1000, 2000, {"eth0"}};
  procs.net[60] = {1, 1, {"eth0"}};
  procs.net[95] = {7, 8, {"eth0"}};
  procs.host_netns = {70};
  procs.netns_denied = {80};
  procs.gone = {90};
  Sampler s(Options(), Inputs(), nullptr, &procs);
  SamplePtr sample = s.TakeNow();
  ASSERT_TRUE(sample->procs_ok);
  std::map<std::string, PodNet> by;
  for (const auto& p : sample->pods) by[p.pod_uid] = p;
  ASSERT_EQ(by.size(), 4u);
  EXPECT_EQ(by[kPod1].pid, 50u);
  EXPECT_TRUE(by[kPod1].readable);
  EXPECT_FALSE(by[kPod1].host_network);
  EXPECT_EQ(by[kPod1].rx_bytes, 1000u);
  EXPECT_EQ(by[kPod1].tx_bytes, 2000u);
  EXPECT_TRUE(by[kPod2].host_network);
  EXPECT_EQ(by[kPod2].rx_bytes + by[kPod2].tx_bytes, 0u);
  EXPECT_FALSE(by[kPod3].readable);
  EXPECT_THAT(by[kPod3].error, HasSubstr("/proc/80/ns/net"));
  EXPECT_EQ(by[kPod4].pid, 95u);
  EXPECT_TRUE(by[kPod4].readable);
  EXPECT_EQ(by[kPod4].rx_bytes, 7u);
  // Never read through the hostNetwork Pod, nor a second process of a Pod.
  EXPECT_THAT(procs.netdev_calls, ElementsAre(50u, 95u));
}

// Names once per container per round, from the runtime's records: the
// sandbox gives the Pod's namespace and name, each container its own name.
TEST_F(SamplerTest, NamesOncePerContainer) {
  FakeResources res;
  FakeProcs procs;
  procs.pods[50] = {kPod1, kSandbox1, "containerd"};
  procs.pods[60] = {kPod1, kMain1, "containerd"};
  procs.pods[61] = {kPod1, kMain1, "containerd"};
  procs.net[50] = {};
  procs.names[kSandbox1] = {"kv", "member-0", kPod1, "", true};
  procs.names[kMain1] = {"kv", "member-0", kPod1, "store\xff", false};
  res.resources = {Res(ResourceKind::kQp, "rxe0", 60), Res(ResourceKind::kQp, "rxe0", 61)};
  Sampler s(Options(), Inputs(), &res, &procs);
  SamplePtr sample = s.TakeNow();
  ASSERT_EQ(sample->names.count(kPod1), 1u);
  const PodNames& n = sample->names.at(kPod1);
  EXPECT_EQ(n.ns, "kv");
  EXPECT_EQ(n.pod, "member-0");
  ASSERT_EQ(n.containers.size(), 1u);
  EXPECT_EQ(n.containers.at(kMain1), "store\xEF\xBF\xBD") << "outside bytes made valid UTF-8";
  EXPECT_THAT(n.sandboxes, ElementsAre(kSandbox1));
  ASSERT_EQ(sample->pods.size(), 1u);
  EXPECT_THAT(sample->pods[0].container_ids, ElementsAre(kSandbox1, kMain1))
      << "the live containers, sorted";
  EXPECT_EQ(procs.names_calls[kSandbox1], 1);
  EXPECT_EQ(procs.names_calls[kMain1], 1);
}

TEST_F(SamplerTest, GrantsAndHoldsStateAreCarried) {
  SamplerInputs in = Inputs();
  Grant g;
  g.hold = {"kv", "member-0", "store", "vpc.amazonaws.com/efa", "rdmap79s0", kPod1};
  g.exclusive = true;
  in.grants = [g] { return std::vector<Grant>{g}; };
  in.holds = [] { return HoldsState{false, "kubelet restart settling"}; };
  Sampler s(Options(), in, nullptr, nullptr);
  SamplePtr sample = s.TakeNow();
  ASSERT_EQ(sample->grants.size(), 1u);
  EXPECT_EQ(sample->grants[0].hold, g.hold);
  EXPECT_TRUE(sample->grants[0].exclusive);
  EXPECT_FALSE(sample->holds_complete);
  EXPECT_EQ(sample->holds_incomplete_reason, "kubelet restart settling");
}

TEST_F(SamplerTest, SampleCountersOnceReadsEveryCounter) {
  fs_.AddEfa("rdmap79s0", "0000:4f:00.0", {});
  fs_.SetCounter("rdmap79s0", 1, "tx_bytes", 9);
  Discover();
  SamplePtr s = SampleCountersOnce(fs_.paths(), devices_);
  ASSERT_EQ(s->counters.size(), 1u);
  EXPECT_EQ(s->counters[0].hw.size(), testing::FakeSysfs::EfaDeviceCounterNames().size() +
                                          testing::FakeSysfs::EfaPortCounterNames().size());
  EXPECT_EQ(s->traffic[0].bytes, 9u);
}

// The thread: rounds every period, the hook after each with the ring (it may
// read the newest sample and the status), Stop within a round.
TEST_F(SamplerTest, ThreadSamplesEveryPeriodAndStopsPromptly) {
  fs_.AddEfa("rdmap79s0", "0000:4f:00.0", {});
  Discover();
  SamplerOptions o = Options();
  o.clock = MonotonicNow;
  o.period = absl::Milliseconds(20);
  Sampler s(o, Inputs(), nullptr, nullptr);
  std::atomic<int> hooks{0};
  std::atomic<bool> in_order{true};
  s.OnSample([&](const SampleRing& ring) {
    const std::vector<size_t> slots = ring.Slots();
    if (slots.empty() || s.Latest()->seq != ring.header(slots.back()).seq) in_order = false;
    for (size_t i = 1; i < slots.size(); ++i) {
      if (ring.header(slots[i]).seq != ring.header(slots[i - 1]).seq + 1) in_order = false;
    }
    hooks++;
  });
  s.Start();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (s.status().rounds < 5 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  s.Stop();
  const uint64_t rounds = s.status().rounds;
  EXPECT_GE(rounds, 5u);
  EXPECT_EQ(static_cast<uint64_t>(hooks.load()), rounds);
  EXPECT_TRUE(in_order);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_EQ(s.status().rounds, rounds) << "no round after Stop";

  SamplerOptions slow = Options();
  slow.period = absl::Hours(1);
  Sampler idle(slow, Inputs(), nullptr, nullptr);
  idle.Start();
  const auto t0 = std::chrono::steady_clock::now();
  idle.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  EXPECT_EQ(idle.status().rounds, 0u);
}

// Readers on other threads while the sampler's thread and TakeNow run
// rounds (TSan's case: build with -DFABRIC_SANITIZE=thread).
TEST_F(SamplerTest, ConcurrentReadersAndRounds) {
  fs_.AddEfa("rdmap79s0", "0000:4f:00.0", {});
  fs_.AddMlx5("mlx5_0", "0000:3b:00.0", {});
  Discover();
  FakeResources res;
  FakeProcs procs;
  procs.pods[50] = {kPod1, kSandbox1, "containerd"};
  procs.net[50] = {1, 2, {"eth0"}};
  res.resources = {Res(ResourceKind::kQp, "mlx5_0", 50)};
  SamplerOptions o = Options();
  o.clock = MonotonicNow;
  o.period = absl::Milliseconds(1);
  o.max_window = absl::Milliseconds(10);
  Sampler s(o, Inputs(), &res, &procs);
  std::atomic<uint64_t> hooked{0};
  s.OnSample([&](const SampleRing& ring) { hooked = ring.header(ring.Slots().back()).seq; });
  s.Start();
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  for (int i = 0; i < 3; ++i) {
    readers.emplace_back([&] {
      while (!stop) {
        SamplePtr l = s.Latest();
        size_t kept = 0;
        s.ReadRing([&](const SampleRing& ring) { kept = ring.size(); });
        SamplerStatus st = s.status();
        if (l) {
          EXPECT_EQ(l->counters.size(), 2u);
        }
        EXPECT_LE(kept, s.capacity());
        (void)st;
      }
    });
  }
  for (int i = 0; i < 20; ++i) s.TakeNow();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  stop = true;
  for (auto& t : readers) t.join();
  s.Stop();
  EXPECT_GE(s.status().rounds, 20u);
  EXPECT_EQ(hooked.load(), s.Latest()->seq);
  s.ReadRing([&](const SampleRing& ring) { EXPECT_EQ(ring.size(), s.capacity()); });
}

}  // namespace
}  // namespace fabric::sampler
