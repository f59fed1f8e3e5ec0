// KubeletSim against a tiny in-test device plugin served on a unix socket.
#include "tools/kubelet-sim/kubelet_sim.h"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "agent/base/file_util.h"
#include "agent/base/grpc_deadline.h"
#include "agent/base/mono_clock.h"
#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pluginregistration/v1/api.grpc.pb.h"
#include "test/testing/status_matchers.h"

namespace fabric::sim {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

constexpr char kResource[] = "example.com/rdma";
constexpr absl::Duration kWait = absl::Seconds(10);

v1beta1::Device Dev(const std::string& id, const std::string& health,
                    std::vector<int64_t> numa = {}) {
  v1beta1::Device d;
  d.set_id(id);
  d.set_health(health);
  for (int64_t n : numa) d.mutable_topology()->add_nodes()->set_id(n);
  return d;
}

struct FakePluginConfig {
  v1beta1::DevicePluginOptions options;
  bool fail_options = false;
  std::vector<std::string> preferred_answer;  // container_responses[0].deviceIDs
  bool empty_allocate = false;
  // Plugin-watcher GetInfo answer.
  std::string info_type = "DevicePlugin";
  std::string info_name = kResource;
  std::string info_endpoint;  // "" -> the registration socket
  std::vector<std::string> info_versions = {"v1beta1"};
};

// A device plugin (and optional plugin-watcher registration service) on one
// unix socket, recording every call it gets.
class FakePlugin {
 public:
  FakePlugin(std::string socket_path, FakePluginConfig config)
      : socket_path_(std::move(socket_path)), config_(std::move(config)), dp_(this), reg_(this) {}
  ~FakePlugin() { Stop(); }

  bool Start() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stopping_ = false;
    }
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + socket_path_, grpc::InsecureServerCredentials());
    builder.RegisterService(&dp_);
    builder.RegisterService(&reg_);
    server_ = builder.BuildAndStart();
    return server_ != nullptr;
  }
  void Stop() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (server_) {
      server_->Shutdown(GrpcDeadlineAfter(std::chrono::seconds(1)));
      server_->Wait();
      server_.reset();
    }
  }
  void SetDevices(std::vector<v1beta1::Device> devices) {
    std::lock_guard<std::mutex> l(mu_);
    devices_ = std::move(devices);
    ++devices_generation_;
    cv_.notify_all();
  }
  grpc::Status Register(const std::string& kubelet_sock, const std::string& endpoint,
                        const std::string& resource, const std::string& version = "v1beta1") {
    auto channel = grpc::CreateChannel("unix:" + kubelet_sock, grpc::InsecureChannelCredentials());
    auto stub = v1beta1::Registration::NewStub(channel);
    v1beta1::RegisterRequest request;
    request.set_version(version);
    request.set_endpoint(endpoint);
    request.set_resource_name(resource);
    *request.mutable_options() = config_.options;
    v1beta1::Empty empty;
    grpc::ClientContext ctx;
    ctx.set_deadline(GrpcDeadlineAfter(std::chrono::seconds(20)));
    // kubelet.sock exists from bind(), a moment before listen(): wait, not fail.
    ctx.set_wait_for_ready(true);
    return stub->Register(&ctx, request, &empty);
  }

  int options_calls() const { return Get(&FakePlugin::options_calls_); }
  int list_and_watch_calls() const { return Get(&FakePlugin::law_calls_); }
  std::vector<v1beta1::AllocateRequest> allocate_requests() const {
    return Get(&FakePlugin::allocate_requests_);
  }
  std::vector<v1beta1::PreferredAllocationRequest> preferred_requests() const {
    return Get(&FakePlugin::preferred_requests_);
  }
  std::vector<v1beta1::PreStartContainerRequest> pre_start_requests() const {
    return Get(&FakePlugin::pre_start_requests_);
  }
  std::vector<pluginregistration::RegistrationStatus> notifications() const {
    return Get(&FakePlugin::notifications_);
  }

 private:
  template <typename T>
  T Get(T FakePlugin::*field) const {
    std::lock_guard<std::mutex> l(mu_);
    return this->*field;
  }

  class DevicePluginService final : public v1beta1::DevicePlugin::Service {
   public:
    explicit DevicePluginService(FakePlugin* p) : p_(p) {}
    grpc::Status GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                        v1beta1::DevicePluginOptions* out) override {
      std::lock_guard<std::mutex> l(p_->mu_);
      ++p_->options_calls_;
      if (p_->config_.fail_options) return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "nope");
      *out = p_->config_.options;
      return grpc::Status::OK;
    }
    grpc::Status ListAndWatch(grpc::ServerContext* ctx, const v1beta1::Empty*,
                              grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override {
      std::unique_lock<std::mutex> l(p_->mu_);
      ++p_->law_calls_;
      uint64_t sent = 0;
      while (!p_->stopping_ && !ctx->IsCancelled()) {
        if (p_->devices_generation_ != sent) {
          sent = p_->devices_generation_;
          v1beta1::ListAndWatchResponse response;
          for (const auto& d : p_->devices_) *response.add_devices() = d;
          l.unlock();
          bool ok = writer->Write(response);
          l.lock();
          if (!ok) break;
          continue;
        }
        // Short waits so a cancelled stream is noticed promptly.
        p_->cv_.wait_for(l, std::chrono::milliseconds(20),
                         [this, sent] { return p_->stopping_ || p_->devices_generation_ != sent; });
      }
      return grpc::Status::OK;
    }
    grpc::Status GetPreferredAllocation(grpc::ServerContext*,
                                        const v1beta1::PreferredAllocationRequest* request,
                                        v1beta1::PreferredAllocationResponse* out) override {
      std::lock_guard<std::mutex> l(p_->mu_);
      p_->preferred_requests_.push_back(*request);
      auto* container = out->add_container_responses();
      for (const auto& id : p_->config_.preferred_answer) container->add_deviceids(id);
      return grpc::Status::OK;
    }
    grpc::Status Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* request,
                          v1beta1::AllocateResponse* out) override {
      std::lock_guard<std::mutex> l(p_->mu_);
      p_->allocate_requests_.push_back(*request);
      if (p_->config_.empty_allocate) return grpc::Status::OK;
      for (const auto& container : request->container_requests()) {
        auto* r = out->add_container_responses();
        std::string joined;
        for (const auto& id : container.devices_ids()) {
          joined += (joined.empty() ? "" : ",") + id;
          auto* spec = r->add_devices();
          spec->set_host_path("/dev/infiniband/" + id);
          spec->set_container_path("/dev/infiniband/" + id);
          spec->set_permissions("rw");
          r->add_cdi_devices()->set_name("example.com/rdma=" + id);
        }
        (*r->mutable_envs())["RDMA_DEVICES"] = joined;
      }
      return grpc::Status::OK;
    }
    grpc::Status PreStartContainer(grpc::ServerContext*,
                                   const v1beta1::PreStartContainerRequest* request,
                                   v1beta1::PreStartContainerResponse*) override {
      std::lock_guard<std::mutex> l(p_->mu_);
      p_->pre_start_requests_.push_back(*request);
      return grpc::Status::OK;
    }

   private:
    FakePlugin* p_;
  };

  class RegistrationService final : public pluginregistration::Registration::Service {
   public:
    explicit RegistrationService(FakePlugin* p) : p_(p) {}
    grpc::Status GetInfo(grpc::ServerContext*, const pluginregistration::InfoRequest*,
                         pluginregistration::PluginInfo* info) override {
      info->set_type(p_->config_.info_type);
      info->set_name(p_->config_.info_name);
      info->set_endpoint(p_->config_.info_endpoint);
      for (const auto& v : p_->config_.info_versions) info->add_supported_versions(v);
      return grpc::Status::OK;
    }
    grpc::Status NotifyRegistrationStatus(
        grpc::ServerContext*, const pluginregistration::RegistrationStatus* status,
        pluginregistration::RegistrationStatusResponse*) override {
      std::lock_guard<std::mutex> l(p_->mu_);
      p_->notifications_.push_back(*status);
      return grpc::Status::OK;
    }

   private:
    FakePlugin* p_;
  };

  const std::string socket_path_;
  const FakePluginConfig config_;
  DevicePluginService dp_;
  RegistrationService reg_;
  std::unique_ptr<grpc::Server> server_;

  mutable std::mutex mu_;  // not absl::Mutex: TSan cannot see Debian's libabsl.
  std::condition_variable cv_;
  bool stopping_ = false;
  std::vector<v1beta1::Device> devices_;
  uint64_t devices_generation_ = 1;
  int options_calls_ = 0;
  int law_calls_ = 0;
  std::vector<v1beta1::AllocateRequest> allocate_requests_;
  std::vector<v1beta1::PreferredAllocationRequest> preferred_requests_;
  std::vector<v1beta1::PreStartContainerRequest> pre_start_requests_;
  std::vector<pluginregistration::RegistrationStatus> notifications_;
};

