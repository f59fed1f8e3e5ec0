#include "agent/podconditions/conditions.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fabric::podconditions {
namespace {

using observe::ContainerObservation;
using observe::DeviceObservation;
using observe::PodObservation;
using observe::Verdict;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);
constexpr char kId1[] = "aaaa000000000000000000000000000000000000000000000000000000000001";
constexpr char kId2[] = "bbbb000000000000000000000000000000000000000000000000000000000002";

PodInfo Pod(const std::string& id = kId1, absl::Time started = kStart) {
  PodInfo p;
  p.uid = "uid-1";
  p.ns = "ml";
  p.name = "member-0";
  p.node = "node-a";
  ContainerState c;
  c.name = "engine";
  c.id = id;
  c.running = true;
  c.started_at = started;
  p.containers.push_back(c);
  return p;
}

DeviceObservation Dev(uint32_t qp, uint32_t cq = 0, uint32_t pd = 0, bool granted = true) {
  DeviceObservation d;
  d.device = "rxe0";
  d.resource = "device.gpustack.ai/rdma.shared";
  d.granted = granted;
  d.owned.qp = d.owned.qp_active = qp;
  d.owned.cq = cq;
  d.owned.pd = pd;
  d.attribution = observe::Attribution::kSoleOwner;
  return d;
}

PodObservation Obs(Verdict v, DeviceObservation d, const std::string& id = kId1,
                   bool fallback = false) {
  PodObservation p;
  p.ns = "ml";
  p.pod = "member-0";
  p.pod_uid = "uid-1";
  ContainerObservation c;
  c.name = "engine";
  c.granted = true;
  c.verdict = v;
  c.fallback = fallback;
  if (d.owned.any()) c.container_ids = {id};
  c.devices.push_back(d);
  c.evidence = {"owns something on rxe0", "rxe0 moved 6,000 packets in 60.0 s"};
  p.containers.push_back(c);
  return p;
}

TEST(AttachedOnTest, OnlyAQpOnAGrantedDevice) {
  EXPECT_TRUE(AttachedOn(Dev(1)));
  EXPECT_FALSE(AttachedOn(Dev(0, 2, 1)));         // a PD and CQs move no bytes
  EXPECT_FALSE(AttachedOn(Dev(3, 0, 0, false)));  // not granted to it
}

TEST(FabricAttachedTest, TrueOnceTheContainerOwnsAQpAndNamesIt) {
  PodObservation o = Obs(Verdict::kRdma, Dev(2, 2, 1));
  Desired d = DesiredConditions(Pod(), &o, {}, kStart + absl::Seconds(10));
  EXPECT_EQ(d.attached.type, kFabricAttached);
  EXPECT_EQ(d.attached.status, "True");
  EXPECT_EQ(d.attached.reason, "Attached");
  EXPECT_EQ(d.attached.message, "engine: 2 QP on rxe0");
  EXPECT_EQ(d.memory.containers.at("engine").attached_id, kId1);
}

TEST(FabricAttachedTest, StaysTrueWhileTheSameInstanceRunsAndRestartStartsTheGraceAgain) {
  PodObservation attached = Obs(Verdict::kRdma, Dev(2));
  Desired d1 = DesiredConditions(Pod(), &attached, {}, kStart + absl::Seconds(10));
  ASSERT_EQ(d1.attached.status, "True");
  // The QPs are gone from the window (closed, or the window moved on): still True.
  PodObservation idle = Obs(Verdict::kIdle, Dev(0));
  Desired d2 = DesiredConditions(Pod(), &idle, d1.memory, kStart + absl::Minutes(30));
  EXPECT_EQ(d2.attached.status, "True");
  EXPECT_EQ(d2.attached.message, "engine: 2 QP on rxe0");
  // A restart: a new instance, 5 s old, with the old instance's QPs still in
  // the window: not credited, the grace starts again.
  const absl::Time restart = kStart + absl::Minutes(31);
  PodObservation mixed = Obs(Verdict::kRdma, Dev(2), kId1);
  Desired d3 = DesiredConditions(Pod(kId2, restart), &mixed, d2.memory, restart + absl::Seconds(5));
  EXPECT_EQ(d3.attached.status, "Unknown");
  EXPECT_EQ(d3.attached.reason, "AttachPending");
  EXPECT_THAT(d3.attached.message, HasSubstr("the attach grace is 1m"));
  // The new instance opens the fabric.
  PodObservation fresh = Obs(Verdict::kRdma, Dev(1), kId2);
  Desired d4 =
      DesiredConditions(Pod(kId2, restart), &fresh, d3.memory, restart + absl::Seconds(20));
  EXPECT_EQ(d4.attached.status, "True");
  EXPECT_EQ(d4.attached.message, "engine: 1 QP on rxe0");
}

