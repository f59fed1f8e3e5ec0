// The agent end to end over real unix sockets against the kubelet simulator:
// registration (both paths), device lists, allocation, kubelet restarts.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "agent/base/file_util.h"
#include "agent/cni_service/attachment_store.h"
#include "agent/daemon/agent.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/fakes/fake_podresources_server.h"
#include "test/integration/integration_util.h"
#include "test/testing/fake_sysfs.h"
#include "test/testing/netns_fake_sysfs.h"
#include "test/testing/status_matchers.h"
#include "tools/kubelet-sim/kubelet_sim.h"

namespace fabric {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;
using ::testing::UnorderedElementsAre;

using integration::AllRegistered;
using integration::kEfa;
using integration::kPartitioned;
using integration::kRdma;
using integration::kShared;
using integration::SampleNodeOptions;
using testing::TempDir;
using testing::TestDataDir;

TEST(AgentIntegrationTest, P5AdvertisesThirtyTwoEfaOnTwoNumaNodesAndEmptyRdmaPools) {
  TempDir dir;
  sim::KubeletSim kubelet(dir.path());
  ASSERT_OK(kubelet.Start());
  Agent agent(SampleNodeOptions("p5.48xlarge", dir.path()));
  ASSERT_OK(agent.Start());
  ASSERT_TRUE(kubelet.WaitFor([&] { return AllRegistered(kubelet, 4); }, absl::Seconds(20)));

  auto efa = kubelet.Devices(kEfa);
  ASSERT_THAT(efa, SizeIs(32));
  std::map<int64_t, int> per_numa;
  for (const auto& d : efa) {
    EXPECT_TRUE(d.healthy) << d.id;
    ASSERT_THAT(d.numa_nodes, SizeIs(1)) << d.id;
    per_numa[d.numa_nodes[0]]++;
  }
  EXPECT_EQ(per_numa, (std::map<int64_t, int>{{0, 16}, {1, 16}}));
  // Pools with no devices register with an empty list: capacity 0, not missing.
  for (const char* r : {kRdma, kShared, kPartitioned}) {
    EXPECT_THAT(kubelet.Devices(r), SizeIs(0)) << r;
    EXPECT_EQ(kubelet.Capacity(r), 0) << r;
  }
  auto opts = kubelet.PluginOptions(kEfa);
  ASSERT_TRUE(opts.has_value());
  EXPECT_TRUE(opts->get_preferred_allocation_available());
  EXPECT_FALSE(opts->pre_start_required());
  agent.Stop();
}

TEST(AgentIntegrationTest, AllocateGrantsExactlyTheChosenEfaNodesOnOneNumaNode) {
  TempDir dir;
  sim::KubeletSim kubelet(dir.path());
  ASSERT_OK(kubelet.Start());
  Agent agent(SampleNodeOptions("p5.48xlarge", dir.path()));
  ASSERT_OK(agent.Start());
  ASSERT_TRUE(kubelet.WaitFor([&] { return AllRegistered(kubelet, 4); }, absl::Seconds(20)));

  std::vector<std::string> chosen;
  auto resp = kubelet.Allocate(kEfa, 2, "member-0", "store", &chosen);
  ASSERT_OK(resp);
  ASSERT_THAT(chosen, SizeIs(2));
  EXPECT_GE(kubelet.PreferredAllocationCalls(kEfa), 1);
  // Exactly the two verbs nodes of the granted devices, nothing else.
  const NodeView node = agent.node();
  std::set<std::string> expected;
  std::set<int> numas;
  for (const auto& id : chosen) {
    const RdmaDevice* d = node.inventory.Find(id);
    ASSERT_NE(d, nullptr) << id;
    expected.insert("/dev/" + d->uverbs.rel_path);
    numas.insert(d->numa_node());
  }
  std::set<std::string> granted;
  for (const auto& spec : resp->devices()) {
    EXPECT_EQ(spec.host_path(), spec.container_path());
    EXPECT_EQ(spec.permissions(), "rw");
    granted.insert(spec.host_path());
  }
  EXPECT_EQ(granted, expected);
  EXPECT_EQ(numas.size(), 1u);
  EXPECT_TRUE(resp->mounts().empty());
  EXPECT_EQ(resp->envs().at("FABRIC_DEVICES_VPC_AMAZONAWS_COM_EFA"), chosen[0] + "," + chosen[1]);

  // A bad ID is refused with an error naming it.
  auto bad = kubelet.AllocateIds(kEfa, {"rdmap999s0"});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("rdmap999s0"));
  agent.Stop();
}

