// The pools' correctness end to end: the agent served to the kubelet
// simulator, PodResources from the fake server, CDI specs on disk.
//  - Exclusive and shared never both granted, even back to back (issue 11/3).
//  - PodResources changes detected by content; CDI specs of removed pools
//    deleted; an EFA CDI device carries no rdma_cm (issue 11/7).
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>

#include "agent/base/file_util.h"
#include "agent/daemon/agent.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "test/fakes/fake_podresources_server.h"
#include "test/integration/integration_util.h"
#include "test/testing/fake_sysfs.h"
#include "test/testing/status_matchers.h"
#include "tools/kubelet-sim/kubelet_sim.h"

namespace fabric {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

using integration::AllRegistered;
using integration::kEfa;
using integration::kRdma;
using integration::kShared;
using integration::SampleNodeOptions;
using testing::TempDir;

class PoolsIntegrationTest : public ::testing::Test {
 protected:
  AgentOptions Options(const std::string& node) {
    AgentOptions o = SampleNodeOptions(node, dir_.path());
    o.paths.cdi_dir = dir_.path() + "/cdi";
    o.paths.state_dir = dir_.path() + "/state";
    o.podresources_interval = absl::Milliseconds(200);
    return o;
  }
  void Start(AgentOptions o, size_t pools, std::vector<podresources::FakePod> pods = {}) {
    ASSERT_OK(kubelet_.Start());
    ASSERT_EQ(::mkdir((dir_.path() + "/pod-resources").c_str(), 0755), 0);
    podres_.SetPods(std::move(pods));
    ASSERT_OK(podres_.Start(dir_.path() + "/pod-resources/kubelet.sock"));
    agent_ = std::make_unique<Agent>(o);
    ASSERT_OK(agent_->Start());
    ASSERT_TRUE(
        kubelet_.WaitFor([&] { return AllRegistered(kubelet_, pools); }, absl::Seconds(20)));
  }
  void TearDown() override {
    if (agent_) agent_->Stop();
    podres_.Stop();
  }
  nlohmann::json Spec(const std::string& file) {
    auto text = ReadFile(dir_.path() + "/cdi/" + file);
    if (!text.ok()) return nullptr;
    return nlohmann::json::parse(*text, nullptr, false);
  }
  std::set<std::string> SpecDevices(const std::string& file) {
    std::set<std::string> out;
    nlohmann::json spec = Spec(file);
    if (!spec.is_object()) return out;
    for (const auto& d : spec["devices"]) out.insert(d["name"].get<std::string>());
    return out;
  }