TEST(FabricAttachedTest, FalseAfterTheGraceWithTheEvidence) {
  PodObservation opened = Obs(Verdict::kTcp, Dev(0, 1, 1), kId1, true);
  Desired pending = DesiredConditions(Pod(), &opened, {}, kStart + absl::Seconds(59));
  EXPECT_EQ(pending.attached.status, "Unknown");
  EXPECT_EQ(pending.attached.reason, "AttachPending");
  Desired d = DesiredConditions(Pod(), &opened, pending.memory, kStart + absl::Seconds(60));
  EXPECT_EQ(d.attached.status, "False");
  EXPECT_EQ(d.attached.reason, "NotAttached");
  EXPECT_EQ(
      d.attached.message,
      "engine: opened rxe0 (1 CQ, 1 PD), no QP that can move bytes after 1m (the attach grace)");

  PodObservation never = Obs(Verdict::kIdle, Dev(0));
  Desired n = DesiredConditions(Pod(), &never, {}, kStart + absl::Minutes(5));
  EXPECT_EQ(n.attached.reason, "NotAttached");
  EXPECT_THAT(n.attached.message, HasSubstr("never opened a granted device (rxe0)"));
}

TEST(FabricAttachedTest, TheAnnotationSetsTheGraceAndABadOneIsSaid) {
  PodInfo p = Pod();
  p.attach_grace = "5m";
  PodObservation never = Obs(Verdict::kIdle, Dev(0));
  EXPECT_EQ(DesiredConditions(p, &never, {}, kStart + absl::Minutes(4)).attached.reason,
            "AttachPending");
  EXPECT_EQ(DesiredConditions(p, &never, {}, kStart + absl::Minutes(5)).attached.reason,
            "NotAttached");
  p.attach_grace = "soon";
  Desired bad = DesiredConditions(p, &never, {}, kStart + absl::Minutes(2));
  EXPECT_EQ(bad.attached.reason, "NotAttached");  // the default 60 s applies
  EXPECT_THAT(bad.attached.message,
              HasSubstr("annotation fabric.gpustack.ai/attach-grace: 'soon' is not a duration"));
  p.attach_grace = "-1s";
  EXPECT_FALSE(AttachGrace(p, kDefaultAttachGrace).ok());
  p.attach_grace = "0s";
  EXPECT_EQ(*AttachGrace(p, kDefaultAttachGrace), absl::ZeroDuration());
}

TEST(FabricAttachedTest, UnknownWhenObservationCannotTellOrTheContainerDoesNotRun) {
  PodObservation unknown = Obs(Verdict::kUnknown, Dev(0));
  unknown.containers[0].reason = "the kubelet view is incomplete: kubelet restarted";
  Desired u = DesiredConditions(Pod(), &unknown, {}, kStart + absl::Minutes(5));
  EXPECT_EQ(u.attached.status, "Unknown");
  EXPECT_EQ(u.attached.reason, "ObservationUnknown");
  EXPECT_THAT(u.attached.message, HasSubstr("kubelet restarted"));
  // A QP is a QP even when the verdict is unknown (say, unreadable counters).
  PodObservation qp = Obs(Verdict::kUnknown, Dev(1));
  EXPECT_EQ(DesiredConditions(Pod(), &qp, {}, kStart).attached.status, "True");

  PodInfo waiting = Pod();
  waiting.containers[0].running = false;
  EXPECT_EQ(DesiredConditions(waiting, &unknown, {}, kStart).attached.reason,
            "ContainerNotRunning");
  EXPECT_EQ(DesiredConditions(Pod(), nullptr, {}, kStart).attached.reason, "NotObserved");
}

