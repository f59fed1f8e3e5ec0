// What an agent restart does to the Pods' conditions and Events (issue 32
// items 5 and 8), against an in-memory API server that records every write:
// the first windows after a start (one sample, then a few seconds) must not
// change what the API server holds, and a repeated Event carries on the
// series an earlier agent began instead of starting a new object. The wire
// itself (strategic-merge patches, events.k8s.io validation) is
// writer_test.cc's, against tools/fake-apiserver.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "agent/podconditions/writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fabric::podconditions {
namespace {

using json = nlohmann::json;
using observe::Verdict;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

// Pods and Events of namespace ml, as the API server holds them. Every write
// is recorded ("PATCH <path>", "POST <path>"), and every list.
class MemoryApi : public kubeapi::KubeClient {
 public:
  std::map<std::string, json> pods;    // by name
  std::map<std::string, json> events;  // by name
  std::vector<std::string> writes, lists;
  int rv = 100;

  absl::StatusOr<json> Get(absl::string_view) override { return absl::UnimplementedError("get"); }
  absl::StatusOr<kubeapi::ObjectList> List(absl::string_view path,
                                           const kubeapi::ListOptions& o) override {
    lists.push_back(absl::StrCat(path, "?", o.field_selector));
    kubeapi::ObjectList out;
    out.resource_version = std::to_string(rv);
    const std::string uid = absl::StrContains(o.field_selector, "regarding.uid=")
                                ? std::string(absl::StripPrefix(o.field_selector, "regarding.uid="))
                                : "";
    for (const auto& [name, e] : events) {
      if (uid.empty() || e["regarding"]["uid"] == uid) out.items.push_back(e);
    }
    return out;
  }
  absl::StatusOr<json> Create(absl::string_view path, const json& object) override {
    writes.push_back(absl::StrCat("POST ", path));
    json e = object;
    e["metadata"]["resourceVersion"] = std::to_string(++rv);
    events[e["metadata"]["name"].get<std::string>()] = e;
    return e;
  }
  absl::StatusOr<json> Update(absl::string_view, const json&) override {
    return absl::UnimplementedError("update");
  }
  absl::Status Delete(absl::string_view, const kubeapi::DeleteOptions&) override {
    return absl::UnimplementedError("delete");
  }
  absl::StatusOr<json> Patch(absl::string_view path, const json& patch,
                             kubeapi::PatchType) override {
    writes.push_back(absl::StrCat("PATCH ", path));
    const std::vector<std::string> parts = absl::StrSplit(path, '/');
    if (absl::EndsWith(path, "/status")) {  // .../pods/NAME/status: merge conditions by type
      json& pod = pods.at(parts[parts.size() - 2]);
      json& conditions = pod["status"]["conditions"];
      for (const json& c : patch["status"]["conditions"]) {
        bool merged = false;
        for (json& have : conditions) {
          if (have["type"] == c["type"]) {
            have = c;
            merged = true;
          }
        }
        if (!merged) conditions.push_back(c);
      }
      pod["metadata"]["resourceVersion"] = std::to_string(++rv);
      return pod;
    }
    json& e = events.at(parts.back());
    e.merge_patch(patch);
    return e;
  }
  absl::StatusOr<json> Apply(absl::string_view, const json&, absl::string_view, bool) override {
    return absl::UnimplementedError("apply");
  }
  absl::Status StreamWatch(absl::string_view, const kubeapi::WatchRequest&,
                           const kubeapi::WatchLineHandler&, kubeapi::Canceller*) override {
    return absl::UnimplementedError("watch");
  }

