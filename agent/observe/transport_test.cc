#include "agent/observe/transport.h"

#include <functional>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fabric::observe {
namespace {

using sampler::ContainerOwned;
using sampler::DeviceTraffic;
using sampler::Grant;
using sampler::PodNet;
using sampler::Sample;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr char kUidA[] = "0a1b2c3d-0000-4000-8000-00000000000a";
constexpr char kUidB[] = "0a1b2c3d-0000-4000-8000-00000000000b";
constexpr char kCidA[] = "aaaaaaaaaaaa0000000000000000000000000000000000000000000000000001";
constexpr char kCidB[] = "bbbbbbbbbbbb0000000000000000000000000000000000000000000000000002";
constexpr uint64_t kMiB = 1024 * 1024;

const absl::Time kMono0 = absl::UnixEpoch() + absl::Hours(100);
const absl::Time kWall0 = absl::FromUnixSeconds(1796169600);  // 2026-12-02T00:00:00Z

// A sample taken `t` seconds into the test, observation on and complete.
Sample At(double t) {
  Sample s;
  s.mono = kMono0 + absl::Seconds(t);
  s.wall = kWall0 + absl::Seconds(t);
  s.resources_ok = true;
  s.procs_ok = true;
  return s;
}

// A ring of `n` samples `period` seconds apart; `fill(sample, i)` shapes
// each, as the sampler took it. The ring keeps what windows read of them.
sampler::SampleRing Ring(int n, double period, const std::function<void(Sample&, int)>& fill) {
  sampler::SampleRing ring(std::max(n, 1));
  for (int i = 0; i < n; ++i) {
    Sample s = At(i * period);
    s.seq = static_cast<uint64_t>(i) + 1;
    fill(s, i);
    ring.Append(s);
  }
  return ring;
}

Grant G(const std::string& ns, const std::string& pod, const std::string& uid,
        const std::string& container, const std::string& resource, const std::string& device,
        bool exclusive) {
  Grant g;
  g.hold = PodDeviceHold{ns, pod, container, resource, device, uid};
  g.exclusive = exclusive;
  return g;
}

DeviceTraffic Bytes(const std::string& device, DeviceKind kind, uint64_t bytes) {
  DeviceTraffic t;
  t.device = device;
  t.kind = kind;
  t.readable = true;
  t.bytes = bytes;
  t.packets = bytes / 4096;
  return t;
}

DeviceTraffic Packets(const std::string& device, uint64_t packets) {
  DeviceTraffic t;
  t.device = device;
  t.kind = DeviceKind::kRdma;
  t.readable = true;
  t.packets = packets;
  return t;
}

PodNet Net(const std::string& uid, uint64_t bytes, bool host_network = false) {
  PodNet n;
  n.pod_uid = uid;
  n.pid = 4242;
  n.host_network = host_network;
  n.readable = !host_network;
  n.rx_bytes = bytes / 2;
  n.tx_bytes = bytes - bytes / 2;
  return n;
}

ContainerOwned Own(const std::string& uid, const std::string& cid, const std::string& device,
                   uint32_t qp, uint32_t pid) {
  ContainerOwned o;
  o.pod_uid = uid;
  o.container_id = cid;
  o.device = device;
  o.owned.qp = qp;
  o.owned.qp_active = qp;  // connected: they move bytes
  o.owned.cq = qp;
  o.owned.mr = 1;
  o.owned.mr_bytes = 4 * kMiB;
  o.owned.pd = 1;
  o.pids = {pid};
  return o;
}

sampler::PodNames Names(const std::string& ns, const std::string& pod,
                        std::map<std::string, std::string> containers) {
  return sampler::PodNames{ns, pod, std::move(containers), {}};
}

const ContainerObservation& Only(const WindowResult& r) {
  EXPECT_EQ(r.pods.size(), 1u);
  EXPECT_EQ(r.pods.at(0).containers.size(), 1u);
  return r.pods.at(0).containers.at(0);
}

// The soft-RoCE case: one Pod with a shared rxe0 token whose pingpong owns 2
// QPs and moves packets.
void RxePod(Sample& s, int i, uint64_t packets_per_sample, uint64_t net_per_sample) {
  s.grants = {
      G("ml", "member-0", kUidA, "engine", "device.gpustack.ai/rdma.shared", "rxe0", false)};
  s.traffic = {Packets("rxe0", 1000 + i * packets_per_sample)};
  s.pods = {Net(kUidA, 5000 + i * net_per_sample)};
  s.owned = {Own(kUidA, kCidA, "rxe0", 2, 166)};
  s.names[kUidA] = Names("ml", "member-0", {{kCidA, "engine"}});
}

TEST(Transport, RdmaOverAPacketOnlyDeviceIsSoleOwner) {
  auto ring = Ring(4, 5, [](Sample& s, int i) { RxePod(s, i, 700, 1000); });
  WindowResult r = EvaluateWindow(ring, absl::Seconds(15));
  const ContainerObservation& c = Only(r);
  EXPECT_EQ(c.verdict, Verdict::kRdma);
  EXPECT_EQ(c.attribution, Attribution::kSoleOwner);
  EXPECT_FALSE(c.fabric_bytes.has_value()) << "rxe counts packets only";
  EXPECT_EQ(c.fabric_packets, 2100u);
  EXPECT_EQ(c.other_bytes, 3000u);
  EXPECT_FALSE(c.fallback);
  EXPECT_EQ(r.floor_packets, 256u);
  ASSERT_EQ(c.devices.size(), 1u);
  const DeviceObservation& d = c.devices[0];
  EXPECT_EQ(d.device, "rxe0");
  EXPECT_EQ(d.resource, "device.gpustack.ai/rdma.shared");
  EXPECT_TRUE(d.counts_packets);
  EXPECT_EQ(d.owned.qp, 2u);
  EXPECT_EQ(d.owned.mr_bytes, 4 * kMiB);
  EXPECT_THAT(d.pids, ElementsAre(166u));
  EXPECT_THAT(d.holders, ElementsAre("ml/member-0"));
  EXPECT_THAT(c.evidence,
              Contains(HasSubstr("owns 2 QP, 2 CQ, 1 MR (4.0 MiB), 1 PD on rxe0 (pid 166)")));
  EXPECT_THAT(c.evidence, Contains(AllOf(HasSubstr("rxe0 moved 2,100 packets in 15.0 s"),
                                         HasSubstr("counts packets, not bytes: floor 256"))));
  EXPECT_EQ(r.pods[0].ns, "ml");
  EXPECT_EQ(r.pods[0].pod, "member-0");
  EXPECT_EQ(c.name, "engine");
}

TEST(Transport, PacketsUnderThePacketFloorAreNotTheFabric) {
  // 255 packets in the window: one under the floor of 1 MiB / 4096.
  auto ring = Ring(4, 5, [](Sample& s, int i) { RxePod(s, i, 85, 10); });
  EXPECT_EQ(Only(EvaluateWindow(ring, absl::Seconds(15))).verdict, Verdict::kIdle);
  TransportOptions low;
  low.floor_packets = 200;
  EXPECT_EQ(Only(EvaluateWindow(ring, absl::Seconds(15), low)).verdict, Verdict::kRdma);
}

TEST(Transport, ExclusiveEfaBytesOverTheFloorAreEfa) {
  auto ring = Ring(13, 5, [](Sample& s, int i) {
    s.grants = {G("ml", "member-1", kUidA, "engine", "vpc.amazonaws.com/efa", "rdmap79s0", true)};
    s.traffic = {Bytes("rdmap79s0", DeviceKind::kEfa, i * 100 * kMiB)};
    s.pods = {Net(kUidA, 0)};
    s.owned = {Own(kUidA, kCidA, "rdmap79s0", 8, 77)};
  });
  WindowResult r = EvaluateWindow(ring, absl::Seconds(60));
  const ContainerObservation& c = Only(r);
  EXPECT_EQ(c.verdict, Verdict::kEfa);
  EXPECT_EQ(c.attribution, Attribution::kExclusive);
  EXPECT_EQ(c.fabric_bytes, 1200 * kMiB);
  EXPECT_FALSE(c.fabric_packets.has_value());
  EXPECT_EQ(c.devices[0].kind, DeviceKind::kEfa);
  EXPECT_EQ(c.devices[0].attribution, Attribution::kExclusive);
  // No runtime names: the owning container maps to the Pod's only granted one.
  EXPECT_EQ(c.name, "engine");
  EXPECT_THAT(c.container_ids, ElementsAre(kCidA));
  EXPECT_THAT(c.evidence, Contains("rdmap79s0 moved 1.2 GiB in 60.0 s"));
}

TEST(Transport, GrantWithoutResourcesAndTcpBytesIsAFallback) {
  auto ring = Ring(4, 5, [](Sample& s, int i) {
    s.grants = {G("ml", "member-2", kUidA, "engine", "vpc.amazonaws.com/efa", "rdmap79s0", true)};
    s.traffic = {Bytes("rdmap79s0", DeviceKind::kEfa, 7)};
    s.pods = {Net(kUidA, i * 3 * kMiB)};
  });
  WindowResult result1 = EvaluateWindow(ring, absl::Seconds(15));
  const ContainerObservation& c = Only(result1);
  EXPECT_EQ(c.verdict, Verdict::kTcp);
  EXPECT_TRUE(c.fallback);
  EXPECT_TRUE(c.granted);
  EXPECT_EQ(c.attribution, Attribution::kNone);
  EXPECT_EQ(c.other_bytes, 9 * kMiB);
  EXPECT_EQ(c.fabric_bytes, 0u);
  EXPECT_THAT(c.evidence, Contains("no fabric resources owned by any process of the Pod"));
  EXPECT_THAT(c.evidence, Contains(HasSubstr("network namespace moved 9.0 MiB")));
  EXPECT_THAT(c.evidence, Contains(HasSubstr("granted rdmap79s0 (vpc.amazonaws.com/efa, exclusive) "
                                             "but no process of the container owns")));
}

TEST(Transport, ResourcesOwnedButTrafficOnTcpIsTcp) {
  // Mooncake with auto-discovery: it opened the device, then ran over TCP.
  auto ring = Ring(4, 5, [](Sample& s, int i) { RxePod(s, i, 3, 4 * kMiB); });
  WindowResult result2 = EvaluateWindow(ring, absl::Seconds(15));
  const ContainerObservation& c = Only(result2);
  EXPECT_EQ(c.verdict, Verdict::kTcp);
  EXPECT_TRUE(c.fallback);
  EXPECT_EQ(c.attribution, Attribution::kSoleOwner);
  EXPECT_THAT(c.evidence, Contains(HasSubstr("traffic is under the floor while the Pod's network "
                                             "bytes are over it")));
}

TEST(Transport, BothUnderTheFloorIsIdle) {
  auto ring = Ring(4, 5, [](Sample& s, int i) { RxePod(s, i, 10, 1000); });
  WindowResult result3 = EvaluateWindow(ring, absl::Seconds(15));
  const ContainerObservation& c = Only(result3);
  EXPECT_EQ(c.verdict, Verdict::kIdle);
  EXPECT_FALSE(c.fallback);
  EXPECT_TRUE(c.reason.empty());
}

TEST(Transport, TcpWithoutAGrantIsNoFallback) {
  // A Pod that owns resources without a grant (a privileged tool): tcp, but
  // nothing was granted, so no fallback.
  auto ring = Ring(4, 5, [](Sample& s, int i) {
    s.traffic = {Packets("rxe0", 0)};
    s.pods = {Net(kUidA, i * 2 * kMiB)};
    s.owned = {Own(kUidA, kCidA, "rxe0", 1, 9)};
    s.names[kUidA] = Names("tools", "debug", {{kCidA, "shell"}});
  });
  WindowResult result4 = EvaluateWindow(ring, absl::Seconds(15));
  const ContainerObservation& c = Only(result4);
  EXPECT_EQ(c.verdict, Verdict::kTcp);
  EXPECT_FALSE(c.fallback);
  EXPECT_FALSE(c.granted);
  EXPECT_EQ(c.devices[0].resource, "");
}

struct UnknownCase {
  const char* name;
  std::function<void(Sample&, int)> spoil;
  const char* reason;
};

TEST(Transport, EveryUnknownReason) {
  const std::vector<UnknownCase> cases = {
      {"kubelet view incomplete",
       [](Sample& s, int i) {
         if (i == 2) {
           s.holds_complete = false;
           s.holds_incomplete_reason = "kubelet restart settling (12 s left)";
         }
       },
       "the kubelet view is incomplete: kubelet restart settling (12 s left)"},
      {"counters unreadable",
       [](Sample& s, int) {
         s.traffic[0].readable = false;
         s.traffic[0].error = "/sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts: EIO";
         s.traffic[0].packets.reset();
       },
       "counters of rxe0 unreadable: /sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts: "
       "EIO"},
      {"resources off",
       [](Sample& s, int) {
         s.resources_ok = false;
         s.resources_error = "observation off (--observe not given)";
       },
       "fabric resources not observed (observation off or failing): observation off (--observe "
       "not given)"},
      {"procs off",
       [](Sample& s, int) {
         s.procs_ok = false;
         s.procs_error = "/proc: not the host PID namespace";
       },
       "Pod processes not observed (observation off or failing): /proc: not the host PID "
       "namespace"},
      {"no process visible", [](Sample& s, int) { s.pods.clear(); },
       "no process of the Pod is visible"},
      {"counter reset",
       [](Sample& s, int i) {
         if (i == 2) s.traffic[0].packets = 3;
       },
       "counters of rxe0 went down in the window, or the device went away and came back (a "
       "reset): its delta is unknown"},
      {"netns unreadable",
       [](Sample& s, int) {
         s.pods[0].readable = false;
         s.pods[0].error = "/proc/4242/net/dev: ENOENT";
       },
       "the Pod's network bytes are unreadable (through pid 4242): /proc/4242/net/dev: ENOENT"},
  };
  for (const UnknownCase& uc : cases) {
    SCOPED_TRACE(uc.name);
    // Idle traffic: no fabric verdict can mask the reason.
    auto ring = Ring(4, 5, [&](Sample& s, int i) {
      RxePod(s, i, 1, 1);
      uc.spoil(s, i);
    });
    WindowResult result5 = EvaluateWindow(ring, absl::Seconds(15));
    const ContainerObservation& c = Only(result5);
    EXPECT_EQ(c.verdict, Verdict::kUnknown);
    EXPECT_THAT(c.reason, HasSubstr(uc.reason));
  }
}

TEST(Transport, OneSampleIsUnknown) {
  auto ring = Ring(1, 5, [](Sample& s, int i) { RxePod(s, i, 700, 1); });
  WindowResult r = EvaluateWindow(ring, absl::Seconds(60));
  const ContainerObservation& c = Only(r);
  EXPECT_EQ(c.verdict, Verdict::kUnknown);
  EXPECT_THAT(c.reason, HasSubstr("the window holds 1 sample(s); a verdict needs 2"));
  EXPECT_TRUE(r.window.shorter);
  EXPECT_EQ(r.window.seconds, 0);
  EXPECT_TRUE(EvaluateWindow(sampler::SampleRing(4), absl::Seconds(60)).pods.empty());
}

TEST(Transport, ResetOnAnotherDeviceDoesNotHideAFabricVerdict) {
  auto ring = Ring(4, 5, [](Sample& s, int i) {
    RxePod(s, i, 700, 1);
    s.grants.push_back(
        G("ml", "member-0", kUidA, "engine", "device.gpustack.ai/rdma.shared", "rxe1", false));
    s.traffic.push_back(Packets("rxe1", i == 2 ? 0 : 100 + i));
  });
  WindowResult result6 = EvaluateWindow(ring, absl::Seconds(15));
  const ContainerObservation& c = Only(result6);
  EXPECT_EQ(c.verdict, Verdict::kRdma);
  ASSERT_EQ(c.devices.size(), 2u);
  EXPECT_FALSE(c.devices[1].counters_known);
  EXPECT_FALSE(c.devices[1].fabric_packets.has_value()) << "a reset is unknown, never negative";
  EXPECT_THAT(c.evidence, Contains(HasSubstr("counters of rxe1 went down")));
}

TEST(Transport, TwoHoldersOfASharedDeviceAreAmbiguous) {
  auto ring = Ring(4, 5, [](Sample& s, int i) {
    s.grants = {G("ml", "a", kUidA, "engine", "device.gpustack.ai/rdma.shared", "rxe0", false),
                G("ml", "b", kUidB, "engine", "device.gpustack.ai/rdma.shared", "rxe0", false)};
    s.traffic = {Packets("rxe0", i * 1000)};
    s.pods = {Net(kUidA, 0), Net(kUidB, 0)};
    s.owned = {Own(kUidA, kCidA, "rxe0", 2, 10)};
    // b's resources show in one sample of the window only: still a holder.
    if (i == 1) s.owned.push_back(Own(kUidB, kCidB, "rxe0", 1, 20));
  });
  WindowResult r = EvaluateWindow(ring, absl::Seconds(15));
  ASSERT_EQ(r.pods.size(), 2u);
  for (const PodObservation& p : r.pods) {
    SCOPED_TRACE(p.pod);
    const ContainerObservation& c = p.containers.at(0);
    EXPECT_EQ(c.verdict, Verdict::kRdma);
    EXPECT_EQ(c.attribution, Attribution::kSharedAmbiguous);
    EXPECT_THAT(c.devices[0].holders, ElementsAre("ml/a", "ml/b"));
    EXPECT_EQ(c.devices[0].fabric_packets, 3000u) << "the device total";
    EXPECT_THAT(
        c.evidence,
        Contains(HasSubstr(absl::StrCat("rxe0 is shared: its counters are the device total, "
                                        "and others use it too: ml/",
                                        p.pod == "a" ? "b" : "a"))));
  }
  // Only a's resources in the window (b's sample falls out): a is sole owner,
  // and b, owning nothing, gets none of the bytes.
  WindowResult later = EvaluateWindow(
      Ring(4, 5,
           [](Sample& s, int i) {
             s.grants = {
                 G("ml", "a", kUidA, "engine", "device.gpustack.ai/rdma.shared", "rxe0", false),
                 G("ml", "b", kUidB, "engine", "device.gpustack.ai/rdma.shared", "rxe0", false)};
             s.traffic = {Packets("rxe0", i * 1000)};
             s.pods = {Net(kUidA, 0), Net(kUidB, 0)};
             s.owned = {Own(kUidA, kCidA, "rxe0", 2, 10)};
           }),
      absl::Seconds(15));
  EXPECT_EQ(later.pods[0].containers[0].attribution, Attribution::kSoleOwner);
  EXPECT_EQ(later.pods[0].containers[0].verdict, Verdict::kRdma);
  const ContainerObservation& b = later.pods[1].containers[0];
  EXPECT_EQ(b.verdict, Verdict::kIdle);
  EXPECT_EQ(b.devices[0].attribution, Attribution::kNone);
  EXPECT_THAT(b.evidence, Contains(HasSubstr("not attributed: the container owns no QP that can "
                                             "move bytes on it")));
}

// Issue 27 item 2: sole-owner means nobody else used the device, Pod or not.
// A host process, a kernel ULP or an owner that cannot be identified with a
// QP that can move bytes makes the bytes ambiguous; the stack's own QPs
// (ib_core's GSI) and users without such a QP do not, and are only listed.
TEST(Transport, UsersThatAreNotPodsMakeASharedDeviceAmbiguous) {
  struct Case {
    const char* name;
    std::function<void(Sample&)> add;
    Attribution want;
    const char* evidence;
  };
  const sampler::Owned moving{.qp = 1, .cq = 1, .mr = 1, .pd = 1, .qp_active = 1, .mr_bytes = 4096};
  const sampler::Owned pd_only{.pd = 1};
  const std::vector<Case> cases = {
      {"host process with a connected QP",
       [&](Sample& s) {
         s.host_owned = {sampler::HostOwned{300, "ib_write_bw", "rxe0", moving}};
       },
       Attribution::kSharedAmbiguous,
       "others use it too: host pid 300 (ib_write_bw) owns 1 QP, 1 CQ, 1 MR (4.0 KiB), 1 PD"},
      {"IPoIB's QPs",
       [&](Sample& s) { s.kernel_owned["rxe0"]["ib_ipoib"] = {.qp = 2, .qp_active = 2}; },
       Attribution::kSharedAmbiguous, "others use it too: the kernel's ib_ipoib owns 2 QP"},
      {"a QP whose creating thread exited",
       [&](Sample& s) { s.unattributed["rxe0"] = {.qp = 1, .qp_active = 1}; },
       Attribution::kSharedAmbiguous, "1 QP whose owner cannot be identified"},
      {"ib_core's GSI QP",
       [&](Sample& s) { s.kernel_owned["rxe0"]["ib_core"] = {.qp = 1, .cq = 1, .pd = 1}; },
       Attribution::kSoleOwner, nullptr},
      {"a host process that only opened the device",
       [&](Sample& s) {
         s.host_owned = {sampler::HostOwned{301, "ibv_devinfo", "rxe0", pd_only}};
       },
       Attribution::kSoleOwner, "also on rxe0: host pid 301 (ibv_devinfo) owns 1 PD"},
  };
  for (const Case& tc : cases) {
    SCOPED_TRACE(tc.name);
    auto ring = Ring(4, 5, [&](Sample& s, int i) {
      RxePod(s, i, 700, 1);
      if (i == 2) tc.add(s);  // in one sample of the window: still a user in it
    });
    WindowResult r = EvaluateWindow(ring, absl::Seconds(15));
    const ContainerObservation& c = Only(r);
    EXPECT_EQ(c.verdict, Verdict::kRdma);
    EXPECT_EQ(c.attribution, tc.want);
    EXPECT_THAT(c.devices[0].holders, ElementsAre("ml/member-0")) << "Pods only";
    if (tc.evidence != nullptr) {
      EXPECT_THAT(c.evidence, Contains(HasSubstr(tc.evidence)));
    }
    for (const std::string& e : c.evidence) EXPECT_THAT(e, Not(HasSubstr("ib_core")));
  }
}

TEST(Transport, HostNetworkPodHasNullOtherBytes) {
  auto fill = [](uint64_t per) {
    return [per](Sample& s, int i) {
      RxePod(s, i, per, 1);
      s.pods = {Net(kUidA, 0, /*host_network=*/true)};
    };
  };
  WindowResult busy = EvaluateWindow(Ring(4, 5, fill(700)), absl::Seconds(15));
  EXPECT_EQ(Only(busy).verdict, Verdict::kRdma);
  EXPECT_TRUE(Only(busy).host_network);
  EXPECT_TRUE(busy.pods[0].host_network);
  EXPECT_FALSE(Only(busy).other_bytes.has_value());
  EXPECT_THAT(Only(busy).evidence, Contains(HasSubstr("hostNetwork Pod")));
  // Quiet on the fabric: tcp and idle look alike from the node's netns.
  WindowResult quiet = EvaluateWindow(Ring(4, 5, fill(1)), absl::Seconds(15));
  EXPECT_EQ(Only(quiet).verdict, Verdict::kUnknown);
  EXPECT_THAT(Only(quiet).reason, HasSubstr("hostNetwork"));
}

TEST(Transport, IdentityFallbacks) {
  // Grant without a Pod UID (PodResources only): the UID comes from the
  // runtime's names, so processes join the grant.
  auto ring = Ring(4, 5, [](Sample& s, int i) {
    RxePod(s, i, 700, 1);
    s.grants[0].hold.pod_uid.clear();
  });
  WindowResult result8 = EvaluateWindow(ring, absl::Seconds(15));
  const ContainerObservation& c = Only(result8);
  EXPECT_EQ(c.verdict, Verdict::kRdma);
  EXPECT_EQ(c.name, "engine");

  // Two granted containers and an owner the runtime does not name: ""
  // with the container ID in the evidence.
  auto two = Ring(4, 5, [](Sample& s, int i) {
    RxePod(s, i, 700, 1);
    s.names.clear();
    s.grants.push_back(
        G("ml", "member-0", kUidA, "sidecar", "device.gpustack.ai/rdma.shared", "rxe0", false));
  });
  WindowResult r = EvaluateWindow(two, absl::Seconds(15));
  ASSERT_EQ(r.pods.size(), 1u);
  std::vector<std::string> names;
  for (const auto& co : r.pods[0].containers) names.push_back(co.name);
  EXPECT_THAT(names, ElementsAre("", "engine", "sidecar"));
  EXPECT_THAT(r.pods[0].containers[0].evidence,
              Contains(HasSubstr("container aaaaaaaaaaaa is not named by the runtime")));
  EXPECT_EQ(r.pods[0].containers[1].verdict, Verdict::kIdle) << "engine owns nothing";

  // A Pod known only by its processes, named by the runtime.
  auto unnamed = Ring(4, 5, [](Sample& s, int i) {
    s.traffic = {Packets("rxe0", i * 1000)};
    s.pods = {Net(kUidB, 0)};
    s.owned = {Own(kUidB, kCidB, "rxe0", 1, 5)};
    s.names[kUidB] = Names("team", "job-7", {{kCidB, "trainer"}});
  });
  WindowResult u = EvaluateWindow(unnamed, absl::Seconds(15));
  EXPECT_EQ(u.pods.at(0).ns, "team");
  EXPECT_EQ(u.pods.at(0).pod, "job-7");
  EXPECT_EQ(u.pods.at(0).pod_uid, kUidB);
  EXPECT_EQ(Only(u).name, "trainer");
  EXPECT_EQ(Only(u).verdict, Verdict::kRdma);
}

TEST(Transport, HostileNamesAreSanitized) {
  auto ring = Ring(4, 5, [](Sample& s, int i) {
    RxePod(s, i, 700, 1);
    s.names[kUidA] = Names("ml", "member-0", {{kCidA, "bad\xff"}});
    s.grants.clear();
  });
  WindowResult result9 = EvaluateWindow(ring, absl::Seconds(15));
  const ContainerObservation& c = Only(result9);
  EXPECT_EQ(c.name, "bad\xEF\xBF\xBD");
}

TEST(Transport, WindowBounds) {
  // 25 samples 5 s apart (0..120 s).
  auto ring = Ring(25, 5, [](Sample& s, int i) { RxePod(s, i, 100, 1); });
  WindowResult r = EvaluateWindow(ring, absl::Seconds(60));
  EXPECT_EQ(r.window.start, kWall0 + absl::Seconds(60));
  EXPECT_EQ(r.window.end, kWall0 + absl::Seconds(120));
  EXPECT_DOUBLE_EQ(r.window.seconds, 60);
  EXPECT_EQ(r.window.samples, 13u);
  EXPECT_FALSE(r.window.shorter);
  EXPECT_EQ(Only(r).fabric_packets, 1200u);
  // Jittered sampling: the newest sample at or before now - window.
  auto jitter = Ring(25, 5.1, [](Sample& s, int i) { RxePod(s, i, 100, 1); });
  WindowResult j = EvaluateWindow(jitter, absl::Seconds(60));
  EXPECT_NEAR(j.window.seconds, 61.2, 1e-9);  // 12 periods of 5.1 s
  // Asking more than the ring holds: the oldest sample, marked shorter.
  WindowResult all = EvaluateWindow(ring, absl::Minutes(10));
  EXPECT_TRUE(all.window.shorter);
  EXPECT_EQ(all.window.start, kWall0);
  EXPECT_DOUBLE_EQ(all.window.seconds, 120);
  EXPECT_THAT(Only(all).evidence,
              Contains("the ring reaches back only 120.0 s of the 600 s asked"));
}

TEST(Transport, ParseWindow) {
  EXPECT_EQ(*ParseWindow("60s"), absl::Seconds(60));
  EXPECT_EQ(*ParseWindow("2m"), absl::Minutes(2));
  EXPECT_EQ(*ParseWindow("1m30s"), absl::Seconds(90));
  EXPECT_EQ(*ParseWindow("90"), absl::Seconds(90));
  EXPECT_EQ(*ParseWindow("15s"), kMinWindow);
  EXPECT_EQ(*ParseWindow("10m"), kMaxWindow);
  for (const char* bad : {"14s", "10m1s", "1h", "", "abc", "5x", "30s1m", "1m1m", "s", "60s ",
                          "-60s", "99999999999s", "1.5m"}) {
    SCOPED_TRACE(bad);
    auto w = ParseWindow(bad);
    if (std::string(bad) == "60s ") {
      EXPECT_TRUE(w.ok());  // surrounding blanks are dropped
      continue;
    }
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(w.status().message()), HasSubstr("window '"));
  }
  EXPECT_THAT(std::string(ParseWindow("14s").status().message()),
              HasSubstr("window '14s': out of range 15s..10m"));
}

