// DraServer with the plugin and health services, against the kubelet
// simulator's DRA driver side, over real unix sockets in a temp kubelet root.
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <mutex>

#include "agent/base/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "plugin/dra/dra_health_service.h"
#include "plugin/dra/dra_plugin_service.h"
#include "plugin/dra/dra_server.h"
#include "test/fakes/fake_claim_allocations.h"
#include "test/fakes/fake_device_preparer.h"
#include "test/testing/status_matchers.h"
#include "test/testing/test_dirs.h"
#include "tools/kubelet-sim/dra_sim.h"

namespace fabric::dra {
namespace {

using sim::DraKubeletSim;
using sim::DraSimClaim;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kNode[] = "node-1";
constexpr absl::Duration kWait = absl::Seconds(15);

sim::DraSimOptions FastSim() {
  sim::DraSimOptions o;
  o.reconcile_period = absl::Milliseconds(50);
  o.initial_backoff = absl::Milliseconds(50);
  o.health_retry = absl::Milliseconds(50);
  return o;
}

// One agent's DRA part: the services over a state dir, and their sockets.
struct Agent {
  Agent(const std::string& root, const std::string& state_dir, ClaimAllocations* allocations,
        DevicePreparer* preparer)
      : plugin(DraPluginOptions{kDriverName, kNode, state_dir}, allocations, preparer),
        health(kNode, absl::Seconds(10)),
        server(DraServerOptions{root, "", kDriverName, absl::Milliseconds(200)}, &plugin, &health) {
  }
  DraPluginService plugin;
  DraHealthService health;
  DraServer server;
};

class DraIntegrationTest : public ::testing::Test {
 protected:
  DraIntegrationTest() : dir_("dra-it", "FABRIC_KEEP_TEST_DIRS") {
    root_ = dir_.path() + "/kubelet";
    state_ = dir_.path() + "/state";
    allocations_.Set(
        {"team-a",
         "pair",
         "uid-pair",
         {{"efa", kDriverName, kNode, "rdmap79s0"}, {"efa", kDriverName, kNode, "rdmap80s0"}}});
    allocations_.Set(
        {"team-b", "shared", "uid-shared", {{"rdma", kDriverName, kNode, "mlx5-0-t03"}}});
  }
  std::unique_ptr<Agent> StartAgent() {
    auto agent = std::make_unique<Agent>(root_, state_, &allocations_, &preparer_);
    agent->health.Publish({{"rdmap79s0", true, ""}, {"rdmap80s0", true, ""}});
    EXPECT_OK(agent->server.Start());
    return agent;
  }
  bool Registered(DraKubeletSim& kubelet, uint64_t min_registrations, Agent& agent) {
    return kubelet.WaitFor(
        [&] {
          return kubelet.Drivers().count(kDriverName) &&
                 agent.server.registration().registrations >= min_registrations;
        },
        kWait);
  }