TEST(FabricAttachedTest, APodOfInterestWithoutAGrantIsFalseNoGrant) {
  PodObservation o = Obs(Verdict::kRdma, Dev(1, 0, 0, false));
  o.containers[0].granted = false;
  Desired d = DesiredConditions(Pod(), &o, {}, kStart);
  EXPECT_EQ(d.attached.status, "False");
  EXPECT_EQ(d.attached.reason, "NoGrant");
}

TEST(FabricAttachedTest, EveryGrantedContainerMustAttach) {
  PodInfo p = Pod();
  ContainerState side = p.containers[0];
  side.name = "sidecar";
  side.id = kId2;
  p.containers.push_back(side);
  PodObservation o = Obs(Verdict::kRdma, Dev(1));
  ContainerObservation c2 = o.containers[0];
  c2.name = "sidecar";
  c2.container_ids = {kId2};
  c2.devices = {Dev(0)};
  o.containers.push_back(c2);
  Desired d = DesiredConditions(p, &o, {}, kStart + absl::Seconds(90));
  EXPECT_EQ(d.attached.status, "False");
  EXPECT_EQ(d.attached.message,
            "sidecar: never opened a granted device (rxe0) after 1m (the attach grace)");
  // A container without a grant is not asked to attach.
  o.containers[1].granted = false;
  o.containers[1].devices.clear();
  EXPECT_EQ(DesiredConditions(p, &o, {}, kStart + absl::Seconds(90)).attached.status, "True");
}

TEST(FabricAttachedTest, AfterAnAgentRestartTheApisTrueIsThisInstancesAttach) {
  PodInfo p = Pod();
  p.fabric_conditions[kFabricAttached] = Condition{
      kFabricAttached, "True", "Attached", "engine: 2 QP on rxe0", kStart + absl::Seconds(12)};
  PodObservation idle = Obs(Verdict::kIdle, Dev(0));
  Desired d = DesiredConditions(p, &idle, {}, kStart + absl::Hours(2));
  EXPECT_EQ(d.attached.status, "True");
  EXPECT_EQ(d.attached.message, "engine: 2 QP on rxe0");
  // ... but not a True from before this instance started.
  p.containers[0].started_at = kStart + absl::Minutes(1);
  EXPECT_EQ(DesiredConditions(p, &idle, {}, kStart + absl::Hours(2)).attached.reason,
            "NotAttached");
}