TEST(Transport, HumanUnits) {
  EXPECT_EQ(HumanBytes(512), "512 B");
  EXPECT_EQ(HumanBytes(9.1 * kMiB), "9.1 MiB");
  EXPECT_EQ(HumanCount(2003), "2,003");
  EXPECT_EQ(HumanCount(1234567), "1,234,567");
  EXPECT_EQ(HumanCount(12), "12");
}

TEST(Transport, APodStartedWithinTheWindowCountsFromItsFirstSample) {
  auto ring = Ring(13, 5, [](Sample& s, int i) {
    s.grants = {G("ml", "new", kUidA, "engine", "vpc.amazonaws.com/efa", "rdmap79s0", true)};
    s.traffic = {Bytes("rdmap79s0", DeviceKind::kEfa, 0)};
    if (i >= 10) s.pods = {Net(kUidA, (i - 10) * kMiB)};
  });
  WindowResult r = EvaluateWindow(ring, absl::Seconds(60));
  const ContainerObservation& c = Only(r);
  EXPECT_EQ(c.other_bytes, 2 * kMiB);
  EXPECT_EQ(c.verdict, Verdict::kTcp);
  EXPECT_TRUE(c.fallback);
}

TEST(Transport, PodsWithoutGrantOrResourcesAreNotListed) {
  auto ring = Ring(4, 5, [](Sample& s, int i) {
    s.pods = {Net(kUidA, i * 10 * kMiB)};
    s.names[kUidA] = Names("web", "nginx", {});
  });
  EXPECT_THAT(EvaluateWindow(ring, absl::Seconds(15)).pods, IsEmpty());
}