bool IsSocketFile(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

// Leaves a socket file behind, like a crashed process.
void MakeStaleSocket(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof(addr.sun_path));
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ::close(fd);
}

class KubeletSimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ksim-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override {
    sim_.reset();
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  KubeletSim& NewSim(KubeletSimOptions options = {}) {
    sim_ = std::make_unique<KubeletSim>(root_, options);
    return *sim_;
  }
  std::string Dp(const std::string& name) const { return root_ + "/device-plugins/" + name; }

  // Starts a plugin at device-plugins/<name> with devices and registers it.
  std::unique_ptr<FakePlugin> StartAndRegister(const std::string& name,
                                               std::vector<v1beta1::Device> devices,
                                               FakePluginConfig config = {}) {
    auto plugin = std::make_unique<FakePlugin>(Dp(name), std::move(config));
    plugin->SetDevices(std::move(devices));
    EXPECT_TRUE(plugin->Start());
    grpc::Status status = plugin->Register(sim_->KubeletSocket(), name, kResource);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return plugin;
  }
  bool WaitForMessages(int n) {
    return sim_->WaitFor([&] { return sim_->ListAndWatchMessages(kResource) >= n; }, kWait);
  }

  std::string root_;
  std::unique_ptr<KubeletSim> sim_;
};

std::vector<v1beta1::Device> FourDevices() {
  return {Dev("rdma10", "Healthy", {1}), Dev("rdma2", "Healthy", {0}), Dev("rdma1", "Healthy", {0}),
          Dev("rdma3", "Unhealthy", {1})};
}