TEST(AgentIntegrationTest, RoceSriovNodeServesPfsVfsAndSharedTokens) {
  TempDir dir;
  sim::KubeletSim kubelet(dir.path());
  ASSERT_OK(kubelet.Start());
  Agent agent(SampleNodeOptions("mlx5-roce-sriov", dir.path()));
  ASSERT_OK(agent.Start());
  ASSERT_TRUE(kubelet.WaitFor([&] { return AllRegistered(kubelet, 4); }, absl::Seconds(20)));
  EXPECT_THAT(kubelet.Devices(kEfa), SizeIs(0));
  // PF0 has VFs (serves through them); PF1 has none.
  ASSERT_THAT(kubelet.Devices(kRdma), SizeIs(1));
  EXPECT_THAT(kubelet.Devices(kShared), SizeIs(64));
  EXPECT_THAT(kubelet.Devices(kPartitioned), SizeIs(4));

  auto resp = kubelet.Allocate(kShared, 1, "engine", "vllm");
  ASSERT_OK(resp);
  std::vector<std::string> paths;
  for (const auto& spec : resp->devices()) paths.push_back(spec.host_path());
  ASSERT_THAT(paths, SizeIs(2));
  EXPECT_EQ(paths[1], "/dev/infiniband/rdma_cm");
  EXPECT_THAT(resp->envs().at("NCCL_IB_HCA"), HasSubstr(kubelet.Devices(kRdma)[0].id));
  agent.Stop();
}

TEST(AgentIntegrationTest, ZeroDeviceNodeRegistersEveryPoolEmpty) {
  TempDir dir;
  testing::FakeSysfs empty;
  sim::KubeletSim kubelet(dir.path());
  ASSERT_OK(kubelet.Start());
  AgentOptions o;
  o.paths = empty.paths();
  o.paths.kubelet_root = dir.path();
  o.registration = RegistrationMode::kKubelet;
  Agent agent(o);
  ASSERT_OK(agent.Start());
  ASSERT_TRUE(kubelet.WaitFor([&] { return AllRegistered(kubelet, 4); }, absl::Seconds(20)));
  for (const char* r : {kEfa, kRdma, kShared, kPartitioned}) EXPECT_EQ(kubelet.Capacity(r), 0);
  EXPECT_TRUE(agent.plugins().AllRegistered());
  agent.Stop();
}

TEST(AgentIntegrationTest, KubeletRestartTriggersPromptReRegistration) {
  TempDir dir;
  sim::KubeletSim kubelet(dir.path());
  ASSERT_OK(kubelet.Start());
  Agent agent(SampleNodeOptions("p6-b200.48xlarge", dir.path()));
  ASSERT_OK(agent.Start());
  ASSERT_TRUE(kubelet.WaitFor([&] { return AllRegistered(kubelet, 4); }, absl::Seconds(20)));
  const size_t before = kubelet.Registrations().size();

  ASSERT_OK(kubelet.Restart());
  const absl::Time created = kubelet.KubeletSocketCreatedAt();
  ASSERT_TRUE(kubelet.WaitFor(
      [&] {
        int ok = 0;
        for (const auto& e : kubelet.Registrations()) ok += e.ok && e.at >= created;
        return ok >= 4;
      },
      absl::Seconds(10)));
  absl::Duration worst = absl::ZeroDuration();
  for (const auto& e : kubelet.Registrations()) {
    if (e.ok && e.at >= created) worst = std::max(worst, e.at - created);
  }
  std::printf("re-registration after kubelet.sock re-creation: %.1f ms (slowest of 4 pools)\n",
              absl::ToDoubleMilliseconds(worst));
  EXPECT_LT(worst, absl::Seconds(2));  // event-driven; a 5 s poll would miss this
  EXPECT_GT(kubelet.Registrations().size(), before);
  ASSERT_TRUE(
      kubelet.WaitFor([&] { return kubelet.Devices(kEfa).size() == 8; }, absl::Seconds(10)));
  EXPECT_EQ(agent.plugins().kubelet_restarts(), 1u);
  agent.Stop();
}

TEST(AgentIntegrationTest, PluginWatcherRegistration) {
  TempDir dir;
  sim::KubeletSim kubelet(dir.path());
  ASSERT_OK(kubelet.StartWatcher());
  AgentOptions o = SampleNodeOptions("rxe", dir.path());
  o.registration = RegistrationMode::kWatcher;
  Agent agent(o);
  ASSERT_OK(agent.Start());
  ASSERT_TRUE(kubelet.WaitFor([&] { return AllRegistered(kubelet, 4); }, absl::Seconds(20)));
  EXPECT_THAT(kubelet.Devices(kRdma), SizeIs(1));
  for (const auto& e : kubelet.Registrations()) {
    EXPECT_EQ(e.path, sim::RegistrationPath::kPluginWatcher);
    EXPECT_TRUE(e.ok) << e.error;
    EXPECT_EQ(e.socket_path.rfind(dir.path() + "/plugins_registry/", 0), 0u) << e.socket_path;
  }
  ASSERT_TRUE(kubelet.WaitFor([&] { return agent.plugins().AllRegistered(); }, absl::Seconds(10)));
  auto resp = kubelet.Allocate(kRdma, 1);
  ASSERT_OK(resp);
  EXPECT_EQ(resp->devices(0).host_path(), "/dev/infiniband/uverbs0");
  agent.Stop();
}

TEST(AgentIntegrationTest, BadConfigIsRejectedBeforeAnythingRegisters) {
  TempDir dir;
  sim::KubeletSim kubelet(dir.path());
  ASSERT_OK(kubelet.Start());
  const std::string cfg = dir.path() + "/config.yaml";
  std::ofstream(cfg)
      << "pools:\n  - name: example.com/rdma\n    mode: exclusive\n    selectr: {}\n";
  AgentOptions o = SampleNodeOptions("rxe", dir.path());
  o.config_path = cfg;
  Agent agent(o);
  absl::Status s = agent.Start();
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(s.message()), HasSubstr("pools[0].selectr"));
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_TRUE(kubelet.Registrations().empty());
}

