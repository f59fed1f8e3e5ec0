// --pod-conditions and the TLS /v1/pods end to end in one process: the
// kubelet simulator grants rxe devices, the sampler reads fake sysfs
// counters, a fake RDMA netlink source and a fake /proc tree; the agent
// writes the Pods' conditions and Events into tools/fake-apiserver (the real
// wire: HTTPS, strategic-merge patches, the agent's RBAC and own-node policy)
// and serves /v1/pods over TLS after a TokenReview and SubjectAccessReview.
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/daemon/agent.h"
#include "agent/kubeapi/http_kube_client.h"
#include "agent/podprocs/fake_proc_tree.h"
#include "agent/podsapi/https_client.h"
#include "agent/restrack/fake_resource_source.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
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

TEST(PodConditionsIntegrationTest, ConditionsEventsAndTlsPodsFromTheVerdicts) {
  if (!testing::FakeApiServerAvailable()) GTEST_SKIP() << "python3 or openssl is missing";
  TempDir dir;
  const std::string d = dir.path();
  ASSERT_TRUE(testing::MakeCertificate(d, "server"));
  ASSERT_TRUE(testing::MakeCertificate(d, "agent"));
  std::ofstream(d + "/tokens.json") << json{
      {"tokens",
       {{"admin", {{"user", "admin"}, {"role", "admin"}}},
        {"agent-a",
         {{"user", "system:serviceaccount:fabric-system:fabric-device-plugin"},
          {"role", "agent"},
          {"nodeName", "node-a"}}},
        {"member",
         {{"user", "system:serviceaccount:default:member"},
          {"role", "none"},
          {"allow", {{{"resource", "pods"}, {"verbs", {"get"}}, {"namespaces", {"default"}}}}}}}}}};
  std::ofstream(d + "/agent-token") << "agent-a";
  testing::FakeApiServer api(d, {});
  ASSERT_TRUE(api.Start());

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
  const std::string active = FakeProcTree::PodUid(1), fallback = FakeProcTree::PodUid(2);
  FakeProcTree proc(d + "/proc");
  const std::string runtime_dir = d + "/containerd/k8s.io";
  const FakeContainer a{active, FakeProcTree::ContainerId(1), "containerd"};
  const FakeContainer b{fallback, FakeProcTree::ContainerId(2), "containerd"};
  proc.AddPodProcess(4001, a, CgroupStyle::kSystemdV2, /*netns_id=*/1);
  proc.AddPodProcess(4002, b, CgroupStyle::kCgroupfsV1, /*netns_id=*/2);
  FakeProcTree::AddContainerdConfig(runtime_dir, a.container_id, "default", active, active, "c");
  FakeProcTree::AddContainerdConfig(runtime_dir, b.container_id, "default", fallback, fallback,
                                    "c");
  ASSERT_EQ(api.Control("POST", "/fake/objects", ApiPod(active, a.container_id)).first, 201);
  ASSERT_EQ(api.Control("POST", "/fake/objects", ApiPod(fallback, b.container_id)).first, 201);
  restrack::FakeResourceSource resources;

  AgentOptions o;
  o.paths = sysfs.paths();
  o.paths.kubelet_root = d + "/kubelet";
  o.paths.proc_root = proc.proc_root();
  o.registration = RegistrationMode::kKubelet;
  o.metrics_address = "127.0.0.1:0";
  o.sample_period = absl::Milliseconds(200);
  o.podresources_interval = absl::Milliseconds(200);
  o.observe = true;
  o.runtime_state_dirs = {"containerd=" + runtime_dir};
  o.resource_source = &resources;
  o.pod_conditions = true;
  o.node_name = "node-a";
  o.kube.server = api.url();
  o.kube.ca_file = d + "/server.crt";
  o.kube.token_file = d + "/agent-token";
  o.conditions.attach_grace = absl::Seconds(1);
  o.pods_tls_address = "127.0.0.1:0";
  o.pods_tls_cert_file = d + "/agent.crt";
  o.pods_tls_key_file = d + "/agent.key";
  Agent agent(o);
  ASSERT_OK(agent.Start());
  ASSERT_TRUE(kubelet.WaitFor([&] { return agent.plugins().AllRegistered(); }, absl::Seconds(20)));
  std::vector<std::string> ids_a, ids_b;
  ASSERT_OK(kubelet.Allocate(kRdma, 1, active, "c", &ids_a));
  ASSERT_OK(kubelet.Allocate(kRdma, 1, fallback, "c", &ids_b));
  resources.Set({restrack::Qp(ids_a[0], 17, 4001), restrack::Cq(ids_a[0], 3, 4001)});

  std::ofstream(d + "/admin-token") << "admin";
  kubeapi::KubeConfig admin_config = o.kube;
  admin_config.token_file = d + "/admin-token";
  auto admin = kubeapi::HttpKubeClient::Create(admin_config);
  ASSERT_OK(admin);
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
    pod_a = (*admin)->Get("/api/v1/namespaces/default/pods/" + active).value_or(json());
    pod_b = (*admin)->Get("/api/v1/namespaces/default/pods/" + fallback).value_or(json());
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

  auto events = (*admin)->List("/apis/events.k8s.io/v1/namespaces/default/events", {});
  ASSERT_OK(events);
  std::set<std::string> seen;
  for (const json& e : events->items) {
    seen.insert(e["regarding"]["name"].get<std::string>() + " " + e["reason"].get<std::string>());
  }
  EXPECT_TRUE(seen.count(active + " FabricAttached")) << events->items.size();
  EXPECT_TRUE(seen.count(fallback + " FabricNotAttached"));
  EXPECT_TRUE(seen.count(fallback + " FabricFallback"));

  // /v1/pods over TLS: the member's token may get Pods in its namespace only.
  podsapi::HttpsOptions h;
  h.ca_file = d + "/agent.crt";
  h.bearer_token = "member";
  const std::string tls = "https://127.0.0.1:" + std::to_string(agent.pods_tls_port());
  auto mine = podsapi::HttpsGet(tls, "/v1/pods/default/" + active, h);
  ASSERT_OK(mine);
  EXPECT_EQ(mine->status, 200);
  EXPECT_EQ(json::parse(mine->body)["containers"][0]["verdict"], "rdma");
  auto all = podsapi::HttpsGet(tls, "/v1/pods", h);
  ASSERT_OK(all);
  EXPECT_EQ(all->status, 403);  // list needs list pods at the cluster scope
  h.bearer_token = "";
  EXPECT_EQ(podsapi::HttpsGet(tls, "/v1/pods/default/" + active, h)->status, 401);
  agent.Stop();
}

}  // namespace
}  // namespace fabric::integration