TEST_F(KubeletSimTest, RegisterConnectsAndEachListAndWatchMessageIsTheFullList) {
  KubeletSim& sim = NewSim();
  ASSERT_OK(sim.Start());
  EXPECT_TRUE(IsSocketFile(sim.KubeletSocket()));
  struct stat st {};
  ASSERT_EQ(::stat(sim.DevicePluginDir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0750u);

  // "healthy" (lower case) and "" are not "Healthy".
  auto plugin = StartAndRegister("fake.sock",
                                 {Dev("a", "Healthy", {0, 1}), Dev("b", "healthy"), Dev("c", "")});
  // GetDevicePluginOptions is answered before Register returns.
  EXPECT_EQ(plugin->options_calls(), 1);
  ASSERT_TRUE(WaitForMessages(1));
  auto devices = sim.Devices(kResource);
  ASSERT_EQ(devices.size(), 3u);
  EXPECT_EQ(devices[0].id, "a");
  EXPECT_TRUE(devices[0].healthy);
  EXPECT_THAT(devices[0].numa_nodes, ElementsAre(0, 1));
  EXPECT_FALSE(devices[1].healthy);
  EXPECT_FALSE(devices[2].healthy);
  EXPECT_EQ(sim.Capacity(kResource), 3);
  EXPECT_EQ(sim.Allocatable(kResource), 1);
  EXPECT_THAT(sim.Resources(), ElementsAre(kResource));
  EXPECT_EQ(sim.EndpointPath(kResource), Dp("fake.sock"));
  EXPECT_FALSE(sim.EndpointStopped(kResource));

  auto events = sim.Registrations();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(events[0].ok);
  EXPECT_EQ(events[0].resource, kResource);
  EXPECT_EQ(events[0].endpoint, "fake.sock");
  EXPECT_EQ(events[0].socket_path, Dp("fake.sock"));
  EXPECT_GE(events[0].at, sim.KubeletSocketCreatedAt());

  // A device missing from the next message disappears from capacity.
  plugin->SetDevices({Dev("a", "Unhealthy", {0})});
  ASSERT_TRUE(WaitForMessages(2));
  ASSERT_EQ(sim.Devices(kResource).size(), 1u);
  EXPECT_EQ(sim.Capacity(kResource), 1);
  EXPECT_EQ(sim.Allocatable(kResource), 0);
  EXPECT_EQ(plugin->list_and_watch_calls(), 1);
}

TEST_F(KubeletSimTest, RegisterRejectsUnsupportedVersionWithKubeletText) {
  KubeletSim& sim = NewSim();
  ASSERT_OK(sim.Start());
  FakePlugin plugin(Dp("fake.sock"), {});
  ASSERT_TRUE(plugin.Start());
  grpc::Status status = plugin.Register(sim.KubeletSocket(), "fake.sock", kResource, "v1alpha");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNKNOWN);
  EXPECT_EQ(status.error_message(),
            "requested API version \"v1alpha\" is not supported by kubelet. Supported version is "
            "[\"v1beta1\"]");
  // The version is checked before the name, and nothing is dialed.
  status = plugin.Register(sim.KubeletSocket(), "fake.sock", "bad", "v1");
  EXPECT_THAT(status.error_message(), HasSubstr("requested API version \"v1\""));
  EXPECT_EQ(plugin.options_calls(), 0);
  auto events = sim.Registrations();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_FALSE(events[0].ok);
  EXPECT_EQ(events[0].error,
            "requested API version \"v1alpha\" is not supported by kubelet. Supported version is "
            "[\"v1beta1\"]");
  EXPECT_THAT(sim.Resources(), IsEmpty());
}

TEST_F(KubeletSimTest, RegisterRejectsNonExtendedResourceNames) {
  KubeletSim& sim = NewSim();
  ASSERT_OK(sim.Start());
  FakePlugin plugin(Dp("fake.sock"), {});
  ASSERT_TRUE(plugin.Start());
  for (const std::string name :
       {"rdma", "kubernetes.io/rdma", "requests.example.com/rdma", "Example.com/rdma"}) {
    grpc::Status status = plugin.Register(sim.KubeletSocket(), "fake.sock", name);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNKNOWN) << name;
    EXPECT_EQ(status.error_message(), "the ResourceName \"" + name + "\" is invalid");
  }
  EXPECT_EQ(plugin.options_calls(), 0);
  EXPECT_THAT(sim.Resources(), IsEmpty());
}

TEST_F(KubeletSimTest, RegisterFailsToDialAMissingEndpoint) {
  KubeletSimOptions options;
  options.dial_timeout = absl::Milliseconds(300);
  KubeletSim& sim = NewSim(options);
  ASSERT_OK(sim.Start());
  FakePlugin plugin(Dp("fake.sock"), {});
  ASSERT_TRUE(plugin.Start());
  const absl::Time before = MonotonicNow();
  grpc::Status status = plugin.Register(sim.KubeletSocket(), "missing.sock", kResource);
  EXPECT_GE(MonotonicNow() - before, absl::Milliseconds(300));  // a blocking dial
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNKNOWN);
  EXPECT_EQ(status.error_message(), "failed to dial device plugin: context deadline exceeded");
  EXPECT_THAT(sim.Resources(), IsEmpty());
}

TEST_F(KubeletSimTest, RegisterFailsWhenGetDevicePluginOptionsFails) {
  KubeletSim& sim = NewSim();
  ASSERT_OK(sim.Start());
  FakePluginConfig config;
  config.fail_options = true;
  FakePlugin plugin(Dp("fake.sock"), config);
  ASSERT_TRUE(plugin.Start());
  grpc::Status status = plugin.Register(sim.KubeletSocket(), "fake.sock", kResource);
  EXPECT_EQ(status.error_message(),
            "failed to get device plugin options: rpc error: code = Unimplemented desc = nope");
  EXPECT_EQ(plugin.list_and_watch_calls(), 0);
}

TEST_F(KubeletSimTest, AbsoluteEndpointIsJoinedUnderTheDevicePluginDir) {
  KubeletSim& sim = NewSim();
  ASSERT_OK(sim.Start());
  // filepath.Join("/var/lib/kubelet/device-plugins/", "/fake.sock").
  auto plugin = std::make_unique<FakePlugin>(Dp("fake.sock"), FakePluginConfig{});
  ASSERT_TRUE(plugin->Start());
  ASSERT_TRUE(plugin->Register(sim.KubeletSocket(), "/fake.sock", kResource).ok());
  EXPECT_EQ(sim.EndpointPath(kResource), Dp("fake.sock"));
}