// Issue 27 item 1: a PD, CQ or MR moves nothing. A Pod that opened the shared
// device (UCX's ucp_init opens a PD on every device; a stack that failed
// before its QPs leaves a PD and a CQ) while a neighbour moves RDMA on it is a
// TCP fallback, not rdma, and the neighbour stays the sole owner. So is one
// whose only QP never left RESET (libfabric's fi_getinfo probe).
TEST(Transport, OpeningTheDeviceWithoutAMovingQpIsNotUsingTheFabric) {
  for (const bool probe_qp : {false, true}) {
    SCOPED_TRACE(probe_qp ? "a QP in RESET" : "a PD and a CQ");
    auto ring = Ring(4, 5, [&](Sample& s, int i) {
      RxePod(s, i, 700, 1);  // member-0 moves RDMA on rxe0
      s.grants.push_back(
          G("ml", "engine-0", kUidB, "engine", "device.gpustack.ai/rdma.shared", "rxe0", false));
      s.pods.push_back(Net(kUidB, i * 2 * kMiB));
      ContainerOwned opened;
      opened.pod_uid = kUidB;
      opened.container_id = kCidB;
      opened.device = "rxe0";
      opened.owned = {.qp = probe_qp ? 1u : 0u, .cq = 1, .pd = 1};
      opened.pids = {77};
      s.owned.push_back(opened);
      s.names[kUidB] = Names("ml", "engine-0", {{kCidB, "engine"}});
    });
    WindowResult r = EvaluateWindow(ring, absl::Seconds(15));
    ASSERT_EQ(r.pods.size(), 2u);
    const ContainerObservation& engine = r.pods[0].containers.at(0);
    const ContainerObservation& member = r.pods[1].containers.at(0);
    EXPECT_EQ(engine.verdict, Verdict::kTcp);
    EXPECT_TRUE(engine.fallback);
    EXPECT_EQ(engine.attribution, Attribution::kNone);
    EXPECT_EQ(engine.devices[0].owned.pd, 1u) << "kept as evidence";
    EXPECT_THAT(engine.evidence,
                Contains(HasSubstr(probe_qp ? "but no QP that can move bytes: its QPs are in RESET"
                                            : "opened rxe0 but created no QP (owns 1 CQ, 1 PD")));
    EXPECT_EQ(member.verdict, Verdict::kRdma);
    EXPECT_EQ(member.attribution, Attribution::kSoleOwner);
    EXPECT_THAT(member.devices[0].holders, ElementsAre("ml/member-0"));
  }
}

