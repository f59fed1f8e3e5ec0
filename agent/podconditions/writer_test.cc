// The writer, the Pod watch and the Event recorder against tools/fake-apiserver
// over HTTPS (the real wire: strategic-merge patches, the UID precondition,
// events.k8s.io/v1 validation, the agent's RBAC and own-node policy). Time is
// a fake clock moved one 5 s sample at a time, so an hour of steady state
// takes a second; every API write is counted from the server's request log.
#include "agent/podconditions/writer.h"

#include <chrono>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/kubeapi/http_kube_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/fake_apiserver_process.h"
#include "test/testing/test_dirs.h"

namespace fabric::podconditions {
namespace {

using json = nlohmann::json;
using observe::Verdict;
using ::testing::HasSubstr;

constexpr absl::Duration kPeriod = absl::Seconds(5);
const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

class WriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::FakeApiServerAvailable()) GTEST_SKIP() << "python3 or openssl is missing";
    const std::string d = dir_.path();
    ASSERT_TRUE(testing::MakeCertificate(d, "server"));
    std::ofstream(d + "/tokens.json") << json{{"tokens",
                                               {{"admin", {{"user", "admin"}, {"role", "admin"}}},
                                                {"agent-a",
                                                 {{"user", "system:serviceaccount:fabric:agent"},
                                                  {"role", "agent"},
                                                  {"nodeName", "node-a"}}},
                                                {"agent-b",
                                                 {{"user", "system:serviceaccount:fabric:agent"},
                                                  {"role", "agent"},
                                                  {"nodeName", "node-b"}}}}}};
    server_ = std::make_unique<testing::FakeApiServer>(d, std::vector<std::string>{});
    ASSERT_TRUE(server_->Start());
    uid_ = InjectPod("m0", "node-a");
  }

  // A running Pod with one container, started at kT0.
  std::string InjectPod(const std::string& name, const std::string& node) {
    json pod = {{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata", {{"name", name}, {"namespace", "ml"}}},
                {"spec", {{"nodeName", node}, {"containers", {{{"name", "engine"}}}}}},
                {"status",
                 {{"phase", "Running"},
                  {"conditions", {{{"type", "Ready"}, {"status", "True"}}}},
                  {"containerStatuses",
                   {{{"name", "engine"},
                     {"containerID", "containerd://c1"},
                     {"restartCount", 0},
                     {"state", {{"running", {{"startedAt", ApiTime(kT0)}}}}}}}}}}};
    auto [code, out] = server_->Control("POST", "/fake/objects", pod);
    EXPECT_EQ(code, 201) << out.dump();
    return out["metadata"]["uid"].get<std::string>();
  }

  std::unique_ptr<kubeapi::KubeClient> Client(const std::string& token) {
    std::ofstream(dir_.path() + "/" + token) << token;
    kubeapi::KubeConfig c;
    c.server = server_->url();
    c.ca_file = dir_.path() + "/server.crt";
    c.token_file = dir_.path() + "/" + token;
    auto client = kubeapi::HttpKubeClient::Create(c);
    EXPECT_TRUE(client.ok()) << client.status();
    return *std::move(client);
  }

  // Starts the watch, the recorder and the writer with the agent's token.
  void StartAgent(const std::string& token = "agent-a") {
    client_ = Client(token);
    kubeapi::WatchOptions wo;
    wo.initial_backoff = absl::Milliseconds(100);
    pods_ = std::make_unique<NodePods>(client_.get(), "node-a", wo);
    pods_->Start();
    for (int i = 0; i < 200 && !pods_->synced(); ++i) absl::SleepFor(absl::Milliseconds(20));
    ASSERT_TRUE(pods_->synced());
    EventRecorderOptions eo;
    eo.node = "node-a";
    eo.now = [this] { return now_; };
    events_ = std::make_unique<EventRecorder>(client_.get(), eo);
    WriterOptions o;
    o.now = [this] { return now_; };
    writer_ = std::make_unique<ConditionWriter>(client_.get(), pods_.get(), events_.get(), o);
  }
  void TearDown() override {
    if (pods_) pods_->Stop();
  }

  // The window for m0: its engine container with `qp` QPs on rxe0, the
  // verdict, and evidence whose amounts change every sample.
  observe::WindowResult Window(Verdict v, uint32_t qp, bool fallback = false) {
    observe::WindowResult r;
    observe::PodObservation p;
    p.ns = "ml";
    p.pod = "m0";
    p.pod_uid = uid_;
    observe::ContainerObservation c;
    c.name = "engine";
    c.granted = true;
    c.verdict = v;
    c.fallback = fallback;
    if (qp) c.container_ids = {"c1"};
    observe::DeviceObservation d;
    d.device = "rxe0";
    d.granted = true;
    d.owned.qp = d.owned.qp_active = qp;
    d.owned.pd = qp ? 1 : 0;
    d.attribution = observe::Attribution::kSoleOwner;
    c.devices.push_back(d);
    c.evidence = {absl::StrCat("rxe0 moved ", ++sample_, ",000 packets in 60.0 s")};
    p.containers.push_back(c);
    r.pods.push_back(p);
    r.window.requested = absl::Seconds(60);
    r.window.samples = 13;  // a full window: the agent has run for a minute
    return r;
  }

  // Ticks `n` samples of `window`, each 5 s after the last.
  void Run(int n, const std::function<observe::WindowResult()>& window) {
    for (int i = 0; i < n; ++i) {
      now_ += kPeriod;
      writer_->Tick(window());
    }
  }
  // API writes (PATCH/POST/PUT/DELETE) the agent made, from the server's log.
  int Writes(const std::string& path_part = "") {
    int n = 0;
    for (const json& r : server_->Log()) {
      if (r["user"] != "system:serviceaccount:fabric:agent" || r["method"] == "GET") continue;
      if (absl::StrContains(r["path"].get<std::string>(), path_part)) ++n;
    }
    return n;
  }
  json Pod(const std::string& name = "m0") {
    auto client = Client("admin");
    auto p = client->Get("/api/v1/namespaces/ml/pods/" + name);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *p : json();
  }
  static json ConditionOf(const json& pod, const std::string& type) {
    for (const json& c : pod["status"]["conditions"]) {
      if (c["type"] == type) return c;
    }
    return nullptr;
  }

  testing::TempDir dir_{"pcw"};
  std::unique_ptr<testing::FakeApiServer> server_;
  std::string uid_;
  absl::Time now_ = kT0 + absl::Seconds(10);
  int sample_ = 0;
  std::unique_ptr<kubeapi::KubeClient> client_;
  std::unique_ptr<NodePods> pods_;
  std::unique_ptr<EventRecorder> events_;
  std::unique_ptr<ConditionWriter> writer_;
};