TEST(AgentIntegrationTest, RemovedDeviceStaysListedUnhealthyAndNewOneIsAdvertised) {
  TempDir dir;
  testing::FakeSysfs fs;
  fs.AddEfa("rdmap79s0", "0000:4f:00.0", {.numa_node = 0});
  fs.AddEfa("rdmap80s0", "0000:50:00.0", {.numa_node = 0});
  sim::KubeletSim kubelet(dir.path());
  ASSERT_OK(kubelet.Start());
  AgentOptions o;
  o.paths = fs.paths();
  o.paths.kubelet_root = dir.path();
  o.registration = RegistrationMode::kKubelet;
  Agent agent(o);
  ASSERT_OK(agent.Start());
  ASSERT_TRUE(
      kubelet.WaitFor([&] { return kubelet.Devices(kEfa).size() == 2; }, absl::Seconds(20)));

  NodeView node = agent.node();
  NodeInventory next = node.inventory;
  next.devices.erase(next.devices.begin());  // rdmap79s0 unplugged
  RdmaDevice added = next.devices[0];
  added.name = "rdmap81s0";
  next.devices.push_back(added);
  agent.OnNodeChanged(next, {});
  ASSERT_TRUE(
      kubelet.WaitFor([&] { return kubelet.Devices(kEfa).size() == 3; }, absl::Seconds(10)));
  std::map<std::string, std::string> health;
  for (const auto& d : kubelet.Devices(kEfa)) health[d.id] = d.health;
  EXPECT_EQ(health["rdmap79s0"], "Unhealthy");
  EXPECT_EQ(health["rdmap80s0"], "Healthy");
  EXPECT_EQ(health["rdmap81s0"], "Healthy");
  auto refused = kubelet.AllocateIds(kEfa, {"rdmap79s0"});
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("device removed"));
  agent.Stop();
}

// Issue 11 item 1: in exclusive RDMA netns mode the CNI part moves mlx5_0
// into a Pod's netns and the host sysfs no longer shows it. It stays listed
// (the Pod holds it) with its health held, while running and after a restart.
TEST(AgentIntegrationTest, DeviceMovedIntoAPodNetnsStaysListedAcrossRestarts) {
  TempDir dir;
  testing::FakeSysfs fs;
  fs.AddMlx5("mlx5_0", "0000:3b:00.0", {.link_layer = "Ethernet", .netdev = "ens1f0np0"});
  fs.AddMlx5("mlx5_1", "0000:3b:00.1", {.link_layer = "Ethernet", .netdev = "ens1f1np1"});
  testing::NetnsFakeSysfs netlink(&fs, {"mlx5_0", "mlx5_1"});
  sim::KubeletSim kubelet(dir.path());
  ASSERT_OK(kubelet.Start());
  AgentOptions o;
  o.paths = fs.paths();
  o.paths.kubelet_root = dir.path();
  o.registration = RegistrationMode::kKubelet;
  o.agent_socket = dir.path() + "/agent.sock";
  auto health = [&] {
    std::map<std::string, std::string> out;
    for (const auto& d : kubelet.Devices(kRdma)) out[d.id] = d.health;
    return out;
  };
  using Health = std::map<std::string, std::string>;
  const Health both_healthy = {{"mlx5_0", "Healthy"}, {"mlx5_1", "Healthy"}};
  const std::string netns = dir.path() + "/netns-pod-a";  // a live Pod netns
  std::ofstream(netns).put('\n');
  {
    Agent agent(o);
    ASSERT_OK(agent.Start());
    ASSERT_TRUE(kubelet.WaitFor([&] { return health() == both_healthy; }, absl::Seconds(20)));
    // What CNI ADD does in exclusive mode: the durable record, then the move.
    cni_service::AttachmentStore store(o.paths.state_dir + "/cni");
    cni_service::AttachmentRecord rec;
    rec.key = {"fabric", "c0ffee", "eth0"};
    rec.netns = netns;
    rec.pod_namespace = "default";
    rec.pod_name = "pod-a";
    rec.netns_mode = "exclusive";
    rec.devices.push_back(
        {"main", kRdma, "mlx5_0", "mlx5_0", cni_service::DeviceAction::kMoved, "moved"});
    ASSERT_OK(store.Save(rec));
    ASSERT_OK(netlink.MoveDevice("mlx5_0", "", netns));
    ASSERT_FALSE(IsDirectory(fs.IbDevicePath("mlx5_0")));
    // Many polls later: still listed, still Healthy, never "device removed".
    absl::SleepFor(absl::Seconds(1));
    EXPECT_EQ(health(), both_healthy);
    NodeView node = agent.node();
    EXPECT_NE(node.inventory.Find("mlx5_0"), nullptr);
    EXPECT_TRUE(node.health["mlx5_0"].healthy) << node.health["mlx5_0"].reason;
    EXPECT_EQ(agent.MetricsText().find("device removed"), std::string::npos);
    agent.Stop();
  }
  {
    // The agent restarts while the Pod runs: mlx5_0 is still in its netns.
    const int before = kubelet.ListAndWatchMessages(kRdma);
    Agent agent(o);
    ASSERT_OK(agent.Start());
    ASSERT_TRUE(kubelet.WaitFor([&] { return kubelet.ListAndWatchMessages(kRdma) > before; },
                                absl::Seconds(20)));
    EXPECT_EQ(health(), both_healthy);
    const NodeView view = agent.node();  // a copy: Find points into it
    const RdmaDevice* held = view.inventory.Find("mlx5_0");
    ASSERT_NE(held, nullptr);
    EXPECT_EQ(held->LinkLayer(), "Ethernet");

    // DEL: moved back, record removed; still listed, now watched again.
    ASSERT_OK(netlink.MoveDevice("mlx5_0", netns, ""));
    ASSERT_OK(cni_service::AttachmentStore(o.paths.state_dir + "/cni")
                  .Remove({"fabric", "c0ffee", "eth0"}));
    fs.SetPortState("mlx5_0", 1, "1: DOWN", "3: Disabled");
    ASSERT_TRUE(
        kubelet.WaitFor([&] { return health()["mlx5_0"] == "Unhealthy"; }, absl::Seconds(10)));
    agent.Stop();
  }
}