// Issue 27 item 3: the kernel names the creating thread; when it exits, a
// live QP shows pid 0 without a kern_name. On a device with bytes over the
// floor, a granted container owning nothing there is unknown, not tcp.
TEST(Transport, BytesOfAnOwnerThatCannotBeIdentifiedAreUnknownNotTcp) {
  auto ring = Ring(4, 5, [](Sample& s, int i) {
    s.grants = {G("ml", "member-3", kUidA, "engine", "device.gpustack.ai/rdma", "rxe1", true)};
    s.traffic = {Packets("rxe1", i * 5000)};
    s.pods = {Net(kUidA, i * 3 * kMiB)};
    s.unattributed["rxe1"] = {.qp = 2, .cq = 2, .qp_active = 2};
  });
  WindowResult r = EvaluateWindow(ring, absl::Seconds(15));
  const ContainerObservation& c = Only(r);
  EXPECT_EQ(c.verdict, Verdict::kUnknown);
  EXPECT_FALSE(c.fallback);
  EXPECT_THAT(c.reason, HasSubstr("a user whose owner cannot be identified moved bytes on rxe1"));
  // Under the floor nothing is hidden: the usual verdict.
  auto quiet = Ring(4, 5, [](Sample& s, int i) {
    s.grants = {G("ml", "member-3", kUidA, "engine", "device.gpustack.ai/rdma", "rxe1", true)};
    s.traffic = {Packets("rxe1", i * 10)};
    s.pods = {Net(kUidA, i * 3 * kMiB)};
    s.unattributed["rxe1"] = {.qp = 2, .qp_active = 2};
  });
  WindowResult quiet_result = EvaluateWindow(quiet, absl::Seconds(15));
  EXPECT_EQ(Only(quiet_result).verdict, Verdict::kTcp);
}