TEST_F(WriterTest, SteadyStateWritesPerPodPerHour) {
  StartAgent();
  Run(1, [&] { return Window(Verdict::kRdma, 2); });
  json pod = Pod();
  EXPECT_EQ(ConditionOf(pod, kFabricAttached)["status"], "True");
  EXPECT_EQ(ConditionOf(pod, kFabricAttached)["message"], "engine: 2 QP on rxe0");
  EXPECT_EQ(ConditionOf(pod, kTransport)["reason"], "Rdma");
  EXPECT_EQ(ConditionOf(pod, "Ready")["status"], "True");  // the kubelet's, untouched
  const int start = Writes();
  EXPECT_EQ(start, 2);  // one patch, one FabricAttached event

  // An hour of steady traffic (720 samples, amounts moving every sample).
  Run(720, [&] { return Window(Verdict::kRdma, 2); });
  const int steady = Writes() - start;
  // An hour that is bursty: a minute of traffic, a minute idle (the verdict's
  // reason flips between Rdma and Idle, the status stays True).
  int minute = 0;
  Run(720, [&] { return Window((minute++ / 12) % 2 ? Verdict::kIdle : Verdict::kRdma, 2); });
  const int bursty = Writes() - start - steady;
  std::printf(
      "API writes per Pod per hour: steady %d, bursty (1 min on / 1 min off) %d; baseline: a "
      "patch per sample = %d\n",
      steady, bursty, 720);
  EXPECT_EQ(steady, 0);
  EXPECT_LE(bursty, 12);  // at most one detail change per 5 min
  EXPECT_EQ(writer_->stats().patch_errors, 0u);
}

TEST_F(WriterTest, TheKubeletsStatusPatchesKeepTheConditions) {
  StartAgent();
  Run(1, [&] { return Window(Verdict::kRdma, 2); });
  auto kubelet = Client("admin");
  json kubelet_patch;  // the kubelet's shape: its conditions, with their order
  kubelet_patch["status"]["$setElementOrder/conditions"] = json::array({{{"type", "Ready"}}});
  kubelet_patch["status"]["conditions"] = json::array({{{"type", "Ready"}, {"status", "False"}}});
  for (int i = 0; i < 3; ++i) {
    auto r = kubelet->Patch("/api/v1/namespaces/ml/pods/m0/status", kubelet_patch,
                            kubeapi::PatchType::kStrategicMerge);
    ASSERT_TRUE(r.ok()) << r.status();
    Run(12, [&] { return Window(Verdict::kRdma, 2); });
  }
  json pod = Pod();
  EXPECT_EQ(ConditionOf(pod, kFabricAttached)["status"], "True");
  EXPECT_EQ(ConditionOf(pod, "Ready")["status"], "False");
  EXPECT_EQ(Writes("/pods/"), 1);  // nothing to rewrite: the kubelet kept them
}