TEST_F(KubeletSimTest, StreamEndMarksEveryDeviceUnhealthyButKeepsCapacity) {
  KubeletSim& sim = NewSim();
  ASSERT_OK(sim.Start());
  auto plugin = StartAndRegister("fake.sock", FourDevices());
  ASSERT_TRUE(WaitForMessages(1));
  EXPECT_EQ(sim.Allocatable(kResource), 3);
  plugin->Stop();
  ASSERT_TRUE(sim.WaitFor([&] { return sim.EndpointStopped(kResource); }, kWait));
  EXPECT_EQ(sim.Capacity(kResource), 4);
  EXPECT_EQ(sim.Allocatable(kResource), 0);
  for (const auto& d : sim.Devices(kResource)) EXPECT_FALSE(d.healthy) << d.id;
  EXPECT_THAT(sim.Allocate(kResource, 1).status().message(),
              HasSubstr("no healthy devices present; cannot allocate unhealthy devices "
                        "example.com/rdma"));
}

TEST_F(KubeletSimTest, NewestRegistrationWinsAndALateOldDisconnectIsIgnored) {
  KubeletSim& sim = NewSim();
  ASSERT_OK(sim.Start());
  auto old_plugin = StartAndRegister("old.sock", {Dev("a", "Healthy")});
  ASSERT_TRUE(WaitForMessages(1));
  auto new_plugin = StartAndRegister("new.sock", {Dev("b", "Healthy"), Dev("c", "Healthy")});
  ASSERT_TRUE(WaitForMessages(2));
  EXPECT_EQ(sim.EndpointPath(kResource), Dp("new.sock"));
  EXPECT_EQ(sim.Allocatable(kResource), 2);
  // The old instance goes away after the new one registered (maxSurge rollout).
  old_plugin->Stop();
  // Give a wrong reaction the chance to happen, then check it did not.
  sim.WaitFor([&] { return sim.EndpointStopped(kResource); }, absl::Milliseconds(300));
  EXPECT_FALSE(sim.EndpointStopped(kResource));
  EXPECT_EQ(sim.Allocatable(kResource), 2);
}

TEST_F(KubeletSimTest, LegacyKubeletLetsALateOldDisconnectZeroTheResource) {
  KubeletSimOptions options;
  options.legacy_disconnect_by_resource = true;
  KubeletSim& sim = NewSim(options);
  ASSERT_OK(sim.Start());
  auto old_plugin = StartAndRegister("old.sock", {Dev("a", "Healthy")});
  ASSERT_TRUE(WaitForMessages(1));
  auto new_plugin = StartAndRegister("new.sock", {Dev("b", "Healthy")});
  ASSERT_TRUE(WaitForMessages(2));
  old_plugin->Stop();
  ASSERT_TRUE(sim.WaitFor([&] { return sim.EndpointStopped(kResource); }, kWait));
  EXPECT_EQ(sim.Allocatable(kResource), 0);
}