// The real binary: SIGTERM stops it cleanly and removes its sockets.
TEST(AgentBinaryTest, SigtermRemovesSocketsAndExitsZero) {
  const char* bin_dir = std::getenv("FABRIC_BINARY_DIR");
  ASSERT_NE(bin_dir, nullptr);
  const std::string agent_bin = std::string(bin_dir) + "/agent/daemon/fabric-agent";
  TempDir dir;
  sim::KubeletSim kubelet(dir.path());
  ASSERT_OK(kubelet.Start());
  const std::string node = TestDataDir() + "/nodes/p5.48xlarge";
  pid_t pid = fork();
  if (pid == 0) {
    execl(agent_bin.c_str(), agent_bin.c_str(), ("--sysfs-root=" + node + "/sys").c_str(),
          ("--dev-root=" + node + "/dev").c_str(), ("--kubelet-root=" + dir.path()).c_str(),
          ("--device-plugin-dir=" + dir.path() + "/device-plugins").c_str(),
          "--registration=kubelet", ("--cdi-dir=" + dir.path() + "/cdi").c_str(),
          ("--state-dir=" + dir.path() + "/state").c_str(), nullptr);
    _exit(127);
  }
  ASSERT_TRUE(kubelet.WaitFor([&] { return AllRegistered(kubelet, 4); }, absl::Seconds(20)));
  auto names = ListDir(dir.path() + "/device-plugins");
  ASSERT_OK(names);
  EXPECT_GE(names->size(), 5u);  // kubelet.sock + 4 pools
  kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  names = ListDir(dir.path() + "/device-plugins");
  ASSERT_OK(names);
  for (const auto& n : *names) EXPECT_EQ(n.rfind("fabric-", 0), std::string::npos) << n;
}

TEST(AgentBinaryTest, BadConfigExitsTwoNamingTheKey) {
  const char* bin_dir = std::getenv("FABRIC_BINARY_DIR");
  ASSERT_NE(bin_dir, nullptr);
  TempDir dir;
  const std::string cfg = dir.path() + "/c.yaml";
  std::ofstream(cfg)
      << "pools:\n  - name: vpc.amazonaws.com/efa\n    mode: sliced\n    selector: {}\n";
  const std::string cmd = std::string(bin_dir) + "/agent/daemon/fabric-agent --config=" + cfg +
                          " --kubelet-root=" + dir.path() + " --sysfs-root=" + dir.path() +
                          " --cdi-dir=" + dir.path() + "/cdi --state-dir=" + dir.path() + "/state" +
                          " 2>" + dir.path() + "/err";
  int rc = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(rc));
  EXPECT_EQ(WEXITSTATUS(rc), 2);
  auto err = ReadFile(dir.path() + "/err");
  ASSERT_OK(err);
  EXPECT_THAT(*err, HasSubstr("pools[0].mode"));
  EXPECT_FALSE(IsDirectory(dir.path() + "/device-plugins"));
}

}  // namespace
}  // namespace fabric