  testing::TempDir dir_;
  std::string root_;
  std::string state_;
  FakeClaimAllocations allocations_;
  FakeDevicePreparer preparer_;
};

TEST_F(DraIntegrationTest, RegisterPrepareRestartUnprepareAndHealth) {
  auto agent = StartAgent();
  EXPECT_EQ(agent->server.plugin_socket(), root_ + "/plugins/fabric.gpustack.ai/dra.sock");
  EXPECT_EQ(agent->server.registration_socket(),
            root_ + "/plugins_registry/fabric.gpustack.ai-reg.sock");
  DraKubeletSim kubelet(root_, FastSim());
  ASSERT_OK(kubelet.Start());
  ASSERT_TRUE(Registered(kubelet, 1, *agent));
  EXPECT_EQ(kubelet.Drivers().at(kDriverName), "v1.DRAPlugin");
  auto regs = kubelet.Registrations();
  ASSERT_FALSE(regs.empty());
  EXPECT_EQ(regs.back().type, "DRAPlugin");
  EXPECT_EQ(regs.back().endpoint, agent->server.plugin_socket());
  EXPECT_THAT(regs.back().supported_versions, ElementsAre("v1.DRAPlugin", "v1beta1.DRAPlugin"));
  EXPECT_TRUE(agent->server.registration().registered);

  const std::vector<DraSimClaim> claims = {{"team-a", "pair", "uid-pair"},
                                           {"team-b", "shared", "uid-shared"}};
  auto first = kubelet.PrepareResources(kDriverName, claims);
  ASSERT_OK(first.status());
  ASSERT_EQ(first->size(), 2u);
  ASSERT_EQ(first->at("uid-pair").size(), 2u);
  EXPECT_EQ(first->at("uid-pair")[0].pool, kNode);
  EXPECT_EQ(first->at("uid-pair")[1].device, "rdmap80s0");
  EXPECT_THAT(first->at("uid-pair")[1].cdi_device_ids,
              ElementsAre("fabric.gpustack.ai/device=uid-pair-rdmap80s0"));
  EXPECT_THAT(first->at("uid-shared")[0].request_names, ElementsAre("rdma"));
  EXPECT_EQ(preparer_.prepare_calls(), 2);

  // Agent restart: a new service over the same state dir, new sockets.
  agent->server.Stop();
  EXPECT_FALSE(PathExists(root_ + "/plugins_registry/fabric.gpustack.ai-reg.sock"));
  ASSERT_TRUE(kubelet.WaitFor([&] { return kubelet.Drivers().empty(); }, kWait))
      << "deleting the registration socket deregisters the driver";
  agent.reset();
  agent = StartAgent();
  ASSERT_TRUE(Registered(kubelet, 1, *agent));
  auto again = kubelet.PrepareResources(kDriverName, claims);
  ASSERT_OK(again.status());
  EXPECT_EQ(preparer_.prepare_calls(), 2) << "prepared claims come from the checkpoint";
  ASSERT_EQ(again->at("uid-pair").size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(again->at("uid-pair")[i].device, first->at("uid-pair")[i].device);
    EXPECT_EQ(again->at("uid-pair")[i].cdi_device_ids, first->at("uid-pair")[i].cdi_device_ids);
  }
  EXPECT_EQ(again->at("uid-shared")[0].cdi_device_ids, first->at("uid-shared")[0].cdi_device_ids);

  // Health: the stream sees an UNHEALTHY update.
  ASSERT_TRUE(kubelet.WaitFor(
      [&] { return kubelet.Health(kDriverName).count("node-1/rdmap79s0") > 0; }, kWait));
  EXPECT_EQ(kubelet.Health(kDriverName).at("node-1/rdmap79s0").health, "Healthy");
  agent->health.Publish({{"rdmap79s0", false, "port 1 DOWN"}, {"rdmap80s0", true, ""}});
  ASSERT_TRUE(kubelet.WaitFor(
      [&] { return kubelet.Health(kDriverName).at("node-1/rdmap79s0").health == "Unhealthy"; },
      kWait));
  EXPECT_EQ(kubelet.Health(kDriverName).at("node-1/rdmap79s0").message, "port 1 DOWN");
  EXPECT_EQ(kubelet.Health(kDriverName).at("node-1/rdmap80s0").health, "Healthy");
  // A device no longer published turns Unknown at the kubelet.
  agent->health.Publish({{"rdmap79s0", false, "port 1 DOWN"}});
  ASSERT_TRUE(kubelet.WaitFor(
      [&] { return kubelet.Health(kDriverName).at("node-1/rdmap80s0").health == "Unknown"; },
      kWait));

  // Unprepare both, and one never prepared.
  ASSERT_OK(kubelet.UnprepareResources(
      kDriverName, {claims[0], claims[1], DraSimClaim{"team-c", "never", "uid-never"}}));
  EXPECT_FALSE(preparer_.IsPrepared("uid-pair"));
  EXPECT_EQ(agent->plugin.Stats().prepared_claims, 0u);
  EXPECT_EQ(agent->plugin.Stats().prepare_calls, 1u);
  kubelet.Stop();
}

TEST_F(DraIntegrationTest, PerClaimErrorBecomesAFailedPrepareEvent) {
  auto agent = StartAgent();
  DraKubeletSim kubelet(root_, FastSim());
  ASSERT_OK(kubelet.Start());
  ASSERT_TRUE(Registered(kubelet, 1, *agent));
  auto r = kubelet.PrepareResources(
      kDriverName, {{"team-a", "pair", "uid-pair"}, {"team-z", "ghost", "uid-ghost"}});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("Failed to prepare dynamic resources: prepare dynamic resources: "
                        "NodePrepareResources failed for claim team-z/ghost:"));
  ASSERT_EQ(kubelet.Events().size(), 1u);
  EXPECT_EQ(kubelet.Events()[0].reason, "FailedPrepareDynamicResources");
  // The good claim of the same call was prepared all the same.
  EXPECT_TRUE(preparer_.IsPrepared("uid-pair"));
}

TEST_F(DraIntegrationTest, DeletedSocketsAreServedAgainAndReRegister) {
  auto agent = StartAgent();
  DraKubeletSim kubelet(root_, FastSim());
  ASSERT_OK(kubelet.Start());
  ASSERT_TRUE(Registered(kubelet, 1, *agent));
  // A kubelet cleanup removes both sockets.
  ASSERT_EQ(::unlink(agent->server.registration_socket().c_str()), 0);
  ASSERT_EQ(::unlink(agent->server.plugin_socket().c_str()), 0);
  ASSERT_TRUE(Registered(kubelet, 2, *agent));
  EXPECT_GE(agent->server.registration().socket_restarts, 1u);
  auto r = kubelet.PrepareResources(kDriverName, {{"team-a", "pair", "uid-pair"}});
  ASSERT_OK(r.status());
  EXPECT_EQ(r->at("uid-pair").size(), 2u);
}

TEST_F(DraIntegrationTest, StaleSocketsAreReplacedAtStart) {
  ASSERT_OK(MkdirAll(root_ + "/plugins/fabric.gpustack.ai"));
  {
    // A previous agent's sockets, nobody listening.
    auto stale = std::make_unique<Agent>(root_, state_, &allocations_, &preparer_);
    ASSERT_OK(stale->server.Start());
    // Simulate a crash: leave the socket files behind.
    ASSERT_EQ(::link(stale->server.plugin_socket().c_str(), (root_ + "/keep-dra").c_str()), 0);
    ASSERT_EQ(::link(stale->server.registration_socket().c_str(), (root_ + "/keep-reg").c_str()),
              0);
    stale->server.Stop();
    ASSERT_EQ(::rename((root_ + "/keep-dra").c_str(), stale->server.plugin_socket().c_str()), 0);
    ASSERT_EQ(::rename((root_ + "/keep-reg").c_str(), stale->server.registration_socket().c_str()),
              0);
  }
  auto agent = StartAgent();
  DraKubeletSim kubelet(root_, FastSim());
  ASSERT_OK(kubelet.Start());
  ASSERT_TRUE(Registered(kubelet, 1, *agent));
  ASSERT_OK(kubelet.PrepareResources(kDriverName, {{"team-a", "pair", "uid-pair"}}).status());
}

// A plugin that offers only v1beta1 is called on v1beta1; one that offers no
// service the kubelet speaks is refused, and told why.
TEST_F(DraIntegrationTest, KubeletFallsBackToV1beta1AndRefusesUnknownServices) {
  DraPluginService plugin(DraPluginOptions{kDriverName, kNode, state_}, &allocations_, &preparer_);
  ASSERT_OK(MkdirAll(root_ + "/plugins_registry"));
  const std::string endpoint = dir_.path() + "/beta.sock";
  grpc::ServerBuilder plugin_builder;
  plugin_builder.AddListeningPort("unix:" + endpoint, grpc::InsecureServerCredentials());
  plugin_builder.RegisterService(plugin.v1beta1_service());  // no v1
  auto plugin_server = plugin_builder.BuildAndStart();
  ASSERT_NE(plugin_server, nullptr);

  std::mutex mu;
  std::vector<std::pair<bool, std::string>> notified;
  auto record = [&](bool ok, const std::string& error) {
    std::lock_guard<std::mutex> lock(mu);
    notified.emplace_back(ok, error);
  };
  DraRegistrationService beta(kDriverName, endpoint, record, {"v1beta1.DRAPlugin"});
  DraRegistrationService future("future.example.com", endpoint, record, {"v9.DRAPlugin"});
  grpc::ServerBuilder reg_builder;
  reg_builder.AddListeningPort("unix:" + root_ + "/plugins_registry/beta-reg.sock",
                               grpc::InsecureServerCredentials());
  reg_builder.RegisterService(&beta);
  auto reg_server = reg_builder.BuildAndStart();
  grpc::ServerBuilder future_builder;
  future_builder.AddListeningPort("unix:" + root_ + "/plugins_registry/future-reg.sock",
                                  grpc::InsecureServerCredentials());
  future_builder.RegisterService(&future);
  auto future_server = future_builder.BuildAndStart();
  ASSERT_NE(reg_server, nullptr);
  ASSERT_NE(future_server, nullptr);

  DraKubeletSim kubelet(root_, FastSim());
  ASSERT_OK(kubelet.Start());
  ASSERT_TRUE(kubelet.WaitFor(
      [&] {
        std::lock_guard<std::mutex> lock(mu);
        return kubelet.Drivers().count(kDriverName) && notified.size() >= 2;
      },
      kWait));
  EXPECT_EQ(kubelet.Drivers().at(kDriverName), "v1beta1.DRAPlugin");
  EXPECT_EQ(kubelet.Drivers().count("future.example.com"), 0u);
  {
    std::lock_guard<std::mutex> lock(mu);
    bool refused = false;
    for (const auto& [ok, error] : notified) {
      if (!ok) {
        refused = true;
        EXPECT_THAT(error, HasSubstr("none of services supported by the plugin "
                                     "([\"v9.DRAPlugin\"]) are supported by the kubelet "
                                     "([\"v1.DRAPlugin\" \"v1beta1.DRAPlugin\"])"));
      }
    }
    EXPECT_TRUE(refused);
  }
  auto r = kubelet.PrepareResources(kDriverName, {{"team-a", "pair", "uid-pair"}});
  ASSERT_OK(r.status());
  EXPECT_THAT(r->at("uid-pair")[0].cdi_device_ids,
              ElementsAre("fabric.gpustack.ai/device=uid-pair-rdmap79s0"));
  ASSERT_OK(kubelet.UnprepareResources(kDriverName, {{"team-a", "pair", "uid-pair"}}));
  EXPECT_FALSE(preparer_.IsPrepared("uid-pair"));
  kubelet.Stop();
  reg_server->Shutdown();
  future_server->Shutdown();
  plugin_server->Shutdown();
}

// The kubelet-sim binary's DRA mode against a running DraServer.
TEST_F(DraIntegrationTest, CliPreparesUnpreparesAndWatchesHealth) {
  const char* bin_dir = std::getenv("FABRIC_BINARY_DIR");
  if (bin_dir == nullptr) GTEST_SKIP() << "FABRIC_BINARY_DIR unset";
  auto agent = StartAgent();
  agent->health.Publish({{"rdmap79s0", false, "port 1 DOWN"}, {"rdmap80s0", true, ""}});
  const std::string binary = std::string(bin_dir) + "/tools/kubelet-sim/kubelet-sim";
  const std::string out = dir_.path() + "/out.txt";
  std::vector<std::string> args = {binary,
                                   "--root",
                                   root_,
                                   "--mode",
                                   "dra",
                                   "--reconcile-period",
                                   "50ms",
                                   "--timeout",
                                   "10s",
                                   "--prepare",
                                   "team-a/pair/uid-pair,team-z/ghost/uid-ghost",
                                   "--watch-health",
                                   "300ms"};
  auto run = [&](const std::vector<std::string>& a) {
    std::vector<char*> argv;
    for (const auto& s : a) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = -1;
    if (posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ) != 0) return -1;
    posix_spawn_file_actions_destroy(&actions);
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status);
  };
  // A claim the API server does not know fails the whole call, as the kubelet does.
  EXPECT_EQ(run(args), 3);
  auto text = ReadFile(out);
  ASSERT_OK(text.status());
  EXPECT_THAT(*text, HasSubstr("type=DRAPlugin name=fabric.gpustack.ai"));
  EXPECT_THAT(*text, HasSubstr("service=v1.DRAPlugin  OK"));
  EXPECT_THAT(*text, HasSubstr("FailedPrepareDynamicResources: Failed to prepare dynamic "
                               "resources: prepare dynamic resources: NodePrepareResources failed "
                               "for claim team-z/ghost"));
  EXPECT_THAT(*text, ::testing::ContainsRegex("node-1/rdmap79s0 +Unhealthy +port 1 DOWN"));

  args[10] = "team-a/pair/uid-pair";
  args.insert(args.end(), {"--unprepare", "team-a/pair/uid-pair"});
  EXPECT_EQ(run(args), 0);
  text = ReadFile(out);
  ASSERT_OK(text.status());
  EXPECT_THAT(*text, HasSubstr("node-1/rdmap80s0 requests [efa] -> CDI "
                               "[fabric.gpustack.ai/device=uid-pair-rdmap80s0]"));
  EXPECT_THAT(*text, HasSubstr("claim team-a/pair (uid uid-pair): unprepared"));
  EXPECT_FALSE(preparer_.IsPrepared("uid-pair"));
}

}  // namespace
}  // namespace fabric::dra