TEST_F(KubeletSimTest, AllocateChoosesHealthyFreeDevicesWithOneContainerRequest) {
  KubeletSim& sim = NewSim();
  ASSERT_OK(sim.Start());
  auto plugin = StartAndRegister("fake.sock", FourDevices());
  ASSERT_TRUE(WaitForMessages(1));

  std::vector<std::string> chosen;
  auto response = sim.Allocate(kResource, 2, "pod-a", "c", &chosen);
  ASSERT_OK(response);
  EXPECT_THAT(chosen, ElementsAre("rdma1", "rdma2"));  // natural order, unhealthy skipped
  EXPECT_EQ(response->envs().at("RDMA_DEVICES"), "rdma1,rdma2");
  ASSERT_EQ(response->devices_size(), 2);
  EXPECT_EQ(response->cdi_devices(0).name(), "example.com/rdma=rdma1");
  auto requests = plugin->allocate_requests();
  ASSERT_EQ(requests.size(), 1u);
  ASSERT_EQ(requests[0].container_requests_size(), 1);
  EXPECT_THAT(requests[0].container_requests(0).devices_ids(), ElementsAre("rdma1", "rdma2"));
  EXPECT_THAT(plugin->preferred_requests(), IsEmpty());  // not advertised

  // Same container again (a restart): cached response, no plugin call.
  ASSERT_OK(sim.Allocate(kResource, 2, "pod-a", "c", &chosen));
  EXPECT_EQ(plugin->allocate_requests().size(), 1u);
  EXPECT_THAT(sim.Allocate(kResource, 3, "pod-a", "c").status().message(),
              HasSubstr("changed request for resource"));

  ASSERT_OK(sim.Allocate(kResource, 1, "pod-b", "c", &chosen));
  EXPECT_THAT(chosen, ElementsAre("rdma10"));
  auto exhausted = sim.Allocate(kResource, 1, "pod-c", "c");
  EXPECT_THAT(exhausted, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(exhausted.status().message(),
            "requested number of devices unavailable for example.com/rdma. Requested: 1, "
            "Available: 0");
  // A resource the kubelet does not know is skipped: the Pod runs without devices (as the real
  // kubelet v1.20.2 did for a static Pod admitted before the plugin's first registration).
  auto skipped = sim.Allocate("example.com/other", 1, "pod-x", "c", &chosen);
  ASSERT_OK(skipped);
  EXPECT_THAT(chosen, IsEmpty());
  EXPECT_EQ(skipped->devices_size(), 0);
  EXPECT_EQ(sim.AllocateCalls("example.com/other"), 0);

  // Pod deletion frees its devices.
  sim.RemovePod("pod-a");
  ASSERT_OK(sim.Allocate(kResource, 2, "pod-c", "c", &chosen));
  EXPECT_THAT(chosen, ElementsAre("rdma1", "rdma2"));
  EXPECT_EQ(sim.AllocateCalls(kResource), 3);

  // Raw call: exactly what the test asks for.
  auto raw = sim.AllocateIds(kResource, {"rdma3"});
  ASSERT_OK(raw);
  EXPECT_EQ(raw->container_responses(0).envs().at("RDMA_DEVICES"), "rdma3");
}

TEST_F(KubeletSimTest, AllocateAsksForAPreferredAllocationAndIntersectsTheAnswer) {
  KubeletSim& sim = NewSim();
  ASSERT_OK(sim.Start());
  FakePluginConfig config;
  config.options.set_get_preferred_allocation_available(true);
  // One usable preference, one unhealthy device and one unknown id.
  config.preferred_answer = {"rdma10", "rdma3", "bogus"};
  auto plugin = StartAndRegister("fake.sock", FourDevices(), config);
  ASSERT_TRUE(WaitForMessages(1));

  std::vector<std::string> chosen;
  ASSERT_OK(sim.Allocate(kResource, 2, "pod", "c", &chosen));
  EXPECT_THAT(chosen, ElementsAre("rdma10", "rdma1"));  // preference, then own choice
  auto preferred = plugin->preferred_requests();
  ASSERT_EQ(preferred.size(), 1u);
  ASSERT_EQ(preferred[0].container_requests_size(), 1);
  const auto& request = preferred[0].container_requests(0);
  EXPECT_THAT(request.available_deviceids(), UnorderedElementsAre("rdma1", "rdma2", "rdma10"));
  EXPECT_THAT(request.must_include_deviceids(), IsEmpty());
  EXPECT_EQ(request.allocation_size(), 2);
  EXPECT_THAT(plugin->allocate_requests()[0].container_requests(0).devices_ids(),
              ElementsAre("rdma10", "rdma1"));

  // Raw call passes through unchanged.
  auto raw = sim.Preferred(kResource, {"x", "y"}, {"x"}, 1);
  ASSERT_OK(raw);
  EXPECT_EQ(plugin->preferred_requests().back().container_requests(0).must_include_deviceids(0),
            "x");
}

TEST_F(KubeletSimTest, AllocateFailsOnAnEmptyContainerResponseListAndFreesTheDevices) {
  KubeletSim& sim = NewSim();
  ASSERT_OK(sim.Start());
  FakePluginConfig config;
  config.empty_allocate = true;
  auto plugin = StartAndRegister("fake.sock", {Dev("a", "Healthy")}, config);
  ASSERT_TRUE(WaitForMessages(1));
  auto response = sim.Allocate(kResource, 1, "pod", "c");
  EXPECT_THAT(response, StatusIs(absl::StatusCode::kInternal));
  EXPECT_THAT(response.status().message(),
              HasSubstr("no containers return in allocation response"));
  EXPECT_THAT(sim.Allocations(), IsEmpty());
  // The device was not leaked: the next attempt gets it again.
  EXPECT_THAT(sim.Allocate(kResource, 1, "pod2", "c").status().message(),
              HasSubstr("no containers return"));
}

TEST_F(KubeletSimTest, PreStartContainerOnlyWhenRequired) {
  KubeletSim& sim = NewSim();
  ASSERT_OK(sim.Start());
  auto plain = StartAndRegister("plain.sock", {Dev("a", "Healthy")});
  ASSERT_TRUE(WaitForMessages(1));
  ASSERT_OK(sim.Allocate(kResource, 1, "pod", "c"));
  ASSERT_OK(sim.StartContainer("pod", "c"));
  EXPECT_THAT(plain->pre_start_requests(), IsEmpty());
  EXPECT_THAT(sim.StartContainer("pod", "other"), StatusIs(absl::StatusCode::kNotFound));

  FakePluginConfig config;
  config.options.set_pre_start_required(true);
  auto pre_start = StartAndRegister("prestart.sock", {Dev("b", "Healthy")}, config);
  ASSERT_TRUE(WaitForMessages(2));
  ASSERT_OK(sim.Allocate(kResource, 1, "pod2", "c"));
  ASSERT_OK(sim.StartContainer("pod2", "c"));
  ASSERT_OK(sim.StartContainer("pod2", "c"));  // every (re)start
  auto requests = pre_start->pre_start_requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_THAT(requests[0].devices_ids(), ElementsAre("b"));
  EXPECT_EQ(sim.PreStartCalls(kResource), 2);
}

TEST_F(KubeletSimTest, StartRemovesSocketsButNotOtherFiles) {
  std::filesystem::create_directories(root_ + "/device-plugins/subdir");
  MakeStaleSocket(Dp("stale.sock"));
  { std::ofstream(Dp("kubelet_internal_checkpoint")) << "{}"; }
  { std::ofstream(Dp("notes.txt")) << "x"; }
  ASSERT_TRUE(IsSocketFile(Dp("stale.sock")));
  KubeletSim& sim = NewSim();
  ASSERT_OK(sim.Start());
  EXPECT_FALSE(PathExists(Dp("stale.sock")));
  EXPECT_TRUE(PathExists(Dp("kubelet_internal_checkpoint")));
  EXPECT_TRUE(PathExists(Dp("notes.txt")));
  EXPECT_TRUE(IsDirectory(Dp("subdir")));
  EXPECT_TRUE(IsSocketFile(sim.KubeletSocket()));
}

TEST_F(KubeletSimTest, RestartDeletesSocketsKeepsFilesAndWaitsForReregistration) {
  KubeletSim& sim = NewSim();
  ASSERT_OK(sim.Start());
  auto plugin = StartAndRegister("fake.sock", FourDevices());
  ASSERT_TRUE(WaitForMessages(1));
  ASSERT_OK(sim.Allocate(kResource, 1, "pod", "c"));
  { std::ofstream(Dp("DEPRECATION")); }
  { std::ofstream(Dp("notes.txt")) << "x"; }
  ASSERT_TRUE(PathExists(sim.CheckpointPath()));
  const absl::Time first_created = sim.KubeletSocketCreatedAt();

  ASSERT_OK(sim.Restart());
  EXPECT_EQ(sim.RestartCount(), 1);
  EXPECT_FALSE(PathExists(Dp("fake.sock")));  // the plugin's socket is gone
  EXPECT_TRUE(PathExists(sim.CheckpointPath()));
  EXPECT_TRUE(PathExists(Dp("DEPRECATION")));
  EXPECT_TRUE(PathExists(Dp("notes.txt")));
  EXPECT_TRUE(IsSocketFile(sim.KubeletSocket()));
  EXPECT_GT(sim.KubeletSocketCreatedAt(), first_created);
  // Known from the checkpoint, but stopped with no devices until re-registration.
  EXPECT_THAT(sim.Resources(), ElementsAre(kResource));
  EXPECT_TRUE(sim.EndpointStopped(kResource));
  EXPECT_EQ(sim.Capacity(kResource), 0);
  EXPECT_THAT(sim.Allocations(), ::testing::SizeIs(1));
  EXPECT_THAT(sim.Allocate(kResource, 1, "pod2", "c").status().message(),
              HasSubstr("no healthy devices present"));

  // The plugin restarts its server on a fresh socket and registers again.
  plugin->Stop();
  plugin = StartAndRegister("fake.sock", FourDevices());
  ASSERT_TRUE(WaitForMessages(2));
  EXPECT_FALSE(sim.EndpointStopped(kResource));
  EXPECT_EQ(sim.Allocatable(kResource), 3);
  auto events = sim.Registrations();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_GE(events[1].at, sim.KubeletSocketCreatedAt());
  // The earlier allocation survived: its devices are still taken.
  std::vector<std::string> chosen;
  ASSERT_OK(sim.Allocate(kResource, 2, "pod2", "c", &chosen));
  EXPECT_THAT(chosen, ElementsAre("rdma2", "rdma10"));
}

TEST_F(KubeletSimTest, CheckpointHasTheKubeletShape) {
  KubeletSim& sim = NewSim();
  ASSERT_OK(sim.Start());
  auto plugin = StartAndRegister("fake.sock", {Dev("a", "Healthy", {0}), Dev("b", "Healthy")});
  ASSERT_TRUE(WaitForMessages(1));
  ASSERT_OK(sim.Allocate(kResource, 2, "uid-1", "main"));
  auto text = ReadFile(sim.CheckpointPath());
  ASSERT_OK(text);
  auto doc = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(doc.is_discarded());
  const auto& entry = doc["Data"]["PodDeviceEntries"][0];
  EXPECT_EQ(entry["PodUID"], "uid-1");
  EXPECT_EQ(entry["ContainerName"], "main");
  EXPECT_EQ(entry["ResourceName"], kResource);
  EXPECT_EQ(entry["DeviceIDs"]["0"], nlohmann::json({"a"}));
  EXPECT_EQ(entry["DeviceIDs"]["-1"], nlohmann::json({"b"}));
  EXPECT_TRUE(entry["AllocResp"].is_string());
  EXPECT_EQ(doc["Data"]["RegisteredDevices"][kResource], nlohmann::json({"a", "b"}));
}

// ---- kubelet v1.20 (what the real kubelet v1.20.2 does, test/realkubelet) ----

KubeletSimOptions V120(absl::Duration dial_timeout = absl::Seconds(10)) {
  KubeletSimOptions options;
  options.version = KubeletVersion::kV1_20;
  options.dial_timeout = dial_timeout;
  return options;
}

TEST_F(KubeletSimTest, V120RegisterTakesOptionsFromTheRequestAndNeverAsksThePlugin) {
  KubeletSim& sim = NewSim(V120());
  ASSERT_OK(sim.Start());
  FakePluginConfig config;
  config.fail_options = true;  // a current kubelet would refuse this plugin
  config.options.set_get_preferred_allocation_available(true);
  auto plugin = StartAndRegister("fake.sock", FourDevices(), config);
  ASSERT_TRUE(WaitForMessages(1));
  EXPECT_EQ(plugin->options_calls(), 0);
  auto options = sim.PluginOptions(kResource);
  ASSERT_TRUE(options.has_value());
  EXPECT_TRUE(options->get_preferred_allocation_available());
  ASSERT_OK(sim.Allocate(kResource, 1, "pod", "c"));
  EXPECT_EQ(sim.PreferredAllocationCalls(kResource), 1);
}

TEST_F(KubeletSimTest, V120RegisterAnswersBeforeDialingSoADialFailureNeverReachesThePlugin) {
  KubeletSim& sim = NewSim(V120(absl::Milliseconds(300)));
  ASSERT_OK(sim.Start());
  FakePlugin plugin(Dp("fake.sock"), {});
  ASSERT_TRUE(plugin.Start());
  const absl::Time before = MonotonicNow();
  grpc::Status status = plugin.Register(sim.KubeletSocket(), "missing.sock", kResource);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_LT(MonotonicNow() - before, absl::Milliseconds(300));  // not after the dial
  ASSERT_TRUE(sim.WaitFor([&] { return !sim.Registrations().empty(); }, kWait));
  auto events = sim.Registrations();
  EXPECT_FALSE(events[0].ok);
  EXPECT_EQ(events[0].error, "failed to dial device plugin: context deadline exceeded");
  EXPECT_THAT(sim.Resources(), IsEmpty());
}

TEST_F(KubeletSimTest, V120StartRemovesEveryFileButTheCheckpoint) {
  std::filesystem::create_directories(root_ + "/device-plugins/subdir");
  MakeStaleSocket(Dp("stale.sock"));
  { std::ofstream(Dp("kubelet_internal_checkpoint")) << "{}"; }
  { std::ofstream(Dp("notes.txt")) << "x"; }
  { std::ofstream(Dp("DEPRECATION")); }
  KubeletSim& sim = NewSim(V120());
  ASSERT_OK(sim.Start());
  EXPECT_FALSE(PathExists(Dp("stale.sock")));
  EXPECT_FALSE(PathExists(Dp("notes.txt")));
  EXPECT_FALSE(PathExists(Dp("DEPRECATION")));
  EXPECT_TRUE(PathExists(Dp("kubelet_internal_checkpoint")));
  EXPECT_TRUE(IsDirectory(Dp("subdir")));
  EXPECT_TRUE(IsSocketFile(sim.KubeletSocket()));
}

TEST_F(KubeletSimTest, V120CheckpointKeysDeviceIdsByNumaAndAnEmptyResourceIsUnavailable) {
  KubeletSim& sim = NewSim(V120());
  ASSERT_OK(sim.Start());
  auto plugin = StartAndRegister("fake.sock", {Dev("a", "Healthy", {0}), Dev("b", "Healthy")});
  ASSERT_TRUE(WaitForMessages(1));
  ASSERT_OK(sim.Allocate(kResource, 2, "uid-1", "main"));
  auto text = ReadFile(sim.CheckpointPath());
  ASSERT_OK(text);
  auto doc = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(doc.is_discarded());
  // As the real v1.20.2 writes it (DevicesPerNUMA, seen in test/realkubelet case 2).
  EXPECT_EQ(doc["Data"]["PodDeviceEntries"][0]["DeviceIDs"]["0"], nlohmann::json({"a"}));
  EXPECT_EQ(doc["Data"]["PodDeviceEntries"][0]["DeviceIDs"]["-1"], nlohmann::json({"b"}));

  ASSERT_OK(sim.Restart());  // known from the checkpoint, no devices until re-registration
  EXPECT_EQ(sim.Allocate(kResource, 1, "uid-2", "main").status().message(),
            "requested number of devices unavailable for example.com/rdma. Requested: 1, "
            "Available: 0");
}

class KubeletSimWatcherTest : public KubeletSimTest {
 protected:
  KubeletSimOptions WatcherOptions() {
    KubeletSimOptions options;
    options.watcher_reconcile_period = absl::Milliseconds(50);
    options.watcher_initial_backoff = absl::Milliseconds(50);
    return options;
  }
  std::string Reg(const std::string& name) const { return root_ + "/plugins_registry/" + name; }
};

TEST_F(KubeletSimWatcherTest, RegistersThroughThePluginWatcherAndDeregistersOnDeletion) {
  KubeletSim& sim = NewSim(WatcherOptions());
  ASSERT_OK(sim.StartWatcher());
  EXPECT_TRUE(PathExists(Dp("DEPRECATION")));
  FakePluginConfig config;
  config.info_endpoint = Reg("efa.sock");  // absolute, one socket serves both services
  config.info_versions = {"v1alpha1", "v1beta1"};
  FakePlugin plugin(Reg("efa.sock"), config);
  plugin.SetDevices({Dev("a", "Healthy", {0})});
  ASSERT_TRUE(plugin.Start());

  ASSERT_TRUE(WaitForMessages(1));
  ASSERT_TRUE(sim.WaitFor([&] { return !plugin.notifications().empty(); }, kWait));
  auto notes = plugin.notifications();
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_TRUE(notes[0].plugin_registered());
  EXPECT_EQ(notes[0].error(), "");
  EXPECT_EQ(plugin.options_calls(), 1);
  EXPECT_EQ(sim.EndpointPath(kResource), Reg("efa.sock"));
  auto events = sim.Registrations();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].path, RegistrationPath::kPluginWatcher);
  EXPECT_TRUE(events[0].ok);
  EXPECT_EQ(events[0].version, "[v1alpha1 v1beta1]");

  // Removing the registration socket deregisters: all devices unhealthy.
  ASSERT_EQ(::unlink(Reg("efa.sock").c_str()), 0);
  ASSERT_TRUE(sim.WaitFor([&] { return sim.EndpointStopped(kResource); }, kWait));
  EXPECT_EQ(sim.Allocatable(kResource), 0);
}

