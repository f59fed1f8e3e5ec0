// --pod-conditions and the TLS /v1/pods end to end in one process: the
// kubelet simulator grants rxe devices, the sampler reads fake sysfs
// counters, a fake RDMA netlink source and a fake /proc tree; the agent
// writes the Pods' conditions and Events into tools/fake-apiserver (the real
// wire: HTTPS, strategic-merge patches, the agent's RBAC and own-node policy)
// and serves /v1/pods over TLS after a TokenReview and SubjectAccessReview.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/daemon/agent.h"
#include "agent/http/get.h"
#include "agent/kubeapi/http_kube_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "test/fakes/fake_proc_tree.h"
#include "test/fakes/fake_resource_source.h"
#include "test/integration/integration_util.h"
#include "test/testing/fake_apiserver_process.h"
#include "test/testing/fake_sysfs.h"
#include "test/testing/status_matchers.h"
#include "tools/kubelet-sim/kubelet_sim.h"

namespace fabric::integration {
namespace {

using ::fabric::testing::FakeSysfs;
using ::fabric::testing::TempDir;
using json = nlohmann::json;
using podprocs::testing::CgroupStyle;
using podprocs::testing::FakeContainer;
using podprocs::testing::FakeProcTree;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1024 * 1024;

json ApiPod(const std::string& uid, const std::string& container_id) {
  const std::string started =
      absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now() - absl::Minutes(2), absl::UTCTimeZone());
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", uid}, {"namespace", "default"}, {"uid", uid}}},
          {"spec",
           {{"nodeName", "node-a"},
            {"readinessGates", {{{"conditionType", "fabric.gpustack.ai/FabricAttached"}}}},
            {"containers", {{{"name", "c"}}}}}},
          {"status",
           {{"phase", "Running"},
            {"conditions", {{{"type", "Ready"}, {"status", "False"}}}},
            {"containerStatuses",
             {{{"name", "c"},
               {"containerID", "containerd://" + container_id},
               {"restartCount", 0},
               {"state", {{"running", {{"startedAt", started}}}}}}}}}}};
}

json ConditionOf(const json& pod, const std::string& type) {
  if (!pod.is_object() || !pod.contains("status")) return nullptr;
  for (const json& c : pod["status"]["conditions"]) {
    if (c["type"] == type) return c;
  }
  return nullptr;
}

std::string ReasonOf(const json& pod, const std::string& type) {
  const json c = ConditionOf(pod, type);
  return c.is_object() ? c.value("reason", "") : "";
}

// Where the API server comes from: tools/fake-apiserver by default, or a real
// kube-apiserver when FABRIC_TEST_KUBE_API names one (with FABRIC_TEST_KUBE_CA
// and the tokens FABRIC_TEST_KUBE_{ADMIN,AGENT,MEMBER}_TOKEN; the agent's and
// the member's RBAC as the chart binds them: test/realkubelet sets that up).
struct ApiUnderTest {
  std::string url, ca, admin, agent, member;
  bool real = false;
};

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