TEST(TransportTest, TheVerdictIsTheReasonAndIdleKeepsTheLastStatus) {
  PodObservation rdma = Obs(Verdict::kRdma, Dev(2));
  Desired r = DesiredConditions(Pod(), &rdma, {}, kStart);
  EXPECT_EQ(r.transport.type, kTransport);
  EXPECT_EQ(r.transport.status, "True");
  EXPECT_EQ(r.transport.reason, "Rdma");
  EXPECT_EQ(r.transport.message, "engine: rdma; rxe0 granted, owns 2 QP (sole-owner)");

  PodObservation idle = Obs(Verdict::kIdle, Dev(0));
  Desired i = DesiredConditions(Pod(), &idle, r.memory, kStart + absl::Minutes(2));
  EXPECT_EQ(i.transport.reason, "Idle");
  EXPECT_EQ(i.transport.status, "True");
  EXPECT_EQ(DesiredConditions(Pod(), &idle, {}, kStart).transport.status, "Unknown");

  PodObservation tcp = Obs(Verdict::kTcp, Dev(0), kId1, /*fallback=*/true);
  Desired t = DesiredConditions(Pod(), &tcp, i.memory, kStart + absl::Minutes(3));
  EXPECT_EQ(t.transport.status, "False");
  EXPECT_EQ(t.transport.reason, "Tcp");
  EXPECT_TRUE(t.fallback);
  EXPECT_FALSE(t.fallback_before);
  EXPECT_THAT(t.transport.message, HasSubstr("tcp while rxe0 is granted (fallback)"));
  Desired ti = DesiredConditions(Pod(), &idle, t.memory, kStart + absl::Minutes(5));
  EXPECT_EQ(ti.transport.status, "False");  // idle after the fallback keeps False

  PodObservation unknown = Obs(Verdict::kUnknown, Dev(0));
  unknown.containers[0].reason = "no process of the Pod is visible";
  Desired u = DesiredConditions(Pod(), &unknown, t.memory, kStart);
  EXPECT_EQ(u.transport.status, "Unknown");
  EXPECT_EQ(u.transport.reason, "Unknown");
  EXPECT_THAT(u.transport.message, HasSubstr("no process of the Pod is visible"));
}

TEST(TransportTest, TheMessageDoesNotChangeWithEverySample) {
  PodObservation a = Obs(Verdict::kRdma, Dev(2));
  PodObservation b = a;
  b.containers[0].evidence[1] = "rxe0 moved 9,999 packets in 60.0 s";
  b.containers[0].fabric_packets = 9999;
  Desired da = DesiredConditions(Pod(), &a, {}, kStart);
  Desired db = DesiredConditions(Pod(), &b, da.memory, kStart + absl::Seconds(5));
  EXPECT_TRUE(da.transport.SameValue(db.transport));
  EXPECT_TRUE(da.attached.SameValue(db.attached));
  EXPECT_NE(da.transport_evidence, db.transport_evidence);  // the events' evidence does change
}

TEST(TransitionTimeTest, MovesOnlyWithTheStatus) {
  const absl::Time t0 = kStart, t1 = kStart + absl::Minutes(1);
  Condition current{kTransport, "True", "Rdma", "m", t0};
  Condition idle{kTransport, "True", "Idle", "m2", absl::InfinitePast()};
  EXPECT_EQ(WithTransitionTime(idle, &current, t1).last_transition, t0);
  Condition tcp{kTransport, "False", "Tcp", "m3", absl::InfinitePast()};
  EXPECT_EQ(WithTransitionTime(tcp, &current, t1).last_transition, t1);
  EXPECT_EQ(WithTransitionTime(tcp, nullptr, t1).last_transition, t1);
}

TEST(TransitionEventsTest, OneEventPerTurn) {
  PodObservation rdma = Obs(Verdict::kRdma, Dev(2));
  Desired a = DesiredConditions(Pod(), &rdma, {}, kStart);
  auto ev = TransitionEvents(nullptr, a);
  ASSERT_THAT(ev, SizeIs(1));
  EXPECT_EQ(ev[0].reason, "FabricAttached");
  EXPECT_FALSE(ev[0].warning);
  EXPECT_THAT(TransitionEvents(&a.attached, a), IsEmpty());

  PodObservation tcp = Obs(Verdict::kTcp, Dev(0), kId1, true);
  Desired f = DesiredConditions(Pod(), &tcp, {}, kStart + absl::Minutes(2));
  auto fe = TransitionEvents(nullptr, f);
  ASSERT_THAT(fe, SizeIs(2));
  EXPECT_EQ(fe[0].reason, "FabricNotAttached");
  EXPECT_TRUE(fe[0].warning);
  EXPECT_EQ(fe[1].reason, "FabricFallback");
  EXPECT_THAT(fe[1].note, HasSubstr("Evidence: owns something on rxe0; rxe0 moved 6,000"));
  // Still a fallback on the next sample: no new event.
  Desired f2 = DesiredConditions(Pod(), &tcp, f.memory, kStart + absl::Minutes(2));
  EXPECT_THAT(TransitionEvents(&f.attached, f2), IsEmpty());
  // An agent restart reads the fallback back from the condition it wrote.
  PodInfo written = Pod();
  written.fabric_conditions[kTransport] =
      WithTransitionTime(f.transport, nullptr, kStart + absl::Minutes(2));
  written.fabric_conditions[kFabricAttached] = f.attached;
  Desired f3 = DesiredConditions(written, &tcp, {}, kStart + absl::Minutes(3));
  EXPECT_THAT(TransitionEvents(&f.attached, f3), IsEmpty());
}