namespace fabric {
namespace {

// Fetches a path from the agent's HTTP endpoint with curl (a real client).
std::string HttpGet(int port, const std::string& path, int* status = nullptr) {
  TempDir dir;
  const std::string out = dir.path() + "/body";
  const std::string cmd = "curl -s -o " + out +
                          " -w '%{http_code}' http://127.0.0.1:" + std::to_string(port) + path +
                          " > " + dir.path() + "/code";
  std::system(cmd.c_str());
  auto code = ReadTrimmed(dir.path() + "/code");
  if (status) *status = code.ok() ? std::atoi(code->c_str()) : 0;
  auto body = ReadFile(out);
  return body.ok() ? *body : "";
}

// Observation's sources, as the sampler sees them: one process (PID 4242)
// of one Pod owning a QP and a CQ on rdmap79s0.
class OneOwnerResources : public restrack::ResourceSource {
 public:
  absl::StatusOr<std::vector<restrack::RdmaResource>> Dump() override {
    restrack::RdmaResource qp, cq;
    qp.device = cq.device = "rdmap79s0";
    qp.pid = cq.pid = 4242;
    qp.kind = restrack::ResourceKind::kQp;
    cq.kind = restrack::ResourceKind::kCq;
    return std::vector<restrack::RdmaResource>{qp, cq};
  }
};
class OnePodProcs : public podprocs::ProcSource {
 public:
  static constexpr char kUid[] = "0a1b2c3d-0000-4000-8000-000000000001";
  absl::StatusOr<std::vector<podprocs::PodProcess>> ScanPods() override {
    return std::vector<podprocs::PodProcess>{Process()};
  }
  absl::StatusOr<podprocs::PodProcess> Identify(uint32_t pid) override {
    if (pid != 4242) return absl::NotFoundError("gone");
    return Process();
  }
  absl::StatusOr<uint32_t> ProcessOf(uint32_t tid) override {
    if (tid != 4242) return absl::NotFoundError("gone");
    return tid;
  }
  absl::StatusOr<podprocs::NetBytes> NetDevBytes(uint32_t) override {
    return podprocs::NetBytes{10, 20, {"eth0"}};
  }
  absl::StatusOr<bool> InHostNetns(uint32_t) override { return false; }
  std::string Comm(uint32_t) override { return ""; }
  std::optional<podprocs::ContainerNames> Names(const podprocs::CgroupIdentity&) override {
    return podprocs::ContainerNames{"kv", "member-0", kUid, "store", false};
  }