// Issue 27 item 4: a finished init container is granted, owns nothing and
// has no process; its Pod's TCP bytes are the app's. No fallback for it, and
// the app's unnamed resources are not given to it.
TEST(Transport, AFinishedInitContainerIsNoFallback) {
  constexpr char kSandbox[] = "5555555555550000000000000000000000000000000000000000000000000005";
  auto fill = [&](bool names) {
    return [names, kSandbox](Sample& s, int i) {
      Grant init =
          G("ml", "member-4", kUidA, "fetch", "device.gpustack.ai/rdma.shared", "rxe0", false);
      init.hold.init_container = true;
      s.grants = {init, G("ml", "member-4", kUidA, "store", "device.gpustack.ai/rdma.shared",
                          "rxe0", false)};
      s.traffic = {Packets("rxe0", i * 5000)};
      PodNet n = Net(kUidA, i * 4 * kMiB);
      n.container_ids = {kSandbox, kCidA};
      s.pods = {n};
      s.owned = {Own(kUidA, kCidA, "rxe0", 2, 40)};
      if (names) {
        s.names[kUidA] = Names("ml", "member-4", {{kCidA, "store"}});
        s.names[kUidA].sandboxes = {kSandbox};
      }
    };
  };
  for (const bool names : {true, false}) {
    SCOPED_TRACE(names ? "the runtime names the containers" : "no runtime records");
    WindowResult r = EvaluateWindow(Ring(4, 5, fill(names)), absl::Seconds(15));
    ASSERT_EQ(r.pods.size(), 1u);
    std::map<std::string, const ContainerObservation*> by;
    for (const auto& c : r.pods[0].containers) by[c.name] = &c;
    ASSERT_EQ(by.size(), 2u) << "the app's resources go to the app, not to \"\"";
    EXPECT_EQ(by["store"]->verdict, Verdict::kRdma);
    EXPECT_FALSE(by["fetch"]->fallback);
    if (names) {
      EXPECT_EQ(by["fetch"]->verdict, Verdict::kIdle);
      EXPECT_THAT(by["fetch"]->evidence, Contains(HasSubstr("no process of this container is "
                                                            "running")));
    } else {
      EXPECT_THAT(by["fetch"]->evidence, Contains(HasSubstr("an init container: whether it still "
                                                            "runs cannot be told")));
    }
  }
  // A granted app container the runtime names, with no process (it exited):
  // no fallback either.
  auto exited = Ring(4, 5, [&](Sample& s, int i) {
    s.grants = {G("ml", "member-5", kUidA, "store", "vpc.amazonaws.com/efa", "rdmap79s0", true)};
    s.traffic = {Bytes("rdmap79s0", DeviceKind::kEfa, 0)};
    PodNet n = Net(kUidA, i * 4 * kMiB);
    n.container_ids = {kSandbox, kCidB};
    s.pods = {n};
    s.names[kUidA] = Names("ml", "member-5", {{kCidB, "sidecar"}});
    s.names[kUidA].sandboxes = {kSandbox};
  });
  WindowResult exited_result = EvaluateWindow(exited, absl::Seconds(15));
  const ContainerObservation& store = Only(exited_result);
  EXPECT_EQ(store.verdict, Verdict::kIdle);
  EXPECT_FALSE(store.fallback);
}