TEST_F(KubeletSimWatcherTest, ValidationFailureIsNotifiedAndIgnoresDotAndNonSocketFiles) {
  KubeletSim& sim = NewSim(WatcherOptions());
  ASSERT_OK(sim.StartWatcher());
  { std::ofstream(Reg("not-a-socket")) << "x"; }
  FakePluginConfig hidden_config;
  FakePlugin hidden(Reg(".hidden.sock"), hidden_config);
  ASSERT_TRUE(hidden.Start());
  FakePluginConfig config;
  config.info_versions = {"v1alpha1"};
  FakePlugin plugin(Reg("old.sock"), config);
  ASSERT_TRUE(plugin.Start());

  ASSERT_TRUE(sim.WaitFor([&] { return plugin.notifications().size() >= 2; }, kWait));
  auto note = plugin.notifications()[0];
  EXPECT_FALSE(note.plugin_registered());
  EXPECT_EQ(note.error(),
            "RegisterPlugin error -- plugin validation failed with err: manager version, v1beta1, "
            "is not among plugin supported versions [v1alpha1]");
  EXPECT_EQ(plugin.options_calls(), 0);
  EXPECT_THAT(hidden.notifications(), IsEmpty());
  EXPECT_THAT(sim.Resources(), IsEmpty());
}