TEST(ParsePodTest, ReadsWhatTheConditionsNeed) {
  nlohmann::json pod = nlohmann::json::parse(R"({
    "metadata": {"uid": "u1", "namespace": "ml", "name": "m0", "resourceVersion": "7",
                 "annotations": {"fabric.gpustack.ai/attach-grace": "90s"}},
    "spec": {"nodeName": "node-a", "containers": [{"name": "engine"}, {"name": "side"}],
             "initContainers": [{"name": "init"}],
             "readinessGates": [{"conditionType": "fabric.gpustack.ai/FabricAttached"}]},
    "status": {"phase": "Running",
      "conditions": [{"type": "Ready", "status": "False"},
                     {"type": "fabric.gpustack.ai/Transport", "status": "True", "reason": "Rdma",
                      "message": "m", "lastTransitionTime": "2026-12-02T00:41:07Z"}],
      "containerStatuses": [
        {"name": "engine", "containerID": "containerd://abc", "restartCount": 2,
         "state": {"running": {"startedAt": "2026-12-02T00:40:00Z"}}},
        {"name": "side", "state": {"waiting": {"reason": "ContainerCreating"}}}]}})");
  auto p = ParsePod(pod);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->uid, "u1");
  EXPECT_EQ(p->node, "node-a");
  EXPECT_EQ(p->attach_grace, "90s");
  ASSERT_THAT(p->containers, SizeIs(2));
  EXPECT_EQ(p->containers[0].id, "abc");
  EXPECT_TRUE(p->containers[0].running);
  EXPECT_EQ(p->containers[0].restart_count, 2);
  EXPECT_EQ(ApiTime(p->containers[0].started_at), "2026-12-02T00:40:00Z");
  EXPECT_FALSE(p->containers[1].running);
  EXPECT_EQ(p->init_containers, std::vector<std::string>{"init"});
  EXPECT_EQ(p->readiness_gates, std::vector<std::string>{kFabricAttached});
  ASSERT_EQ(p->fabric_conditions.size(), 1u);  // Ready is not ours
  EXPECT_EQ(ApiTime(p->fabric_conditions.at(kTransport).last_transition), "2026-12-02T00:41:07Z");
  EXPECT_FALSE(p->terminal);

  EXPECT_FALSE(ParsePod(nlohmann::json::parse(R"({"metadata": {"uid": 3}})")).ok());
  EXPECT_FALSE(ParsePod(nlohmann::json::array()).ok());
  auto odd = ParsePod(nlohmann::json::parse(
      R"({"metadata": {"uid": "u", "namespace": "n", "name": "p"}, "spec": 5,
          "status": {"containerStatuses": "x", "conditions": [3, {"type": 4}]}})"));
  ASSERT_TRUE(odd.ok());
  EXPECT_TRUE(odd->containers.empty());
  EXPECT_EQ(ApiMicroTime(absl::FromUnixMicros(1'800'000'000'123'456)),
            "2027-01-15T08:00:00.123456Z");
}

// A 1.29+ Pod with a sidecar (an init container with restartPolicy: Always)
// that holds the grant, as a Mooncake store beside the engine does: its
// status is in initContainerStatuses, a plain init container's grant is not
// asked to attach.
nlohmann::json SidecarPod() {
  return nlohmann::json::parse(R"({
    "metadata": {"uid": "uid-1", "namespace": "ml", "name": "member-0", "resourceVersion": "9"},
    "spec": {"nodeName": "node-a",
             "initContainers": [{"name": "fetch"},
                                {"name": "store", "restartPolicy": "Always"}],
             "containers": [{"name": "engine"}]},
    "status": {"phase": "Running",
      "initContainerStatuses": [
        {"name": "fetch", "containerID": "containerd://f1",
         "state": {"terminated": {"exitCode": 0}}},
        {"name": "store", "containerID": "containerd://s1", "restartCount": 0,
         "state": {"running": {"startedAt": "2027-01-15T08:00:00Z"}}}],
      "containerStatuses": [
        {"name": "engine", "containerID": "containerd://e1",
         "state": {"running": {"startedAt": "2027-01-15T08:00:05Z"}}}]}})");
}