// Issue 32 item 17: a sidecar (an init container with restartPolicy: Always)
// runs for the Pod's life. A 1.29+ kubelet's PodResources List names it
// among the Pod's containers, so its hold is no init container's: without
// the runtime's records it is still a candidate owner, and TCP bytes while it
// holds a grant are its fallback, where a plain init container's are not.
TEST(Transport, ASidecarIsJudgedAsAnAppContainer) {
  auto ring = Ring(4, 5, [](Sample& s, int i) {
    Grant fetch =
        G("ml", "member-6", kUidA, "fetch", "device.gpustack.ai/rdma.shared", "rxe0", false);
    fetch.hold.init_container = true;  // in the checkpoint only
    s.grants = {fetch, G("ml", "member-6", kUidA, "store", "device.gpustack.ai/rdma.shared", "rxe0",
                         false)};
    s.traffic = {Packets("rxe0", 1000)};
    s.pods = {Net(kUidA, i * 4 * kMiB)};
  });
  WindowResult r = EvaluateWindow(ring, absl::Seconds(15));
  ASSERT_EQ(r.pods.size(), 1u);
  std::map<std::string, const ContainerObservation*> by;
  for (const auto& c : r.pods[0].containers) by[c.name] = &c;
  ASSERT_EQ(by.size(), 2u);
  EXPECT_EQ(by["store"]->verdict, Verdict::kTcp);
  EXPECT_TRUE(by["store"]->fallback);
  EXPECT_FALSE(by["fetch"]->fallback);

  // Its QPs, from a container the runtime does not name, are its own: the
  // finished init container is no candidate.
  auto owning = Ring(4, 5, [](Sample& s, int i) {
    Grant fetch =
        G("ml", "member-6", kUidA, "fetch", "device.gpustack.ai/rdma.shared", "rxe0", false);
    fetch.hold.init_container = true;
    s.grants = {fetch, G("ml", "member-6", kUidA, "store", "device.gpustack.ai/rdma.shared", "rxe0",
                         false)};
    s.traffic = {Packets("rxe0", 1000 + i * 700)};
    s.pods = {Net(kUidA, 5000)};
    s.owned = {Own(kUidA, kCidA, "rxe0", 2, 77)};
  });
  WindowResult o = EvaluateWindow(owning, absl::Seconds(15));
  ASSERT_EQ(o.pods.size(), 1u);
  by.clear();
  for (const auto& c : o.pods[0].containers) by[c.name] = &c;
  ASSERT_EQ(by.count("store"), 1u);
  EXPECT_EQ(by["store"]->verdict, Verdict::kRdma);
  EXPECT_THAT(by["store"]->container_ids, ElementsAre(kCidA));
}