TEST_F(KubeletSimWatcherTest, AStaleSocketDoesNotHoldUpOtherPlugins) {
  KubeletSim& sim = NewSim(WatcherOptions());  // watcher dial timeout stays 10 s
  ASSERT_OK(sim.StartWatcher());
  MakeStaleSocket(Reg("a-stale.sock"));  // sorts before good.sock
  FakePluginConfig config;
  FakePlugin plugin(Reg("good.sock"), config);
  plugin.SetDevices({Dev("a", "Healthy")});
  ASSERT_TRUE(plugin.Start());
  const absl::Time start = MonotonicNow();
  ASSERT_TRUE(WaitForMessages(1));
  EXPECT_LT(MonotonicNow() - start, absl::Seconds(5));
  // Stop does not wait out the stale socket's 10 s dial either.
  const absl::Time stop = MonotonicNow();
  sim.Stop();
  EXPECT_LT(MonotonicNow() - stop, absl::Seconds(2));
}

TEST_F(KubeletSimWatcherTest, InvalidNameIsRejectedWithTheWatcherText) {
  KubeletSim& sim = NewSim(WatcherOptions());
  ASSERT_OK(sim.StartWatcher());
  FakePluginConfig config;
  config.info_name = "rdma";
  FakePlugin plugin(Reg("bad.sock"), config);
  ASSERT_TRUE(plugin.Start());
  ASSERT_TRUE(sim.WaitFor([&] { return !plugin.notifications().empty(); }, kWait));
  EXPECT_EQ(plugin.notifications()[0].error(),
            "RegisterPlugin error -- plugin validation failed with err: invalid name of device "
            "plugin socket: the ResourceName \"rdma\" is invalid");
}