 private:
  static podprocs::PodProcess Process() {
    return {4242, {kUid, std::string(64, 'b'), "containerd"}};
  }
};

// Issue 17: the sampler is the agent's one reader of counter files. Its first
// sample is taken before the agent serves; /metrics shows its latest sample
// (a counter change shows within a period, not at the next scrape); EFA
// health takes its error counters from it; --observe hands it the sources.
TEST(AgentIntegrationTest, SamplerFeedsMetricsHealthAndObservation) {
  TempDir dir;
  testing::FakeSysfs fs;
  fs.AddEfa("rdmap79s0", "0000:4f:00.0", {.numa_node = 0});
  fs.SetCounter("rdmap79s0", 1, "tx_bytes", 100);
  sim::KubeletSim kubelet(dir.path());
  ASSERT_OK(kubelet.Start());
  OneOwnerResources resources;
  OnePodProcs procs;
  AgentOptions o;
  o.paths = fs.paths();
  o.paths.kubelet_root = dir.path();
  o.registration = RegistrationMode::kKubelet;
  o.metrics_address = "127.0.0.1:0";
  o.metrics_cache = absl::ZeroDuration();
  o.sample_period = absl::Milliseconds(300);
  o.observe = true;
  o.resource_source = &resources;
  o.proc_source = &procs;
  Agent agent(o);
  ASSERT_OK(agent.Start());
  ASSERT_NE(agent.sampler(), nullptr);
  sampler::SamplePtr first = agent.sampler()->Latest();
  ASSERT_NE(first, nullptr) << "a sample before serving";
  ASSERT_TRUE(first->resources_ok) << first->resources_error;
  ASSERT_EQ(first->owned.size(), 1u);
  EXPECT_EQ(first->owned[0].pod_uid, OnePodProcs::kUid);
  EXPECT_EQ(first->owned[0].owned, (sampler::Owned{.qp = 1, .cq = 1, .qp_active = 1}));
  ASSERT_TRUE(first->procs_ok) << first->procs_error;
  ASSERT_EQ(first->pods.size(), 1u);
  EXPECT_EQ(first->pods[0].rx_bytes, 10u);
  EXPECT_EQ(first->names.at(OnePodProcs::kUid).containers.begin()->second, "store");
  ASSERT_TRUE(
      kubelet.WaitFor([&] { return kubelet.Devices(kEfa).size() == 1; }, absl::Seconds(20)));

  const std::string text = HttpGet(agent.metrics_port(), "/metrics");
  EXPECT_THAT(text, HasSubstr("device=\"rdmap79s0\",port=\"1\",counter=\"tx_bytes\"} 100\n"));
  EXPECT_THAT(text, HasSubstr("fabric_sampler_rounds_total "));
  fs.SetCounter("rdmap79s0", 1, "tx_bytes", 4242);
  ASSERT_TRUE(kubelet.WaitFor(
      [&] {
        return HttpGet(agent.metrics_port(), "/metrics")
                   .find("device=\"rdmap79s0\",port=\"1\",counter=\"tx_bytes\"} 4242\n") !=
               std::string::npos;
      },
      absl::Seconds(5)));

  // An EFA error counter's growth, seen through the samples.
  fs.SetCounter("rdmap79s0", 0, "cmds_err", 5);
  EXPECT_TRUE(kubelet.WaitFor(
      [&] {
        auto d = kubelet.Devices(kEfa);
        return d.size() == 1 && d[0].health == "Unhealthy";
      },
      absl::Seconds(5)));
  agent.Stop();
}

class ObservedAgentTest : public ::testing::Test {
 protected:
  void StartOn(const std::string& node, std::vector<podresources::FakePod> pods = {}) {
    ASSERT_OK(kubelet_.Start());
    ASSERT_EQ(::mkdir((dir_.path() + "/pod-resources").c_str(), 0755), 0);
    podres_.SetPods(std::move(pods));
    ASSERT_OK(podres_.Start(dir_.path() + "/pod-resources/kubelet.sock"));
    AgentOptions o = SampleNodeOptions(node, dir_.path());
    o.metrics_address = "127.0.0.1:0";
    o.metrics_cache = absl::ZeroDuration();
    o.podresources_interval = absl::Milliseconds(200);
    agent_ = std::make_unique<Agent>(o);
    ASSERT_OK(agent_->Start());
    ASSERT_TRUE(kubelet_.WaitFor([&] { return AllRegistered(kubelet_, 4); }, absl::Seconds(20)));
  }
  void TearDown() override {
    if (agent_) agent_->Stop();
    podres_.Stop();
  }
  TempDir dir_;
  sim::KubeletSim kubelet_{dir_.path()};
  podresources::FakePodResourcesServer podres_;
  std::unique_ptr<Agent> agent_;
};

TEST_F(ObservedAgentTest, MetricsPassPromtoolAndCarryPodLabels) {
  StartOn("p5.48xlarge",
          {{"kv", "member-0", {{"store", {{kEfa, "rdmap79s0", {0}}, {kEfa, "rdmap80s0", {0}}}}}},
           {"kv", "engine-0", {{"vllm", {{kEfa, "rdmap115s0", {1}}}}}}});
  ASSERT_TRUE(kubelet_.WaitFor([&] { return agent_->holds().size() == 3; }, absl::Seconds(10)));
  int status = 0;
  const std::string text = HttpGet(agent_->metrics_port(), "/metrics", &status);
  ASSERT_EQ(status, 200);
  EXPECT_THAT(
      text,
      HasSubstr("fabric_resource_units{resource=\"vpc.amazonaws.com/efa\",mode=\"exclusive\"} 32"));
  EXPECT_THAT(text,
              HasSubstr("fabric_resource_allocated_units{resource=\"vpc.amazonaws.com/efa\"} 3"));
  EXPECT_THAT(
      text, HasSubstr("fabric_pod_hw_stat_total{namespace=\"kv\",pod=\"engine-0\","
                      "container=\"vllm\",device=\"rdmap115s0\",port=\"1\",counter=\"tx_bytes\"}"));
  EXPECT_THAT(
      text,
      HasSubstr(
          "fabric_resource_registered{resource=\"vpc.amazonaws.com/efa\",mode=\"kubelet\"} 1"));

  // promtool accepts it without warnings (lint included).
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool not installed (Debian package prometheus)";
  }
  const std::string file = dir_.path() + "/metrics.txt";
  std::ofstream(file) << text;
  const std::string cmd = "promtool check metrics < " + file + " > " + dir_.path() + "/lint 2>&1";
  const int rc = std::system(cmd.c_str());
  auto lint = ReadFile(dir_.path() + "/lint");
  EXPECT_EQ(rc, 0) << (lint.ok() ? *lint : "");
  EXPECT_EQ(lint.ok() ? *lint : "x", "");
}

TEST_F(ObservedAgentTest, ProbesAndNodeJson) {
  StartOn("rxe");
  int status = 0;
  EXPECT_EQ(HttpGet(agent_->metrics_port(), "/healthz", &status), "ok\n");
  EXPECT_EQ(status, 200);
  ASSERT_TRUE(
      kubelet_.WaitFor([&] { return agent_->plugins().AllRegistered(); }, absl::Seconds(10)));
  HttpGet(agent_->metrics_port(), "/readyz", &status);
  EXPECT_EQ(status, 200);
  const std::string json = HttpGet(agent_->metrics_port(), "/v1/node", &status);
  EXPECT_EQ(status, 200);
  EXPECT_THAT(json, HasSubstr("\"name\": \"rxe0\""));
  EXPECT_THAT(json, HasSubstr("\"resource\": \"device.gpustack.ai/rdma.shared\""));

  // The kubelet goes away: not ready, naming the resources.
  kubelet_.Stop();
  ::unlink((dir_.path() + "/device-plugins/kubelet.sock").c_str());
  ASSERT_TRUE(kubelet_.WaitFor(
      [&] {
        HttpGet(agent_->metrics_port(), "/readyz", &status);
        return status == 503;
      },
      absl::Seconds(10)));
  EXPECT_THAT(HttpGet(agent_->metrics_port(), "/readyz"), HasSubstr("not registered"));
}

TEST_F(ObservedAgentTest, ExclusiveHoldWithdrawsSharedTokensUntilReleased) {
  StartOn("mlx5-roce-sriov");
  const std::string dev = kubelet_.Devices(kRdma)[0].id;  // the PF without VFs
  auto unhealthy_tokens = [&] {
    int n = 0;
    for (const auto& d : kubelet_.Devices(kShared)) n += d.health != "Healthy";
    return n;
  };
  EXPECT_EQ(unhealthy_tokens(), 0);
  // Pod A holds the device exclusively: all 64 of its tokens are withdrawn.
  podres_.SetPods({{"ns", "a", {{"c", {{kRdma, dev, {0}}}}}}});
  ASSERT_TRUE(kubelet_.WaitFor([&] { return unhealthy_tokens() == 64; }, absl::Seconds(10)));
  auto refused = kubelet_.AllocateIds(kShared, {dev + ".t05"});
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("withdrawn"));
  // Released: the tokens come back.
  podres_.SetPods({});
  ASSERT_TRUE(kubelet_.WaitFor([&] { return unhealthy_tokens() == 0; }, absl::Seconds(10)));