  // The condition's status, reason, message and lastTransitionTime.
  json Condition(const std::string& pod, const std::string& type) const {
    for (const json& c : pods.at(pod)["status"]["conditions"]) {
      if (c["type"] != type) continue;
      json out;
      for (const char* k : {"status", "reason", "message", "lastTransitionTime"}) out[k] = c[k];
      return out;
    }
    return nullptr;
  }
};

constexpr char kNotAttachedNote[] =
    "engine: never opened a granted device (rxe0) after 1m (the attach grace)";
constexpr char kRdmaMessage[] = "engine: rdma; rxe0 granted, owns 2 QP, 1 PD (sole-owner)";

// A running Pod whose conditions an earlier agent wrote 50 minutes ago:
// FabricAttached False/NotAttached, Transport True/Rdma.
json HeldPod() {
  const std::string written = ApiTime(kT0 - absl::Minutes(50));
  return {
      {"metadata", {{"uid", "u1"}, {"namespace", "ml"}, {"name", "m0"}, {"resourceVersion", "50"}}},
      {"spec", {{"nodeName", "node-a"}, {"containers", {{{"name", "engine"}}}}}},
      {"status",
       {{"phase", "Running"},
        {"conditions",
         {{{"type", "Ready"}, {"status", "True"}},
          {{"type", kFabricAttached},
           {"status", "False"},
           {"reason", "NotAttached"},
           {"message", kNotAttachedNote},
           {"lastTransitionTime", written}},
          {{"type", kTransport},
           {"status", "True"},
           {"reason", "Rdma"},
           {"message", kRdmaMessage},
           {"lastTransitionTime", written}}}},
        {"containerStatuses",
         {{{"name", "engine"},
           {"containerID", "containerd://c1"},
           {"state", {{"running", {{"startedAt", ApiTime(kT0 - absl::Hours(1))}}}}}}}}}}};
}

// The observer's window for m0's engine: `samples` samples, `shorter` when
// the ring does not reach back the 60 s asked for (the agent just started).
observe::WindowResult Window(size_t samples, bool shorter, Verdict v, bool fallback = false) {
  observe::WindowResult r;
  r.window.requested = absl::Seconds(60);
  r.window.samples = samples;
  r.window.shorter = shorter;
  observe::PodObservation p;
  p.ns = "ml";
  p.pod = "m0";
  p.pod_uid = "u1";
  observe::ContainerObservation c;
  c.name = "engine";
  c.granted = true;
  c.verdict = v;
  c.fallback = fallback;
  if (v == Verdict::kUnknown) {
    c.reason =
        "the window holds 1 sample(s); a verdict needs 2 (the sampler has not run a full "
        "period)";
  }
  observe::DeviceObservation d;
  d.device = "rxe0";
  d.granted = true;
  c.devices.push_back(d);
  c.evidence = {"the Pod's network moved 9.1 MiB in 60.0 s"};
  p.containers.push_back(c);
  r.pods.push_back(p);
  return r;
}

class RestartTest : public ::testing::Test {
 protected:
  // A new agent: its Pod watch has listed what the API server holds.
  void StartAgent() {
    pods_ = std::make_unique<NodePods>(&api_, "node-a");
    kubeapi::ObjectList list;
    list.resource_version = "60";
    for (const auto& [name, pod] : api_.pods) list.items.push_back(pod);
    pods_->OnList(list);
    EventRecorderOptions eo;
    eo.node = "node-a";
    eo.now = [this] { return now_; };
    events_ = std::make_unique<EventRecorder>(&api_, eo);
    WriterOptions wo;
    wo.now = [this] { return now_; };
    writer_ = std::make_unique<ConditionWriter>(&api_, pods_.get(), events_.get(), wo);
  }
  // Ticks the windows the sampler gives a new agent, 5 s apart: one sample,
  // then 2..12 samples short of 60 s, then full windows.
  void Samples(int n, Verdict v, bool fallback = false) {
    for (int i = 0; i < n; ++i, ++sample_) {
      now_ += absl::Seconds(5);
      writer_->Tick(
          Window(sample_ + 1, sample_ < 12, sample_ == 0 ? Verdict::kUnknown : v, fallback));
    }
  }

