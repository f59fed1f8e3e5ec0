#include "agent/observe/transport.h"

#include <functional>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fabric::observe {
namespace {

using sampler::ContainerOwned;
using sampler::DeviceTraffic;
using sampler::Grant;
using sampler::PodNet;
using sampler::Sample;
using sampler::SamplePtr;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

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

// `n` samples `period` seconds apart; `fill(sample, i)` shapes each.
std::vector<SamplePtr> Ring(int n, double period, const std::function<void(Sample&, int)>& fill) {
  std::vector<SamplePtr> ring;
  for (int i = 0; i < n; ++i) {
    Sample s = At(i * period);
    s.seq = static_cast<uint64_t>(i);
    fill(s, i);
    ring.push_back(std::make_shared<const Sample>(std::move(s)));
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
  o.owned.cq = qp;
  o.owned.mr = 1;
  o.owned.mr_bytes = 4 * kMiB;
  o.owned.pd = 1;
  o.pids = {pid};
  return o;
}

sampler::PodNames Names(const std::string& ns, const std::string& pod,
                        std::map<std::string, std::string> containers) {
  return sampler::PodNames{ns, pod, std::move(containers)};
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
       "counters of rxe0 went down in the window (a reset): its delta is unknown"},
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
  EXPECT_TRUE(EvaluateWindow({}, absl::Seconds(60)).pods.empty());
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
    EXPECT_THAT(c.evidence, Contains(HasSubstr("rxe0 is shared: its counters are the device "
                                               "total, held by ml/a, ml/b")));
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
  EXPECT_THAT(b.evidence, Contains(HasSubstr("not attributed: the container owns nothing on it")));
}

TEST(Transport, HostProcessesAndTheKernelAreNotHolders) {
  auto ring = Ring(4, 5, [](Sample& s, int i) {
    RxePod(s, i, 700, 1);
    s.host_owned = {sampler::HostOwned{300, "ibv_rc_pingpong", "rxe0", {1, 1, 1, 1, 4096}}};
    s.kernel_owned["rxe0"] = sampler::Owned{1, 1, 0, 1, 0};
  });
  WindowResult result7 = EvaluateWindow(ring, absl::Seconds(15));
  const ContainerObservation& c = Only(result7);
  EXPECT_EQ(c.attribution, Attribution::kSoleOwner);
  EXPECT_THAT(c.devices[0].holders, ElementsAre("ml/member-0"));
  EXPECT_THAT(
      c.evidence,
      Contains(
          AllOf(HasSubstr("also on rxe0: host pid 300 (ibv_rc_pingpong) owns 1 QP"),
                HasSubstr("the kernel (or owners not visible to the agent) owns 1 QP, 1 CQ, 1 PD"),
                HasSubstr("not counted as holders"))));
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

}  // namespace
}  // namespace fabric::observe