  TempDir dir_;
  sim::KubeletSim kubelet_{dir_.path()};
  podresources::FakePodResourcesServer podres_;
  std::unique_ptr<Agent> agent_;
};

// Two Pods admitted back to back: one takes mlx5's exclusive ID, the other a
// shared token of the same device, both before any PodResources List shows
// either. Today both Allocates succeed (the withdrawal waits for
// PodResources); the second must be refused, naming the device and the pool.
TEST_F(PoolsIntegrationTest, ExclusiveThenSharedOfOneDeviceBackToBackIsRefused) {
  Start(Options("mlx5-roce-sriov"), 4);
  const std::string dev = kubelet_.Devices(kRdma)[0].id;
  ASSERT_OK(kubelet_.AllocateIds(kRdma, {dev}));
  auto second = kubelet_.AllocateIds(kShared, {dev + ".t00"});
  ASSERT_FALSE(second.ok()) << "exclusive and shared both granted " << dev;
  EXPECT_THAT(std::string(second.status().message()), HasSubstr(dev));
  EXPECT_THAT(std::string(second.status().message()), HasSubstr(kRdma));
  // The withdrawal reached the kubelet from the Allocate itself.
  ASSERT_TRUE(kubelet_.WaitFor(
      [&] {
        for (const auto& d : kubelet_.Devices(kShared)) {
          if (d.id.rfind(dev + ".", 0) == 0 && d.health == "Healthy") return false;
        }
        return true;
      },
      absl::Seconds(5)));
}

TEST_F(PoolsIntegrationTest, SharedThenExclusiveOfOneDeviceBackToBackIsRefused) {
  Start(Options("mlx5-roce-sriov"), 4);
  const std::string dev = kubelet_.Devices(kRdma)[0].id;
  ASSERT_OK(kubelet_.AllocateIds(kShared, {dev + ".t07"}));
  auto second = kubelet_.AllocateIds(kRdma, {dev});
  ASSERT_FALSE(second.ok()) << "exclusive and shared both granted " << dev;
  EXPECT_THAT(std::string(second.status().message()), HasSubstr(dev));
  EXPECT_THAT(std::string(second.status().message()), HasSubstr(kShared));
  // More tokens of the device stay grantable: sharing is the point.
  EXPECT_OK(kubelet_.AllocateIds(kShared, {dev + ".t08"}));
}

// A grant no Pod takes up (PodResources never shows it, e.g. admission failed
// after Allocate) stops withdrawing its device after the grant TTL; one that
// PodResources shows keeps withdrawing it as a hold for as long as it lasts.
TEST_F(PoolsIntegrationTest, GrantNoPodTakesUpIsReleasedAfterTheTtl) {
  AgentOptions o = Options("mlx5-roce-sriov");
  o.grant_ttl = absl::Milliseconds(800);
  Start(o, 4);
  const std::string dev = kubelet_.Devices(kRdma)[0].id;
  auto healthy_tokens = [&] {
    int n = 0;
    for (const auto& d : kubelet_.Devices(kShared)) {
      n += d.id.rfind(dev + ".", 0) == 0 && d.health == "Healthy";
    }
    return n;
  };
  ASSERT_EQ(healthy_tokens(), 64);
  ASSERT_OK(kubelet_.AllocateIds(kRdma, {dev}));
  ASSERT_TRUE(kubelet_.WaitFor([&] { return healthy_tokens() == 0; }, absl::Seconds(5)));
  ASSERT_TRUE(kubelet_.WaitFor([&] { return healthy_tokens() == 64; }, absl::Seconds(10)))
      << "the unclaimed grant still withdraws " << dev;
  ASSERT_OK(kubelet_.AllocateIds(kShared, {dev + ".t00"}));

  // This one the kubelet reports: it stays withdrawn past the TTL.
  podres_.SetPods({{"ns", "a", {{"c", {{kShared, dev + ".t00", {0}}}}}}});
  ASSERT_TRUE(kubelet_.WaitFor([&] { return agent_->holds().size() == 1; }, absl::Seconds(10)));
  absl::SleepFor(absl::Seconds(2));
  EXPECT_EQ(kubelet_.Devices(kRdma)[0].health, "Unhealthy");
  auto refused = kubelet_.AllocateIds(kRdma, {dev});
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr(kShared));
}