TEST_F(WriterTest, NotAttachedAfterTheGraceAndAFallbackEventSeries) {
  StartAgent();
  Run(6, [&] { return Window(Verdict::kTcp, 0, true); });  // 30 s: within the grace
  EXPECT_EQ(ConditionOf(Pod(), kFabricAttached)["reason"], "AttachPending");
  Run(12, [&] { return Window(Verdict::kTcp, 0, true); });  // past 60 s
  json pod = Pod();
  json attached = ConditionOf(pod, kFabricAttached);
  EXPECT_EQ(attached["status"], "False");
  EXPECT_EQ(attached["reason"], "NotAttached");
  EXPECT_THAT(attached["message"].get<std::string>(), HasSubstr("never opened a granted device"));
  EXPECT_EQ(ConditionOf(pod, kTransport)["status"], "False");
  EXPECT_EQ(ConditionOf(pod, kTransport)["reason"], "Tcp");
  // Back to the fabric, then a fallback again 2 minutes later: one series.
  Run(12, [&] { return Window(Verdict::kRdma, 1); });
  Run(12, [&] { return Window(Verdict::kTcp, 1, true); });
  Run(24, [&] { return Window(Verdict::kTcp, 1, true); });
  auto admin = Client("admin");
  auto events = admin->List("/apis/events.k8s.io/v1/namespaces/ml/events", {});
  ASSERT_TRUE(events.ok()) << events.status();
  std::map<std::string, std::vector<json>> by_reason;
  for (const json& e : events->items) by_reason[e["reason"]].push_back(e);
  // Each fallback's note carries the amounts of its moment, so each is an
  // Event of its own (client-go keys a series by the note too).
  ASSERT_EQ(by_reason["FabricFallback"].size(), 2u) << events->items.size();
  for (const json& fb : by_reason["FabricFallback"]) {
    EXPECT_EQ(fb["type"], "Warning");
    EXPECT_EQ(fb["reportingController"], "fabric.gpustack.ai/agent");
    EXPECT_EQ(fb["reportingInstance"], "node-a");
    EXPECT_EQ(fb["regarding"]["uid"], uid_);
    EXPECT_FALSE(fb.contains("series"));
    EXPECT_THAT(fb["note"].get<std::string>(), HasSubstr("Evidence: rxe0 moved"));
  }
  EXPECT_NE(by_reason["FabricFallback"][0]["note"], by_reason["FabricFallback"][1]["note"]);
  EXPECT_EQ(by_reason["FabricNotAttached"].size(), 1u);
  EXPECT_EQ(by_reason["FabricAttached"].size(), 1u);  // the attach after the fallback
  EXPECT_EQ(Writes("/events"), 4);                    // 4 creates
}

// The Pod watch lists from the API server's watch cache (resourceVersion=0),
// as client-go's reflector does, not with a quorum read.
TEST_F(WriterTest, ThePodListAsksForResourceVersionZero) {
  StartAgent();
  int lists = 0;
  for (const json& r : server_->Log()) {
    if (r["method"] != "GET" || r["path"] != "/api/v1/pods" || r["query"].contains("watch")) {
      continue;
    }
    ++lists;
    EXPECT_EQ(r["query"].value("resourceVersion", ""), "0") << r.dump();
    EXPECT_EQ(r["query"].value("fieldSelector", ""), "spec.nodeName=node-a");
  }
  EXPECT_EQ(lists, 1);
}

TEST_F(WriterTest, BacksOffWhileTheApiServerFailsAndCatchesUp) {
  StartAgent();
  server_->Control("POST", "/fake/fail?path=/status&code=503&count=100");
  Run(60, [&] { return Window(Verdict::kRdma, 2); });  // 5 minutes of a failing server
  const int attempts = Writes("/status");
  // 1 s doubling to 60 s, one try per sample at most: 1,2,4,...,60 -> 9 tries in 300 s.
  EXPECT_GE(attempts, 6);
  EXPECT_LE(attempts, 12);
  EXPECT_GT(writer_->stats().skipped_backoff, 40u);
  server_->Control("DELETE", "/fake/fail");
  Run(13, [&] { return Window(Verdict::kRdma, 2); });
  EXPECT_EQ(ConditionOf(Pod(), kFabricAttached)["status"], "True");
}

TEST_F(WriterTest, APolicyRefusalWaitsInsteadOfRetryingEverySample) {
  StartAgent("agent-b");  // a token of another node: the own-node policy refuses
  Run(48, [&] { return Window(Verdict::kRdma, 2); });  // 4 minutes
  EXPECT_EQ(Writes("/status"), 1);
  EXPECT_EQ(ConditionOf(Pod(), kFabricAttached), nullptr);
  Run(13, [&] { return Window(Verdict::kRdma, 2); });  // past 5 minutes: one more try
  EXPECT_EQ(Writes("/status"), 2);
}

}  // namespace
}  // namespace fabric::podconditions