// Issue 27 item 5: one device's failed dump makes that device's ownership
// unknown, not the node's.
TEST(Transport, AFailedDumpCostsOnlyThatDevice) {
  auto ring = Ring(4, 5, [](Sample& s, int i) {
    RxePod(s, i, 700, 1);  // member-0 on rxe0
    s.grants.push_back(
        G("ml", "member-1", kUidB, "engine", "device.gpustack.ai/rdma", "mlx5_0", true));
    s.traffic.push_back(Bytes("mlx5_0", DeviceKind::kRdma, i * kMiB));
    s.pods.push_back(Net(kUidB, i * 2 * kMiB));
    if (i == 2) s.resources_failed["mlx5_0"] = "RDMA_NLDEV_CMD_RES_QP_GET: EIO";
  });
  WindowResult r = EvaluateWindow(ring, absl::Seconds(15));
  ASSERT_EQ(r.pods.size(), 2u);
  EXPECT_EQ(r.pods[0].containers[0].verdict, Verdict::kRdma) << "rxe0's dumps all answered";
  EXPECT_EQ(r.pods[0].containers[0].attribution, Attribution::kSoleOwner);
  const ContainerObservation& c = r.pods[1].containers[0];
  EXPECT_EQ(c.verdict, Verdict::kUnknown);
  EXPECT_THAT(c.reason, HasSubstr("who owns resources on mlx5_0 is unknown in part of the window: "
                                  "its dump failed: RDMA_NLDEV_CMD_RES_QP_GET: EIO"));
}

// Issue 27 item 6: a container whose processes ended mid-window (a restart)
// keeps its name: the runtime's names are merged over the window.
TEST(Transport, NamesAreMergedOverTheWindow) {
  auto ring = Ring(4, 5, [](Sample& s, int i) {
    s.traffic = {Packets("rxe0", i * 1000)};
    s.pods = {Net(kUidA, 0)};
    s.names[kUidA] = Names("ml", "member-0", {});
    if (i <= 1) {  // the first instance, then it restarted as kCidB
      s.owned = {Own(kUidA, kCidA, "rxe0", 2, 10)};
      s.names[kUidA].containers[kCidA] = "engine";
    } else {
      s.names[kUidA].containers[kCidB] = "engine";
    }
  });
  WindowResult r = EvaluateWindow(ring, absl::Seconds(15));
  const ContainerObservation& c = Only(r);
  EXPECT_EQ(c.name, "engine");
  EXPECT_THAT(c.container_ids, ElementsAre(kCidA));
}

// Issue 27 item 8: a gap is a reset. A device missing from a sample in the
// window went away and came back; a Pod with no process in a sample may have
// a new network namespace. Either delta is unknown, never a wrong number.
TEST(Transport, AResetAcrossAGapIsUnknown) {
  auto device_gap = Ring(4, 5, [](Sample& s, int i) {
    RxePod(s, i, 700, 1);
    if (i == 1) s.traffic.clear();  // gone; back with counters past the old value
  });
  WindowResult device_result = EvaluateWindow(device_gap, absl::Seconds(15));
  const ContainerObservation& d = Only(device_result);
  EXPECT_EQ(d.verdict, Verdict::kUnknown);
  EXPECT_THAT(d.reason, HasSubstr("or the device went away and came back"));
  auto pod_gap = Ring(4, 5, [](Sample& s, int i) {
    RxePod(s, i, 1, 4 * kMiB);
    if (i == 2) s.pods.clear();  // a new sandbox: its netns counts from 0 again
  });
  WindowResult pod_result = EvaluateWindow(pod_gap, absl::Seconds(15));
  const ContainerObservation& p = Only(pod_result);
  EXPECT_EQ(p.verdict, Verdict::kUnknown);
  EXPECT_THAT(p.reason, HasSubstr("no visible process in part of the window"));
  EXPECT_FALSE(p.other_bytes.has_value());
  auto net_reset = Ring(4, 5, [](Sample& s, int i) {
    RxePod(s, i, 1, 4 * kMiB);
    if (i == 2) s.pods[0].rx_bytes = s.pods[0].tx_bytes = 0;
  });
  WindowResult reset_result = EvaluateWindow(net_reset, absl::Seconds(15));
  EXPECT_THAT(Only(reset_result).reason, HasSubstr("network byte counters went down"));
}

// Issue 27 items 9 and 11: an implicit ODP MR is the whole address space;
// owners that could not be read are said apart from those that exited.
TEST(Transport, OdpMrsAndUnreadableOwnersAreSaidAsSuch) {
  auto ring = Ring(4, 5, [](Sample& s, int i) {
    RxePod(s, i, 700, 1);
    s.owned[0].owned.mr_bytes = UINT64_MAX;
    s.owners_exited = 1;
    s.owners_unreadable = 2;
    s.owner_error = "/proc/400/status: Permission denied";
  });
  WindowResult r = EvaluateWindow(ring, absl::Seconds(15));
  const ContainerObservation& c = Only(r);
  EXPECT_THAT(c.evidence, Contains(HasSubstr("1 MR (the whole address space: an implicit "
                                             "on-demand-paging MR)")));
  EXPECT_THAT(c.evidence, Contains("1 resource owner(s) exited before they could be identified"));
  EXPECT_THAT(c.evidence, Contains("2 resource owner(s) could not be identified: /proc/400/status: "
                                   "Permission denied"));
}