// One Pod leaves while another arrives: the number of holds is unchanged but
// the CDI spec's still-referenced set is not. rdmap79s0 is unplugged while Pod
// A holds it (its CDI entry is kept for A); then A leaves and B takes another
// device. The kept entry must go.
TEST_F(PoolsIntegrationTest, PodSwapWithTheSameCountUpdatesTheCdiSpec) {
  AgentOptions o = Options("p5.48xlarge");
  o.write_cdi = true;
  Start(o, 4, {{"kv", "a", {{"c", {{kEfa, "rdmap79s0", {0}}}}}}});
  ASSERT_TRUE(kubelet_.WaitFor([&] { return agent_->holds().size() == 1; }, absl::Seconds(10)));
  NodeView node = agent_->node();
  NodeInventory next = node.inventory;
  next.devices.erase(std::remove_if(next.devices.begin(), next.devices.end(),
                                    [](const RdmaDevice& d) { return d.name == "rdmap79s0"; }),
                     next.devices.end());
  agent_->OnNodeChanged(next, node.health);
  const std::string file = "vpc.amazonaws.com-efa.json";
  ASSERT_TRUE(kubelet_.WaitFor([&] { return SpecDevices(file).size() == 32; }, absl::Seconds(5)))
      << "the unplugged device stays in the spec while Pod a holds it";
  EXPECT_TRUE(SpecDevices(file).count("rdmap79s0"));

  podres_.SetPods({{"kv", "b", {{"c", {{kEfa, "rdmap80s0", {0}}}}}}});
  ASSERT_TRUE(kubelet_.WaitFor(
      [&] {
        auto h = agent_->holds();
        return h.size() == 1 && h[0].pod == "b";
      },
      absl::Seconds(10)));
  EXPECT_TRUE(kubelet_.WaitFor([&] { return SpecDevices(file).size() == 31; }, absl::Seconds(5)))
      << "Pod a left: rdmap79s0's CDI entry must be dropped";
  EXPECT_FALSE(SpecDevices(file).count("rdmap79s0"));
}

TEST_F(PoolsIntegrationTest, CdiSpecOfAPoolRemovedFromTheConfigIsDeletedOnReload) {
  const std::string cfg = dir_.path() + "/config.yaml";
  const std::string efa =
      "pools:\n  - name: vpc.amazonaws.com/efa\n    mode: exclusive\n"
      "    selector: {kinds: [efa]}\n";
  const std::string ib =
      "  - name: example.com/ib\n    mode: exclusive\n    selector: {kinds: [rdma]}\n";
  ASSERT_OK(WriteFileAtomic(cfg, efa + ib));
  AgentOptions o = Options("p6-b200.48xlarge");
  o.config_path = cfg;
  o.write_cdi = true;
  Start(o, 2);
  ASSERT_TRUE(PathExists(dir_.path() + "/cdi/example.com-ib.json"));
  ASSERT_TRUE(PathExists(dir_.path() + "/cdi/vpc.amazonaws.com-efa.json"));

  ASSERT_OK(WriteFileAtomic(cfg, efa));
  ASSERT_OK(agent_->Reload());
  EXPECT_TRUE(kubelet_.WaitFor(
      [&] { return !PathExists(dir_.path() + "/cdi/example.com-ib.json"); }, absl::Seconds(5)))
      << "the removed pool's CDI spec is still there";
  EXPECT_TRUE(PathExists(dir_.path() + "/cdi/vpc.amazonaws.com-efa.json"));
}

// A pool that selects EFA and mlx5 devices alike: an EFA device's CDI edits
// (its own plus the spec-level ones) must not carry rdma_cm; mlx5's must.
TEST_F(PoolsIntegrationTest, EfaCdiDeviceCarriesNoRdmaCm) {
  const std::string cfg = dir_.path() + "/config.yaml";
  ASSERT_OK(WriteFileAtomic(
      cfg, "pools:\n  - name: example.com/fabric\n    mode: exclusive\n    selector: {}\n"));
  AgentOptions o = Options("p6-b200.48xlarge");
  o.config_path = cfg;
  o.write_cdi = true;
  Start(o, 1);
  nlohmann::json spec = Spec("example.com-fabric.json");
  ASSERT_TRUE(spec.is_object());
  std::vector<std::string> common;
  if (spec.contains("containerEdits") && spec["containerEdits"].contains("deviceNodes")) {
    for (const auto& n : spec["containerEdits"]["deviceNodes"]) common.push_back(n["path"]);
  }
  int efa = 0, rdma = 0;
  for (const auto& d : spec["devices"]) {
    std::vector<std::string> nodes = common;
    for (const auto& n : d["containerEdits"]["deviceNodes"]) nodes.push_back(n["path"]);
    const bool has_cm =
        std::find(nodes.begin(), nodes.end(), "/dev/infiniband/rdma_cm") != nodes.end();
    const std::string name = d["name"];
    if (name.rfind("rdmap", 0) == 0) {
      ++efa;
      EXPECT_FALSE(has_cm) << name << " (EFA) gets rdma_cm";
    } else {
      ++rdma;
      EXPECT_TRUE(has_cm) << name << " (mlx5) lacks rdma_cm";
    }
  }
  EXPECT_EQ(efa, 8);
  EXPECT_EQ(rdma, 2);
}