TEST(ParsePodTest, ASidecarIsOneOfThePodsContainers) {
  auto p = ParsePod(SidecarPod());
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_THAT(p->containers, SizeIs(2));
  EXPECT_EQ(p->containers[0].name, "store");
  EXPECT_TRUE(p->containers[0].sidecar);
  EXPECT_TRUE(p->containers[0].running);
  EXPECT_EQ(p->containers[0].id, "s1");
  EXPECT_EQ(ApiTime(p->containers[0].started_at), "2027-01-15T08:00:00Z");
  EXPECT_EQ(p->containers[1].name, "engine");
  EXPECT_FALSE(p->containers[1].sidecar);
  EXPECT_EQ(p->init_containers, std::vector<std::string>{"fetch"});
}

TEST(FabricAttachedTest, ASidecarWithAGrantMustAttachLikeAnAppContainer) {
  auto pod = ParsePod(SidecarPod());
  ASSERT_TRUE(pod.ok()) << pod.status();
  const absl::Time started = pod->containers[0].started_at;
  // The observation as a 1.29+ kubelet's PodResources makes it: the sidecar's
  // grant is listed among the Pod's containers (holds: not an init container).
  auto with = [](const std::string& id, uint32_t qp, Verdict v) {
    PodObservation o = Obs(v, Dev(qp, 1, 1), id, v == Verdict::kTcp);
    o.containers[0].name = "store";
    return o;
  };
  PodObservation attached = with("s1", 2, Verdict::kRdma);
  Desired d = DesiredConditions(*pod, &attached, {}, started + absl::Seconds(10));
  EXPECT_EQ(d.attached.status, "True");
  EXPECT_EQ(d.attached.reason, "Attached");
  EXPECT_EQ(d.attached.message, "store: 2 QP on rxe0");

  PodObservation never = with("s1", 0, Verdict::kTcp);
  Desired n = DesiredConditions(*pod, &never, {}, started + absl::Minutes(2));
  EXPECT_EQ(n.attached.status, "False");
  EXPECT_EQ(n.attached.reason, "NotAttached");
  EXPECT_THAT(n.attached.message, HasSubstr("store: opened rxe0 (1 CQ, 1 PD)"));
  EXPECT_EQ(n.transport.status, "False");
  EXPECT_THAT(TransitionEvents(nullptr, n), SizeIs(2));  // FabricNotAttached, FabricFallback

  // A sidecar that restarts is not running until its new instance is.
  nlohmann::json restarting = SidecarPod();
  restarting["status"]["initContainerStatuses"][1]["state"] = {
      {"waiting", {{"reason", "CrashLoopBackOff"}}}};
  auto r = ParsePod(restarting);
  ASSERT_TRUE(r.ok());
  Desired w = DesiredConditions(*r, &never, {}, started + absl::Minutes(2));
  EXPECT_EQ(w.attached.reason, "ContainerNotRunning");
  EXPECT_EQ(w.attached.message, "store: not running");
}

}  // namespace
}  // namespace fabric::podconditions