class PodConditionsIntegrationTest : public ::testing::Test {
 protected:
  // The API server (real, or the fake started here) and an admin client.
  void SetUp() override {
    if (!Env("FABRIC_TEST_KUBE_API").empty()) {
      api_ = {Env("FABRIC_TEST_KUBE_API"),          Env("FABRIC_TEST_KUBE_CA"),
              Env("FABRIC_TEST_KUBE_ADMIN_TOKEN"),  Env("FABRIC_TEST_KUBE_AGENT_TOKEN"),
              Env("FABRIC_TEST_KUBE_MEMBER_TOKEN"), true};
      std::printf("against the real API server %s\n", api_.url.c_str());
    } else {
      if (!testing::FakeApiServerAvailable()) GTEST_SKIP() << "python3 or openssl is missing";
      ASSERT_TRUE(testing::MakeCertificate(d_, "server"));
      std::ofstream(d_ + "/tokens.json") << json{
          {"tokens",
           {{"admin", {{"user", "admin"}, {"role", "admin"}}},
            {"agent-a",
             {{"user", "system:serviceaccount:fabric-system:fabric-device-plugin"},
              {"role", "agent"},
              {"nodeName", "node-a"}}},
            {"member",  // a projected token for the agent's audience
             {{"user", "system:serviceaccount:default:member"},
              {"role", "none"},
              {"audiences", {podsapi::kDefaultPodsTokenAudience}},
              {"allow",
               {{{"resource", "pods"}, {"verbs", {"get"}}, {"namespaces", {"default"}}}}}}}}}};
      fake_ = std::make_unique<testing::FakeApiServer>(d_, std::vector<std::string>{});
      ASSERT_TRUE(fake_->Start());
      api_ = {fake_->url(), d_ + "/server.crt", "admin", "agent-a", "member", false};
    }
    ASSERT_TRUE(testing::MakeCertificate(d_, "agent"));
    std::ofstream(d_ + "/agent-token") << api_.agent;
    std::ofstream(d_ + "/admin-token") << api_.admin;
    kubeapi::KubeConfig c;
    c.server = api_.url;
    c.ca_file = api_.ca;
    c.token_file = d_ + "/admin-token";
    auto admin = kubeapi::HttpKubeClient::Create(c);
    ASSERT_OK(admin);
    admin_ = *std::move(admin);
  }
  // The agent in process, with observation, Pod conditions (a 1 s grace) and
  // the TLS /v1/pods, against the API server under test.
  AgentOptions Options(const HostPaths& paths, const std::string& proc_root,
                       const std::string& runtime_dir) {
    AgentOptions o;
    o.paths = paths;
    o.paths.kubelet_root = d_ + "/kubelet";
    o.paths.proc_root = proc_root;
    o.registration = RegistrationMode::kKubelet;
    o.metrics_address = "127.0.0.1:0";
    o.sample_period = absl::Milliseconds(200);
    o.podresources_interval = absl::Milliseconds(200);
    o.observe = true;
    o.runtime_state_dirs = {"containerd=" + runtime_dir};
    o.pod_conditions = true;
    o.node_name = "node-a";
    o.kube.server = api_.url;
    o.kube.ca_file = api_.ca;
    o.kube.token_file = d_ + "/agent-token";
    o.conditions.attach_grace = absl::Seconds(1);
    o.pods_tls_address = "127.0.0.1:0";
    o.pods_tls_cert_file = d_ + "/agent.crt";
    o.pods_tls_key_file = d_ + "/agent.key";
    return o;
  }

  void TearDown() override {
    if (!api_.real || !Env("FABRIC_TEST_KEEP_PODS").empty()) return;
    for (const std::string& n : created_) {
      (void)admin_->Delete("/api/v1/namespaces/default/pods/" + n, {});
    }
  }

  // A Pod on node-a, created as a user would, its status written as the
  // kubelet would (no kubelet runs here): a running container "c". Its UID.
  std::string CreatePod(const std::string& name, const std::string& container_id) {
    json pod = ApiPod(name, container_id);
    pod["metadata"].erase("uid");
    pod["spec"]["containers"][0]["image"] = "busybox";
    const json status = pod["status"];
    pod.erase("status");
    auto created = admin_->Create("/api/v1/namespaces/default/pods", pod);
    EXPECT_OK(created);
    if (!created.ok()) return "";
    created_.push_back(name);
    auto patched = admin_->Patch("/api/v1/namespaces/default/pods/" + name + "/status",
                                 {{"status", status}}, kubeapi::PatchType::kStrategicMerge);
    EXPECT_OK(patched);
    return (*created)["metadata"]["uid"].get<std::string>();
  }