// ------------------------------------------------------------ the CLI binary

// Runs the kubelet-sim binary with stdout/stderr to files; returns its pid.
pid_t SpawnCli(const std::vector<std::string>& args, const std::string& out,
               const std::string& err) {
  const char* dir = std::getenv("FABRIC_BINARY_DIR");
  const std::string binary = std::string(dir) + "/tools/kubelet-sim/kubelet-sim";
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  if (posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

int WaitExit(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Polls a filesystem condition the way a plugin would (the CLI runs in
// another process, so there is no event to wait on).
bool PollFor(const std::function<bool()>& pred, absl::Duration timeout) {
  const absl::Time deadline = MonotonicNow() + timeout;
  while (!pred()) {
    if (MonotonicNow() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

class KubeletSimCliTest : public KubeletSimTest {
 protected:
  void SetUp() override {
    if (std::getenv("FABRIC_BINARY_DIR") == nullptr) GTEST_SKIP() << "FABRIC_BINARY_DIR unset";
    KubeletSimTest::SetUp();
  }
};

TEST_F(KubeletSimCliTest, ReportsRegistrationDevicesAllocationAndRestart) {
  const std::string out = root_ + "/out.txt";
  const std::string err = root_ + "/err.txt";
  pid_t pid = SpawnCli({"--root", root_, "--expect-resources", "1", "--allocate",
                        "example.com/rdma=2", "--restart", "--timeout", "10s"},
                       out, err);
  ASSERT_GT(pid, 0);
  const std::string kubelet_sock = Dp("kubelet.sock");
  ASSERT_TRUE(PollFor([&] { return IsSocketFile(kubelet_sock); }, kWait));
  auto plugin = std::make_unique<FakePlugin>(Dp("fake.sock"), FakePluginConfig{});
  plugin->SetDevices(FourDevices());
  ASSERT_TRUE(plugin->Start());
  ASSERT_TRUE(plugin->Register(kubelet_sock, "fake.sock", kResource).ok());
  // A kubelet restart deletes our socket; serve again and re-register, as a
  // plugin does.
  ASSERT_TRUE(PollFor([&] { return !PathExists(Dp("fake.sock")); }, kWait));
  plugin->Stop();
  plugin = std::make_unique<FakePlugin>(Dp("fake.sock"), FakePluginConfig{});
  plugin->SetDevices(FourDevices());
  ASSERT_TRUE(plugin->Start());
  ASSERT_TRUE(PollFor([&] { return IsSocketFile(kubelet_sock); }, kWait));
  ASSERT_TRUE(plugin->Register(kubelet_sock, "fake.sock", kResource).ok());

  EXPECT_EQ(WaitExit(pid), 0);
  auto text = ReadFile(out);
  ASSERT_OK(text);
  std::printf("--- kubelet-sim report ---\n%s", text->c_str());
  EXPECT_THAT(*text, HasSubstr("resource=example.com/rdma endpoint=fake.sock"));
  EXPECT_THAT(*text, HasSubstr("example.com/rdma: capacity 4, allocatable 3"));
  EXPECT_THAT(*text, ::testing::ContainsRegex("rdma3 +Unhealthy +numa \\[1\\]"));
  EXPECT_THAT(*text, HasSubstr("example.com/rdma x2 -> [rdma1, rdma2]"));
  EXPECT_THAT(*text, HasSubstr("/dev/infiniband/rdma1 -> /dev/infiniband/rdma1 (rw)"));
  EXPECT_THAT(*text, HasSubstr("RDMA_DEVICES=rdma1,rdma2"));
  EXPECT_THAT(*text, HasSubstr("example.com/rdma=rdma2"));
  EXPECT_THAT(*text, ::testing::ContainsRegex(
                         "example.com/rdma: re-registered [0-9.]+ ms after kubelet.sock"));
}

TEST_F(KubeletSimCliTest, TimesOutWithAClearMessage) {
  const std::string out = root_ + "/out.txt";
  const std::string err = root_ + "/err.txt";
  pid_t pid = SpawnCli({"--root", root_, "--timeout", "200ms"}, out, err);
  ASSERT_GT(pid, 0);
  EXPECT_EQ(WaitExit(pid), 2);
  auto text = ReadFile(err);
  ASSERT_OK(text);
  EXPECT_THAT(*text, HasSubstr("timeout: waited 200ms for 1 resource(s)"));
  EXPECT_THAT(*text, HasSubstr("no registration attempt seen"));
}

}  // namespace
}  // namespace fabric::sim
