// The observation path end to end in one process: the kubelet simulator
// grants rxe devices, the agent's sampler reads the fake sysfs counters, a
// fake RDMA netlink source and a fake /proc tree (with containerd's records),
// and GET /v1/pods and /metrics carry the verdicts.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "agent/daemon/agent.h"
#include "agent/http/get.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "test/fakes/fake_proc_tree.h"
#include "test/fakes/fake_resource_source.h"
#include "test/integration/integration_util.h"
#include "test/testing/fake_sysfs.h"
#include "test/testing/status_matchers.h"
#include "tools/kubelet-sim/kubelet_sim.h"

namespace fabric::integration {
namespace {

using ::fabric::testing::FakeSysfs;
using ::fabric::testing::TempDir;
using podprocs::testing::CgroupStyle;
using podprocs::testing::FakeContainer;
using podprocs::testing::FakeProcTree;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t kMiB = 1024 * 1024;

nlohmann::json GetJson(int port, const std::string& path, int* status) {
  auto r = HttpGet("127.0.0.1:" + std::to_string(port), path);
  if (!r.ok()) {
    *status = -1;
    return nullptr;
  }
  *status = r->status;
  return nlohmann::json::parse(r->body, nullptr, false);
}

std::string VerdictOf(const nlohmann::json& doc) {
  if (!doc.is_object() || !doc.contains("containers") || doc["containers"].empty()) return "";
  return doc["containers"][0].value("verdict", "");
}

TEST(ObserveIntegrationTest, GrantedPodsGetRdmaAndTcpFallbackVerdicts) {
  TempDir dir;
  FakeSysfs sysfs(dir.path() + "/node");
  sysfs.AddRxe("rxe0", "eth0");
  sysfs.AddRxe("rxe1", "eth1");
  for (const char* dev : {"rxe0", "rxe1"}) {
    sysfs.SetCounter(dev, 1, "sent_pkts", 0);
    sysfs.SetCounter(dev, 1, "rcvd_pkts", 0);
  }
  sim::KubeletSimOptions ko;
  ko.serve_podresources = true;
  sim::KubeletSim kubelet(dir.path() + "/kubelet", ko);
  ASSERT_OK(kubelet.Start());

  // Two Pods, named by their UIDs (the simulator uses the name as the UID).
  const std::string active = FakeProcTree::PodUid(1), fallback = FakeProcTree::PodUid(2);
  FakeProcTree proc(dir.path() + "/proc");
  const std::string runtime_dir = dir.path() + "/containerd/k8s.io";
  const FakeContainer a{active, FakeProcTree::ContainerId(1), "containerd"};
  const FakeContainer b{fallback, FakeProcTree::ContainerId(2), "containerd"};
  proc.AddPodProcess(4001, a, CgroupStyle::kSystemdV2, /*netns_id=*/1);
  proc.AddPodProcess(4002, b, CgroupStyle::kCgroupfsV1, /*netns_id=*/2);
  FakeProcTree::AddContainerdConfig(runtime_dir, a.container_id, "default", active, active, "c");
  FakeProcTree::AddContainerdConfig(runtime_dir, b.container_id, "default", fallback, fallback,
                                    "c");
  restrack::FakeResourceSource resources;

  AgentOptions o;
  o.paths = sysfs.paths();
  o.paths.kubelet_root = dir.path() + "/kubelet";
  o.paths.proc_root = proc.proc_root();
  o.registration = RegistrationMode::kKubelet;
  o.metrics_address = "127.0.0.1:0";
  o.sample_period = absl::Milliseconds(200);
  o.podresources_interval = absl::Milliseconds(200);
  o.observe = true;
  o.runtime_state_dirs = {"containerd=" + runtime_dir};
  o.resource_source = &resources;
  Agent agent(o);
  ASSERT_OK(agent.Start());
  ASSERT_TRUE(kubelet.WaitFor([&] { return agent.plugins().AllRegistered(); }, absl::Seconds(20)));
  std::vector<std::string> ids_a, ids_b;
  ASSERT_OK(kubelet.Allocate(kRdma, 1, active, "c", &ids_a));
  ASSERT_OK(kubelet.Allocate(kRdma, 1, fallback, "c", &ids_b));
  ASSERT_EQ(ids_a.size(), 1u);
  ASSERT_EQ(ids_b.size(), 1u);
  const std::string dev_a = ids_a[0], dev_b = ids_b[0];
  // The active Pod owns a QP and a CQ on its device; the other owns nothing.
  resources.Set({restrack::Qp(dev_a, 17, 4001), restrack::Cq(dev_a, 3, 4001)});

  const int port = agent.metrics_port();
  std::string verdict_a, verdict_b;
  nlohmann::json doc_a, doc_b;
  for (int i = 1; i <= 60 && (verdict_a != "rdma" || verdict_b != "tcp"); ++i) {
    sysfs.SetCounter(dev_a, 1, "sent_pkts", 300u * i);
    sysfs.SetCounter(dev_a, 1, "rcvd_pkts", 300u * i);
    proc.SetNetBytes(4002, 0, 2 * kMiB * i);  // b moves its bytes over TCP
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    int status = 0;
    doc_a = GetJson(port, "/v1/pods/default/" + active + "?window=15s", &status);
    verdict_a = status == 200 ? VerdictOf(doc_a) : "";
    doc_b = GetJson(port, "/v1/pods/default/" + fallback + "?window=15s", &status);
    verdict_b = status == 200 ? VerdictOf(doc_b) : "";
  }
  ASSERT_EQ(verdict_a, "rdma") << doc_a.dump(2);
  ASSERT_EQ(verdict_b, "tcp") << doc_b.dump(2);
  const nlohmann::json& ca = doc_a["containers"][0];
  EXPECT_EQ(ca["name"], "c");
  EXPECT_EQ(ca["attribution"], "exclusive");
  ASSERT_EQ(ca["devices"].size(), 1u);
  EXPECT_EQ(ca["devices"][0]["device"], dev_a);
  EXPECT_EQ(ca["devices"][0]["owned"]["qp"], 1);
  EXPECT_EQ(ca["devices"][0]["owned"]["cq"], 1);
  EXPECT_TRUE(ca["fabric_bytes"].is_null()) << "rxe counts packets, not bytes";
  const nlohmann::json& cb = doc_b["containers"][0];
  EXPECT_EQ(cb["fallback"], true);
  EXPECT_GE(cb["other_bytes"].get<uint64_t>(), kMiB);

  // The list and the gauges show both.
  int status = 0;
  nlohmann::json list = GetJson(port, "/v1/pods", &status);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(list["items"].size(), 2u) << list.dump(2);
  auto metrics = HttpGet("127.0.0.1:" + std::to_string(port), "/metrics");
  ASSERT_OK(metrics);
  EXPECT_THAT(metrics->body,
              HasSubstr("fabric_pod_transport_fallback{namespace=\"default\",pod=\"" + fallback +
                        "\",container=\"c\"} 1"));
  EXPECT_THAT(metrics->body, HasSubstr("fabric_pod_transport{namespace=\"default\",pod=\"" +
                                       active + "\",container=\"c\",observed="));
  // A Pod nobody knows is a 404 naming it; a bad window a 400.
  GetJson(port, "/v1/pods/default/nobody", &status);
  EXPECT_EQ(status, 404);
  GetJson(port, "/v1/pods?window=5s", &status);
  EXPECT_EQ(status, 400);
  agent.Stop();
}

// Without --observe the verdicts are there and say why they cannot be given.
TEST(ObserveIntegrationTest, WithoutObserveAGrantIsUnknownSayingWhy) {
  TempDir dir;
  FakeSysfs sysfs(dir.path() + "/node");
  sysfs.AddRxe("rxe0", "eth0");
  sim::KubeletSimOptions ko;
  ko.serve_podresources = true;
  sim::KubeletSim kubelet(dir.path() + "/kubelet", ko);
  ASSERT_OK(kubelet.Start());
  AgentOptions o;
  o.paths = sysfs.paths();
  o.paths.kubelet_root = dir.path() + "/kubelet";
  o.registration = RegistrationMode::kKubelet;
  o.metrics_address = "127.0.0.1:0";
  o.sample_period = absl::Milliseconds(200);
  o.podresources_interval = absl::Milliseconds(200);
  Agent agent(o);
  ASSERT_OK(agent.Start());
  ASSERT_TRUE(kubelet.WaitFor([&] { return agent.plugins().AllRegistered(); }, absl::Seconds(20)));
  ASSERT_OK(kubelet.Allocate(kRdma, 1, "member-0", "c"));
  nlohmann::json doc;
  int status = 0;
  for (int i = 0; i < 40 && VerdictOf(doc).empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    doc = GetJson(agent.metrics_port(), "/v1/pods/default/member-0", &status);
  }
  ASSERT_EQ(VerdictOf(doc), "unknown") << doc.dump(2);
  EXPECT_THAT(doc["containers"][0]["reason"].get<std::string>(), HasSubstr("--observe"));
  agent.Stop();
}

}  // namespace
}  // namespace fabric::integration