  TempDir dir_;
  const std::string d_ = dir_.path();
  ApiUnderTest api_;
  std::unique_ptr<testing::FakeApiServer> fake_;
  std::unique_ptr<kubeapi::KubeClient> admin_;
  std::vector<std::string> created_;
};

TEST_F(PodConditionsIntegrationTest, ConditionsEventsAndTlsPodsFromTheVerdicts) {
  const std::string& d = d_;
  kubeapi::KubeClient& admin = *admin_;
  const ApiUnderTest& api_info = api_;
  const std::string suffix = std::to_string(::getpid());
  const std::string cid_a = FakeProcTree::ContainerId(1), cid_b = FakeProcTree::ContainerId(2);
  const std::string name_a = "c-active-" + suffix, name_b = "c-fallback-" + suffix;
  const std::string active = CreatePod(name_a, cid_a), fallback = CreatePod(name_b, cid_b);
  ASSERT_FALSE(active.empty());
  ASSERT_FALSE(fallback.empty());

  FakeSysfs sysfs(d + "/node");
  sysfs.AddRxe("rxe0", "eth0");
  sysfs.AddRxe("rxe1", "eth1");
  for (const char* dev : {"rxe0", "rxe1"}) {
    sysfs.SetCounter(dev, 1, "sent_pkts", 0);
    sysfs.SetCounter(dev, 1, "rcvd_pkts", 0);
  }
  sim::KubeletSimOptions ko;
  ko.serve_podresources = true;
  sim::KubeletSim kubelet(d + "/kubelet", ko);
  ASSERT_OK(kubelet.Start());
  FakeProcTree proc(d + "/proc");
  const std::string runtime_dir = d + "/containerd/k8s.io";
  const FakeContainer a{active, cid_a, "containerd"};
  const FakeContainer b{fallback, cid_b, "containerd"};
  proc.AddPodProcess(4001, a, CgroupStyle::kSystemdV2, /*netns_id=*/1);
  proc.AddPodProcess(4002, b, CgroupStyle::kCgroupfsV1, /*netns_id=*/2);
  FakeProcTree::AddContainerdConfig(runtime_dir, a.container_id, "default", active, active, "c");
  FakeProcTree::AddContainerdConfig(runtime_dir, b.container_id, "default", fallback, fallback,
                                    "c");
  restrack::FakeResourceSource resources;

  AgentOptions o = Options(sysfs.paths(), proc.proc_root(), runtime_dir);
  o.resource_source = &resources;
  Agent agent(o);
  ASSERT_OK(agent.Start());
  ASSERT_TRUE(kubelet.WaitFor([&] { return agent.plugins().AllRegistered(); }, absl::Seconds(20)));
  std::vector<std::string> ids_a, ids_b;
  ASSERT_OK(kubelet.Allocate(kRdma, 1, active, "c", &ids_a));
  ASSERT_OK(kubelet.Allocate(kRdma, 1, fallback, "c", &ids_b));
  resources.Set({restrack::Qp(ids_a[0], 17, 4001), restrack::Cq(ids_a[0], 3, 4001)});

  json pod_a, pod_b;
  auto done = [&] {
    return ReasonOf(pod_a, "fabric.gpustack.ai/Transport") == "Rdma" &&
           ReasonOf(pod_b, "fabric.gpustack.ai/Transport") == "Tcp" &&
           ReasonOf(pod_b, "fabric.gpustack.ai/FabricAttached") == "NotAttached";
  };
  for (int i = 1; i <= 120 && !done(); ++i) {
    sysfs.SetCounter(ids_a[0], 1, "sent_pkts", 300u * i);
    sysfs.SetCounter(ids_a[0], 1, "rcvd_pkts", 300u * i);
    proc.SetNetBytes(4002, 0, 2 * kMiB * i);
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    pod_a = admin.Get("/api/v1/namespaces/default/pods/" + name_a).value_or(json());
    pod_b = admin.Get("/api/v1/namespaces/default/pods/" + name_b).value_or(json());
  }
  ASSERT_TRUE(done()) << pod_a.dump(2) << pod_b.dump(2);
  const json attached_a = ConditionOf(pod_a, "fabric.gpustack.ai/FabricAttached");
  EXPECT_EQ(attached_a["status"], "True");
  EXPECT_EQ(attached_a["message"], "c: 1 QP on " + ids_a[0]);
  EXPECT_EQ(ConditionOf(pod_a, "fabric.gpustack.ai/Transport")["status"], "True");
  EXPECT_EQ(ConditionOf(pod_a, "Ready")["status"], "False");  // the kubelet's, untouched
  const json attached_b = ConditionOf(pod_b, "fabric.gpustack.ai/FabricAttached");
  EXPECT_EQ(attached_b["status"], "False");
  EXPECT_THAT(attached_b["message"].get<std::string>(),
              HasSubstr("never opened a granted device (" + ids_b[0] + ")"));
  const json transport_b = ConditionOf(pod_b, "fabric.gpustack.ai/Transport");
  EXPECT_EQ(transport_b["status"], "False");
  EXPECT_THAT(transport_b["message"].get<std::string>(), HasSubstr("(fallback)"));

  // The kubelet's own status write (its conditions, its shape) keeps ours.
  json kubelet_patch;  // the kubelet's shape: its conditions, with their order
  kubelet_patch["status"]["$setElementOrder/conditions"] = json::array({{{"type", "Ready"}}});
  kubelet_patch["status"]["conditions"] = json::array({{{"type", "Ready"}, {"status", "True"}}});
  auto kubelet_write = admin.Patch("/api/v1/namespaces/default/pods/" + name_a + "/status",
                                   kubelet_patch, kubeapi::PatchType::kStrategicMerge);
  ASSERT_OK(kubelet_write);
  EXPECT_EQ(ConditionOf(*kubelet_write, "fabric.gpustack.ai/FabricAttached"), attached_a);
  EXPECT_EQ(ConditionOf(*kubelet_write, "Ready")["status"], "True");
  std::printf("%s: %s\n%s: %s\n", name_a.c_str(),
              (*kubelet_write)["status"]["conditions"].dump(1).c_str(), name_b.c_str(),
              pod_b["status"]["conditions"].dump(1).c_str());

  auto events = admin.List("/apis/events.k8s.io/v1/namespaces/default/events", {});
  ASSERT_OK(events);
  std::set<std::string> seen;
  for (const json& e : events->items) {
    seen.insert(e["regarding"]["uid"].get<std::string>() + " " + e["reason"].get<std::string>());
  }
  EXPECT_TRUE(seen.count(active + " FabricAttached")) << events->items.size();
  EXPECT_TRUE(seen.count(fallback + " FabricNotAttached"));
  EXPECT_TRUE(seen.count(fallback + " FabricFallback"));

  // /v1/pods over TLS: the member's token may get Pods in its namespace only.
  HttpsOptions h;
  h.ca_file = d + "/agent.crt";
  h.bearer_token = api_info.member;
  const std::string tls = "https://127.0.0.1:" + std::to_string(agent.pods_tls_port());
  // The document is named as the kubelet names the Pod (here its UID: the
  // simulator's PodResources names Pods by the name it was given).
  auto mine = HttpsGet(tls, "/v1/pods/default/" + active, h);
  ASSERT_OK(mine);
  EXPECT_EQ(mine->status, 200);
  EXPECT_EQ(json::parse(mine->body)["containers"][0]["verdict"], "rdma");
  auto all = HttpsGet(tls, "/v1/pods", h);
  ASSERT_OK(all);
  EXPECT_EQ(all->status, 403);  // list needs list pods at the cluster scope
  h.bearer_token = "";
  EXPECT_EQ(HttpsGet(tls, "/v1/pods/default/" + active, h)->status, 401);
  agent.Stop();
}

}  // namespace
}  // namespace fabric::integration