// The engine environment end to end: a pool with env presets, its rxe
// device's GID table changed on the (fake) host, and the next Allocate
// answering from the new table, with no file read on its path.
TEST_F(PoolsIntegrationTest, NextAllocateAnswersFromTheChangedGidTable) {
  testing::FakeSysfs fs(dir_.path() + "/node");
  fs.AddRxe("rxe0", "eth0");
  fs.SetGidTableLength("rxe0", 1, 1024);
  fs.AddRdmaCm(124);
  const std::string cfg = dir_.path() + "/config.yaml";
  ASSERT_OK(WriteFileAtomic(cfg,
                            "pools:\n  - name: device.gpustack.ai/rdma\n    selector: {}\n"
                            "    env: [mooncake, nccl, nccl-gid-index, ucx]\n"));
  AgentOptions o = Options("rxe");
  o.paths.sysfs_root = fs.sys_root();
  o.paths.dev_root = fs.dev_root();
  o.config_path = cfg;
  Start(o, 1);
  auto first = kubelet_.Allocate(kRdma, 1, "p1");
  ASSERT_OK(first);
  EXPECT_EQ(first->envs().at("MC_GID_INDEX"), "1");
  EXPECT_EQ(first->envs().at("NCCL_IB_GID_INDEX"), "1");
  EXPECT_EQ(first->envs().at("NCCL_IB_HCA"), "=rxe0:1");
  EXPECT_EQ(first->envs().at("UCX_NET_DEVICES"), "rxe0:1");
  EXPECT_EQ(first->envs().at("MOONCAKE_DEVICE"), "rxe0");
  kubelet_.RemovePod("p1");
  // 10.0.2.15 removed, 10.0.3.15 added: the kernel reuses the lowest free slot
  // for the new address, so take slot 2 after emptying 1.
  fs.ClearGid("rxe0", 1, 1);
  fs.SetGid("rxe0", 1, 2, testing::FakeSysfs::Ipv4Gid("10.0.3.15"), "RoCE v2", "eth0");
  std::string index;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  int n = 0;
  while (absl::Now() < deadline) {
    const std::string pod = "p" + std::to_string(2 + n++);
    auto next = kubelet_.Allocate(kRdma, 1, pod);
    ASSERT_OK(next);
    kubelet_.RemovePod(pod);
    index = next->envs().count("MC_GID_INDEX") ? next->envs().at("MC_GID_INDEX") : "";
    if (index == "2") break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(index, "2");
  // /v1/node says what a grant gets, per port.
  nlohmann::json node = nlohmann::json::parse(agent_->NodeJson());
  const nlohmann::json& env = node["pools"][0]["engine_env"];
  EXPECT_EQ(env["presets"], nlohmann::json({"mooncake", "nccl", "nccl-gid-index", "ucx"}));
  EXPECT_EQ(env["ports"][0]["gid_index"], 2);
  EXPECT_EQ(env["ports"][0]["ipv4"], "10.0.3.15");
  EXPECT_EQ(env["gid_index_all_devices"], 2);
  // No IPv4 address left: the index is left out, and /v1/node says why.
  fs.ClearGid("rxe0", 1, 2);
  ASSERT_TRUE(kubelet_.WaitFor(
      [&] {
        nlohmann::json n = nlohmann::json::parse(agent_->NodeJson());
        return n["pools"][0]["engine_env"]["gid_index_all_devices"].is_null();
      },
      absl::Seconds(10)));
  node = nlohmann::json::parse(agent_->NodeJson());
  EXPECT_THAT(node["pools"][0]["engine_env"]["gid_index_reason"].get<std::string>(),
              HasSubstr("no RoCE v2 GID with an IPv4 address"));
  auto none = kubelet_.Allocate(kRdma, 1, "p-none");
  ASSERT_OK(none);
  EXPECT_EQ(none->envs().count("MC_GID_INDEX"), 0u);
  EXPECT_EQ(none->envs().at("UCX_NET_DEVICES"), "rxe0:1");
}

// Issue 32, item 12: the GID index is fixed at Allocate. When its address
// leaves the table later (a DHCP renew, a VIP moved away), the container's
// MC_GID_INDEX names an empty slot: /v1/node and the metric say so.
TEST_F(PoolsIntegrationTest, AGidThatLeavesTheTableAfterAllocateIsSaidStale) {
  testing::FakeSysfs fs(dir_.path() + "/node");
  fs.AddRxe("rxe0", "eth0");
  fs.SetGidTableLength("rxe0", 1, 1024);
  fs.AddRdmaCm(124);
  const std::string cfg = dir_.path() + "/config.yaml";
  ASSERT_OK(WriteFileAtomic(cfg,
                            "pools:\n  - name: device.gpustack.ai/rdma\n    selector: {}\n"
                            "    env: [mooncake, ucx]\n"));
  AgentOptions o = Options("rxe");
  o.paths.sysfs_root = fs.sys_root();
  o.paths.dev_root = fs.dev_root();
  o.config_path = cfg;
  Start(o, 1);
  auto grant = kubelet_.Allocate(kRdma, 1, "p1");
  ASSERT_OK(grant);
  ASSERT_EQ(grant->envs().at("MC_GID_INDEX"), "1");
  podres_.SetPods({{"ml", "p1", {{"engine", {{kRdma, "rxe0", {}}}}}}});
  const std::string series =
      "fabric_pod_gid_index_stale{namespace=\"ml\",pod=\"p1\",container=\"engine\","
      "device=\"rxe0\",port=\"1\"}";
  ASSERT_TRUE(kubelet_.WaitFor(
      [&] { return agent_->MetricsText().find(series + " 0") != std::string::npos; },
      absl::Seconds(10)))
      << agent_->MetricsText();
  nlohmann::json given =
      nlohmann::json::parse(agent_->NodeJson())["pools"][0]["engine_env"]["given"];
  ASSERT_EQ(given.size(), 1u) << given;
  EXPECT_EQ(given[0]["device"], "rxe0");
  EXPECT_EQ(given[0]["gid_index"], 1);
  EXPECT_EQ(given[0]["ipv4"], "10.0.2.15");
  EXPECT_EQ(given[0]["in_table"], true);

  // The address moves: 10.0.2.15 removed, 10.0.3.15 added in the next free slot.
  fs.ClearGid("rxe0", 1, 1);
  fs.SetGid("rxe0", 1, 2, testing::FakeSysfs::Ipv4Gid("10.0.3.15"), "RoCE v2", "eth0");
  ASSERT_TRUE(kubelet_.WaitFor(
      [&] { return agent_->MetricsText().find(series + " 1") != std::string::npos; },
      absl::Seconds(10)))
      << agent_->MetricsText();
  given = nlohmann::json::parse(agent_->NodeJson())["pools"][0]["engine_env"]["given"];
  ASSERT_EQ(given.size(), 1u) << given;
  EXPECT_EQ(given[0]["in_table"], false);
  EXPECT_THAT(
      given[0]["gone"].get<std::string>(),
      AllOf(HasSubstr("MC_GID_INDEX=1 (10.0.2.15 on eth0)"), HasSubstr("index 1 is empty now"),
            HasSubstr("10.0.2.15 has left rxe0 port 1's table")));
}

}  // namespace
}  // namespace fabric