  // Pod B holds one token: the exclusive ID is withdrawn.
  podres_.SetPods({{"ns", "b", {{"c", {{kShared, dev + ".t03", {0}}}}}}});
  ASSERT_TRUE(kubelet_.WaitFor([&] { return kubelet_.Devices(kRdma)[0].health == "Unhealthy"; },
                               absl::Seconds(10)));
  EXPECT_EQ(unhealthy_tokens(), 0) << "the shared side stays available to other Pods";
  podres_.SetPods({});
  ASSERT_TRUE(kubelet_.WaitFor([&] { return kubelet_.Devices(kRdma)[0].health == "Healthy"; },
                               absl::Seconds(10)));
}

TEST_F(ObservedAgentTest, HostileScrapeDoesNotStallAllocate) {
  StartOn("p5.48xlarge");
  std::atomic<bool> stop{false};
  std::vector<std::thread> scrapers;
  for (int i = 0; i < 16; ++i) {
    scrapers.emplace_back([&] {
      while (!stop) HttpGet(agent_->metrics_port(), "/metrics");
    });
  }
  // A slow reader: connects and never reads.
  const int port = agent_->metrics_port();
  std::thread slow([&] {
    std::string cmd = "timeout 3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/" + std::to_string(port) +
                      "; printf \"GET /metrics HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n\" >&3; sleep 3'";
    std::system(cmd.c_str());
  });
  absl::Time start = absl::Now();
  int ok = 0;
  for (int i = 0; i < 20; ++i) {
    auto r = kubelet_.AllocateIds(kEfa, {"rdmap79s0"});
    ok += r.ok();
  }
  const absl::Duration took = absl::Now() - start;
  stop = true;
  for (auto& t : scrapers) t.join();
  slow.join();
  EXPECT_EQ(ok, 20);
  std::printf("20 Allocate calls under 16 scrapers + a slow reader: %.1f ms\n",
              absl::ToDoubleMilliseconds(took));
  EXPECT_LT(took, absl::Seconds(10));
}

}  // namespace
}  // namespace fabric

namespace fabric {
namespace {

TEST(AgentSideFilesTest, CdiSpecNfdFileAndCniResolver) {
  TempDir dir;
  sim::KubeletSim kubelet(dir.path());
  ASSERT_OK(kubelet.Start());
  AgentOptions o = SampleNodeOptions("p6-b200.48xlarge", dir.path());
  o.paths.cdi_dir = dir.path() + "/cdi";
  o.paths.state_dir = dir.path() + "/state";
  ASSERT_EQ(::mkdir(o.paths.cdi_dir.c_str(), 0755), 0);
  o.write_cdi = true;
  o.cdi_devices = true;
  o.memlock_hook_path = "/opt/fabric/bin/fabric-memlock-hook";
  o.nfd_features_file = dir.path() + "/fabric.features";
  o.agent_socket = dir.path() + "/agent/agent.sock";
  Agent agent(o);
  ASSERT_OK(agent.Start());
  ASSERT_TRUE(kubelet.WaitFor([&] { return AllRegistered(kubelet, 4); }, absl::Seconds(20)));

  auto nfd = ReadFile(o.nfd_features_file);
  ASSERT_OK(nfd);
  EXPECT_THAT(*nfd, HasSubstr("fabric-efa.count=8\n"));
  EXPECT_THAT(*nfd, HasSubstr("fabric-rdma.count=2\n"));

  auto specs = ListDir(o.paths.cdi_dir);
  ASSERT_OK(specs);
  EXPECT_THAT(*specs, ::testing::Contains("vpc.amazonaws.com-efa.json"));
  auto efa_spec = ReadFile(o.paths.cdi_dir + "/vpc.amazonaws.com-efa.json");
  ASSERT_OK(efa_spec);
  EXPECT_THAT(*efa_spec, HasSubstr("fabric-memlock-hook"));
  EXPECT_THAT(*efa_spec, HasSubstr("/dev/infiniband/uverbs"));

  // Allocate names the CDI device of each granted device.
  std::vector<std::string> chosen;
  auto resp = kubelet.Allocate(kEfa, 1, "p", "c", &chosen);
  ASSERT_OK(resp);
  ASSERT_EQ(resp->cdi_devices_size(), 1);
  EXPECT_EQ(resp->cdi_devices(0).name(), "vpc.amazonaws.com/efa=" + chosen[0]);

  // The CNI service's view of a grant.
  auto efa = agent.Resolve(kEfa, chosen[0]);
  ASSERT_TRUE(efa.has_value());
  EXPECT_TRUE(efa->efa);
  EXPECT_TRUE(efa->exclusive);
  const std::string mlx = kubelet.Devices(kRdma)[0].id;
  auto tok = agent.Resolve(kShared, mlx + ".t00");
  ASSERT_TRUE(tok.has_value());
  EXPECT_FALSE(tok->exclusive);
  EXPECT_EQ(tok->rdma_device, mlx);
  EXPECT_FALSE(agent.Resolve(kShared, "nope").has_value());
  EXPECT_TRUE(PathExists(o.agent_socket));
  agent.Stop();
}

// The allocation watcher reconciles through the CNI service, so it must not
// start before that exists: it read the pointer while Start() assigned it, a
// data race that TSan reports (tools/test.sh runs this test under TSan). A
// 1 ms PodResources interval makes the watcher read it continuously.
TEST(AgentStartTest, WatcherStartsAfterTheCniServiceItUses) {
  TempDir dir;
  sim::KubeletSim kubelet(dir.path());
  ASSERT_OK(kubelet.Start());
  AgentOptions o = SampleNodeOptions("rxe", dir.path());
  o.paths.state_dir = dir.path() + "/state";
  o.agent_socket = dir.path() + "/agent/agent.sock";
  o.podresources_interval = absl::Milliseconds(1);
  Agent agent(o);
  ASSERT_OK(agent.Start());
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_TRUE(PathExists(o.agent_socket));
  agent.Stop();
}

}  // namespace
}  // namespace fabric