  MemoryApi api_;
  absl::Time now_ = kT0;
  int sample_ = 0;
  std::unique_ptr<NodePods> pods_;
  std::unique_ptr<EventRecorder> events_;
  std::unique_ptr<ConditionWriter> writer_;
};

TEST_F(RestartTest, TheFirstWindowsAfterARestartChangeNothingTheApiServerHolds) {
  api_.pods["m0"] = HeldPod();
  const json attached = api_.Condition("m0", kFabricAttached);
  const json transport = api_.Condition("m0", kTransport);
  StartAgent();
  // The first window: one sample, every verdict unknown.
  Samples(1, Verdict::kIdle);
  EXPECT_THAT(api_.writes, IsEmpty());
  // Then 11 windows of 2 to 12 samples, short of the 60 s: the bursty engine
  // looks idle in them, and the first full window too.
  Samples(12, Verdict::kIdle);
  EXPECT_THAT(api_.writes, IsEmpty()) << "no patch, no Event";
  EXPECT_EQ(api_.Condition("m0", kFabricAttached), attached);
  EXPECT_EQ(api_.Condition("m0", kTransport), transport);
  // Rdma -> Idle keeps the status: a detail, written 5 minutes after the
  // agent first saw the Pod, with the lastTransitionTime it had.
  Samples(49, Verdict::kIdle);
  ASSERT_THAT(api_.writes, ElementsAre("PATCH /api/v1/namespaces/ml/pods/m0/status"));
  EXPECT_EQ(api_.Condition("m0", kTransport)["reason"], "Idle");
  EXPECT_EQ(api_.Condition("m0", kTransport)["lastTransitionTime"],
            transport["lastTransitionTime"]);
  EXPECT_EQ(api_.Condition("m0", kFabricAttached), attached);
}

TEST_F(RestartTest, AChangeAfterARestartIsWrittenOnceAWindowIsConclusive) {
  api_.pods["m0"] = HeldPod();
  StartAgent();
  // The engine fell back to TCP: the short windows say so, but only the
  // first full window (the 13th sample) may overrule the Rdma the API holds.
  Samples(12, Verdict::kTcp, /*fallback=*/true);
  EXPECT_THAT(api_.writes, IsEmpty());
  Samples(1, Verdict::kTcp, /*fallback=*/true);
  EXPECT_EQ(api_.Condition("m0", kTransport)["status"], "False");
  EXPECT_EQ(api_.Condition("m0", kTransport)["lastTransitionTime"], ApiTime(now_));
  EXPECT_THAT(api_.writes, ElementsAre("POST /apis/events.k8s.io/v1/namespaces/ml/events",
                                       "PATCH /api/v1/namespaces/ml/pods/m0/status"));
  EXPECT_EQ(api_.events.begin()->second["reason"], "FabricFallback");
}

// An Event of this node's agent, written before the restart.
json HeldEvent(const std::string& name, const std::string& reason, const std::string& note,
               absl::Time at, const std::string& node = "node-a") {
  return {{"apiVersion", "events.k8s.io/v1"},
          {"kind", "Event"},
          {"metadata", {{"name", name}, {"namespace", "ml"}}},
          {"eventTime", ApiMicroTime(at)},
          {"reportingController", kReportingController},
          {"reportingInstance", node},
          {"action", "Observe"},
          {"reason", reason},
          {"type", "Warning"},
          {"note", note},
          {"regarding", {{"kind", "Pod"}, {"namespace", "ml"}, {"name", "m0"}, {"uid", "u1"}}}};
}

TEST_F(RestartTest, ARepeatedEventCarriesOnTheSeriesAnEarlierAgentBegan) {
  api_.events["m0.a"] =
      HeldEvent("m0.a", "FabricNotAttached", "engine: note a", kT0 - absl::Minutes(2));
  api_.events["m0.b"] = HeldEvent("m0.b", "FabricNotAttached", "engine: note b",
                                  kT0 - absl::Minutes(10));  // past the 6 minute gap
  api_.events["m0.c"] = HeldEvent("m0.c", "FabricNotAttached", "engine: note c",
                                  kT0 - absl::Minutes(1), "node-b");  // another agent's
  StartAgent();
  const PodRef pod{"ml", "m0", "u1"};
  events_->Record(pod, {"FabricNotAttached", true, "engine: note a"});
  ASSERT_THAT(api_.writes, ElementsAre("PATCH /apis/events.k8s.io/v1/namespaces/ml/events/m0.a"));
  EXPECT_EQ(api_.events["m0.a"]["series"]["count"], 2);
  EXPECT_EQ(api_.events["m0.a"]["series"]["lastObservedTime"], ApiMicroTime(now_));
  EXPECT_THAT(api_.lists,
              ElementsAre("/apis/events.k8s.io/v1/namespaces/ml/events?regarding.uid=u1"));

  // A series past its gap, and another node's, are not carried on.
  for (const char* note : {"engine: note b", "engine: note c"}) {
    now_ += absl::Minutes(1);  // one write per Pod per reason per minute
    events_->Record(pod, {"FabricNotAttached", true, note});
  }
  EXPECT_THAT(api_.writes, ElementsAre("PATCH /apis/events.k8s.io/v1/namespaces/ml/events/m0.a",
                                       "POST /apis/events.k8s.io/v1/namespaces/ml/events",
                                       "POST /apis/events.k8s.io/v1/namespaces/ml/events"));
  EXPECT_EQ(api_.lists.size(), 1u) << "the Pod's Events are listed once";
}

TEST_F(RestartTest, AnOccurrenceWithAnotherNoteIsAnEventOfItsOwn) {
  StartAgent();
  const PodRef pod{"ml", "m0", "u1"};
  events_->Record(pod, {"FabricFallback", true, "engine: tcp; 9.1 MiB"});
  now_ += absl::Minutes(2);
  events_->Record(pod, {"FabricFallback", true, "engine: tcp; 3.0 MiB"});
  now_ += absl::Minutes(2);
  events_->Record(pod, {"FabricFallback", true, "engine: tcp; 9.1 MiB"});
  ASSERT_EQ(api_.events.size(), 2u);
  std::map<std::string, int> count_by_note;
  for (const auto& [name, e] : api_.events) {
    count_by_note[e["note"].get<std::string>()] =
        e.contains("series") ? e["series"]["count"].get<int>() : 1;
  }
  EXPECT_EQ(count_by_note["engine: tcp; 9.1 MiB"], 2);
  EXPECT_EQ(count_by_note["engine: tcp; 3.0 MiB"], 1);
}

}  // namespace
}  // namespace fabric::podconditions