// Issue 32, item 15: QPs whose creating thread exited, booked by the sampler
// to the owner of their PD or device context, are the container's like any
// other; the evidence says how they were found. Moving packets: rdma. The
// same QPs stopped while the Pod downloads: tcp, a fallback, the QPs counted.
TEST(Transport, QpsOfAThreadThatExitedAreTheContainers) {
  auto adopted = [](Sample& s, int i, uint64_t packets, uint64_t net) {
    s.grants = {G("ml", "member-0", kUidA, "engine", "device.gpustack.ai/rdma", "rxe1", true)};
    s.traffic = {Packets("rxe1", 1000 + i * packets)};
    s.pods = {Net(kUidA, 5000 + i * net)};
    s.owned = {Own(kUidA, kCidA, "rxe1", 2, 166)};
    s.owned[0].owned.adopted = 6;  // 2 QP, 2 CQ, 1 MR, 1 PD: all by a thread that exited
    s.names[kUidA] = Names("ml", "member-0", {{kCidA, "engine"}});
  };
  auto moving = Ring(4, 5, [&](Sample& s, int i) { adopted(s, i, 700, 1000); });
  WindowResult r = EvaluateWindow(moving, absl::Seconds(15));
  const ContainerObservation& c = Only(r);
  EXPECT_EQ(c.verdict, Verdict::kRdma) << c.reason;
  EXPECT_EQ(c.attribution, Attribution::kExclusive);
  EXPECT_EQ(c.name, "engine");
  ASSERT_EQ(c.devices.size(), 1u);
  EXPECT_EQ(c.devices[0].owned.qp, 2u);
  EXPECT_EQ(c.devices[0].owned.adopted, 6u);
  EXPECT_THAT(c.evidence,
              Contains(AllOf(HasSubstr("owns 2 QP, 2 CQ, 1 MR (4.0 MiB), 1 PD on rxe1 (pid 166)"),
                             HasSubstr("6 of them created by a thread that has exited"))));

  auto stopped = Ring(4, 5, [&](Sample& s, int i) { adopted(s, i, 0, 3 * kMiB); });
  WindowResult t = EvaluateWindow(stopped, absl::Seconds(15));
  const ContainerObservation& tc = Only(t);
  EXPECT_EQ(tc.verdict, Verdict::kTcp);
  EXPECT_TRUE(tc.fallback);
  EXPECT_EQ(tc.devices[0].owned.qp, 2u);
  EXPECT_THAT(tc.evidence, Contains(HasSubstr("QPs are owned on the fabric but its traffic is "
                                              "under the floor")));
}

// Issue 32, item 18: EFA has no loopback path. Prefill and decode Pods on one
// node, each with its EFA grant and SRD QPs, reach each other through
// libfabric's shared-memory provider: no EFA counter and no Pod network byte
// moves. Nothing the agent can count moved: idle, never tcp or a fallback,
// with evidence that names the peer and says why nothing shows.
void EfaPair(Sample& s, int i, uint64_t net_per_sample) {
  s.grants = {G("ml", "prefill-0", kUidA, "engine", "vpc.amazonaws.com/efa", "rdmap79s0", true),
              G("ml", "decode-0", kUidB, "engine", "vpc.amazonaws.com/efa", "rdmap80s0", true)};
  s.traffic = {Bytes("rdmap79s0", DeviceKind::kEfa, 7), Bytes("rdmap80s0", DeviceKind::kEfa, 9)};
  s.pods = {Net(kUidA, 1000 + i * net_per_sample), Net(kUidB, 2000)};
  s.owned = {Own(kUidA, kCidA, "rdmap79s0", 4, 77), Own(kUidB, kCidB, "rdmap80s0", 4, 88)};
  s.names[kUidA] = Names("ml", "prefill-0", {{kCidA, "engine"}});
  s.names[kUidB] = Names("ml", "decode-0", {{kCidB, "engine"}});
}

TEST(Transport, EfaPeersOnOneNodeAreIdleAndSayWhy) {
  auto ring = Ring(13, 5, [](Sample& s, int i) { EfaPair(s, i, 1000); });
  WindowResult r = EvaluateWindow(ring, absl::Seconds(60));
  ASSERT_EQ(r.pods.size(), 2u);
  for (const PodObservation& p : r.pods) {
    ASSERT_EQ(p.containers.size(), 1u);
    const ContainerObservation& c = p.containers[0];
    EXPECT_EQ(c.verdict, Verdict::kIdle) << p.pod << ": " << c.reason;
    EXPECT_FALSE(c.fallback);
    const std::string peer = p.pod == "prefill-0" ? "ml/decode-0" : "ml/prefill-0";
    EXPECT_THAT(c.evidence, Contains(AllOf(HasSubstr("EFA has no loopback"), HasSubstr(peer),
                                           HasSubstr("shared-memory provider"))))
        << p.pod;
  }
  // Alone on the node with its EFA QPs: idle, and no word of local peers.
  auto alone = Ring(13, 5, [](Sample& s, int i) {
    EfaPair(s, i, 1000);
    s.owned.pop_back();
  });
  WindowResult a = EvaluateWindow(alone, absl::Seconds(60));
  for (const PodObservation& p : a.pods) {
    for (const ContainerObservation& c : p.containers) {
      EXPECT_EQ(c.verdict, Verdict::kIdle);
      EXPECT_THAT(c.evidence, Not(Contains(HasSubstr("EFA has no loopback"))));
    }
  }
}

// The same Pods serving requests: their network bytes pass the floor, but
// with EFA peers on the node the engines' transfers may be the invisible
// shared-memory ones: whether anything fell back cannot be told. Unknown,
// never a fallback.
TEST(Transport, EfaPeersOnOneNodeWithNetworkTrafficAreUnknownNotAFallback) {
  auto ring = Ring(13, 5, [](Sample& s, int i) { EfaPair(s, i, 2 * kMiB); });
  WindowResult r = EvaluateWindow(ring, absl::Seconds(60));
  bool seen = false;
  for (const PodObservation& p : r.pods) {
    if (p.pod != "prefill-0") continue;
    seen = true;
    const ContainerObservation& c = p.containers.at(0);
    EXPECT_EQ(c.verdict, Verdict::kUnknown);
    EXPECT_FALSE(c.fallback);
    EXPECT_THAT(c.reason, AllOf(HasSubstr("EFA peers on this node"), HasSubstr("ml/decode-0"),
                                HasSubstr("shared memory")));
  }
  EXPECT_TRUE(seen);
}

// Issue 32, item 12: a grant whose MC_GID_INDEX no longer names its GID (the
// address left the table after Allocate) says so in the container's
// evidence; the verdict is what the counters say.
TEST(Transport, AGrantsStaleGidIndexIsInTheEvidence) {
  const std::string gone =
      "MC_GID_INDEX=1 (10.0.2.15 on eth0), given at Allocate, no longer names its GID: index 1 is "
      "empty now, and 10.0.2.15 has left rxe0 port 1's table";
  auto ring = Ring(4, 5, [&](Sample& s, int i) {
    RxePod(s, i, 1, 3 * kMiB);
    s.grants[0].gid_gone = gone;
  });
  WindowResult r = EvaluateWindow(ring, absl::Seconds(15));
  const ContainerObservation& c = Only(r);
  EXPECT_EQ(c.verdict, Verdict::kTcp);
  EXPECT_THAT(c.evidence, Contains(HasSubstr(gone)));
  EXPECT_THAT(c.evidence, Contains(HasSubstr("restart the container")));
}

}  // namespace
}  // namespace fabric::observe