namespace fabric {
namespace {

// SIGHUP (and a config-file change) reloads: a good config re-derives the
// pools and unchanged pools keep their streams; a bad one is rejected with an
// error naming the key and the old config keeps serving.
TEST(AgentBinaryTest, SighupReloadsGoodConfigAndRejectsBadOne) {
  const char* bin_dir = std::getenv("FABRIC_BINARY_DIR");
  ASSERT_NE(bin_dir, nullptr);
  const std::string agent_bin = std::string(bin_dir) + "/agent/daemon/fabric-agent";
  TempDir dir;
  const std::string cfg = dir.path() + "/config.yaml";
  const std::string efa_pool =
      "pools:\n  - name: vpc.amazonaws.com/efa\n    mode: exclusive\n    selector: {kinds: "
      "[efa]}\n";
  std::ofstream(cfg) << efa_pool;
  sim::KubeletSim kubelet(dir.path());
  ASSERT_OK(kubelet.Start());
  const std::string node = TestDataDir() + "/nodes/p6-b200.48xlarge";
  const std::string log = dir.path() + "/agent.log";
  pid_t pid = fork();
  if (pid == 0) {
    freopen(log.c_str(), "w", stderr);
    execl(agent_bin.c_str(), agent_bin.c_str(), ("--config=" + cfg).c_str(),
          ("--sysfs-root=" + node + "/sys").c_str(), ("--dev-root=" + node + "/dev").c_str(),
          ("--kubelet-root=" + dir.path()).c_str(),
          ("--device-plugin-dir=" + dir.path() + "/device-plugins").c_str(),
          "--registration=kubelet", "--write-cdi=false", nullptr);
    _exit(127);
  }
  ASSERT_TRUE(kubelet.WaitFor([&] { return AllRegistered(kubelet, 1); }, absl::Seconds(20)));
  const size_t efa_registrations = kubelet.Registrations().size();

  // Good: add a shared RDMA pool over the two mlx5 devices.
  ASSERT_OK(WriteFileAtomic(cfg, efa_pool +
                                     "  - name: example.com/ib\n    mode: shared\n"
                                     "    tokensPerDevice: 4\n"
                                     "    selector: {kinds: [rdma], linkTypes: [InfiniBand]}\n"));
  kill(pid, SIGHUP);
  ASSERT_TRUE(kubelet.WaitFor([&] { return kubelet.Devices("example.com/ib").size() == 8; },
                              absl::Seconds(10)));
  // The unchanged EFA pool was not re-registered (its server and stream kept).
  int efa_regs = 0;
  for (const auto& e : kubelet.Registrations()) efa_regs += e.resource == kEfa;
  EXPECT_EQ(efa_regs, 1);
  EXPECT_EQ(kubelet.Registrations().size(), efa_registrations + 1);

  // Bad: rejected, the old pools keep serving.
  std::ofstream(cfg)
      << "pools:\n  - name: example.com/ib\n    mode: shared\n    tokensPerDevice: -3\n"
         "    selector: {}\n";
  kill(pid, SIGHUP);
  ASSERT_TRUE(kubelet.WaitFor(
      [&] {
        auto text = ReadFile(log);
        return text.ok() && text->find("config reload rejected") != std::string::npos;
      },
      absl::Seconds(10)));
  auto text = ReadFile(log);
  ASSERT_OK(text);
  EXPECT_THAT(*text, HasSubstr("pools[0].tokensPerDevice"));
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ(kubelet.Devices("example.com/ib").size(), 8u);
  EXPECT_EQ(kubelet.Devices(kEfa).size(), 8u);
  EXPECT_FALSE(kubelet.EndpointStopped(kEfa));
  kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace fabric
