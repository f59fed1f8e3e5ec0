#include "plugin/deviceplugin/device_plugin_service.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "agent/status/node_status.h"
#include "gtest/gtest.h"
#include "test/testing/test_dirs.h"

namespace fabric {
namespace {

RdmaDevice Efa(const std::string& name, int uverbs) {
  RdmaDevice d;
  d.name = name;
  d.kind = DeviceKind::kEfa;
  d.pci = PciInfo{"0000:00:00.0", 0x1d0fu, 0xefa1u, "", 0, "", 0};
  d.uverbs = CharDevice{"infiniband/uverbs" + std::to_string(uverbs), 231,
                        static_cast<uint32_t>(192 + uverbs)};
  return d;
}

// One exclusive EFA pool served over a unix socket, its grants recorded
// through a claimer the test controls.
class DevicePluginServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { Serve(nullptr); }
  void Serve(DevicePluginService::AllocateCheck check) {
    if (server_) server_->Shutdown();
    config_.name = "vpc.amazonaws.com/efa";
    config_.mode = PoolMode::kExclusive;
    SnapshotInputs in;
    in.pool = &config_;
    in.devices = {Efa("rdmap0", 0), Efa("rdmap1", 1)};
    pool_ = std::make_shared<PoolState>(BuildSnapshot(in));
    service_ = std::make_unique<DevicePluginService>(pool_, std::move(check));
    const std::string socket = dir_.path() + "/dp.sock";
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1beta1::DevicePlugin::NewStub(
        grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  grpc::Status Allocate(const std::string& id, v1beta1::AllocateResponse* out = nullptr) {
    v1beta1::AllocateRequest req;
    req.add_container_requests()->add_devices_ids(id);
    v1beta1::AllocateResponse resp;
    grpc::ClientContext ctx;
    grpc::Status s = stub_->Allocate(&ctx, req, &resp);
    if (out) *out = resp;
    return s;
  }

  // The counters as /metrics renders them.
  PoolMetrics Rendered() {
    status::StatusInput in;
    PoolRegistry::PoolView view;
    view.config = config_;
    view.state = pool_;
    view.snapshot = pool_->snapshot();
    in.pools.pools.push_back(view);
    return status::BuildMetricsInput(in).pools.at(0);
  }

  PoolConfig config_;
  testing::TempDir dir_{"dpsvc"};
  std::shared_ptr<PoolState> pool_;
  std::unique_ptr<DevicePluginService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1beta1::DevicePlugin::Stub> stub_;
};

// fabric_allocate_requests_total{result="ok"} counts completed grants only: an
// Allocate still in flight is not "ok", and one that then fails never takes
// back an ok it was never given. (Derived as calls - errors, it read 1 while
// the call was in flight and 0 after it failed: a counter going down.)
TEST_F(DevicePluginServiceTest, OkCountsAtCompletionAndNeverGoesDown) {
  absl::Notification claiming, refuse;
  pool_->SetClaimer([&](const std::string&, const std::vector<std::string>&) {
    claiming.Notify();
    refuse.WaitForNotification();
    return absl::AlreadyExistsError("rdmap0 was granted through another pool");
  });
  grpc::Status refused;
  std::thread call([&] { refused = Allocate("rdmap0"); });
  claiming.WaitForNotification();  // the Allocate is in flight, inside its claim
  PoolMetrics in_flight = Rendered();
  EXPECT_EQ(in_flight.allocate_ok, 0u);
  EXPECT_EQ(in_flight.allocate_error, 0u);
  refuse.Notify();
  call.join();
  EXPECT_FALSE(refused.ok());
  PoolMetrics after = Rendered();
  EXPECT_GE(after.allocate_ok, in_flight.allocate_ok) << "a counter went down";
  EXPECT_EQ(after.allocate_ok, 0u);
  EXPECT_EQ(after.allocate_error, 1u);

  pool_->SetClaimer(nullptr);
  ASSERT_TRUE(Allocate("rdmap1").ok());
  EXPECT_FALSE(Allocate("no-such-device").ok());
  PoolMetrics last = Rendered();
  EXPECT_EQ(last.allocate_ok, 1u);
  EXPECT_EQ(last.allocate_error, 2u);
  EXPECT_EQ(pool_->stats().allocate_calls.load(), 3u);
}

// The allocate check (the agent's: is this pool's CDI spec written?) refuses
// before anything is claimed, with its message, and counts as an error.
TEST_F(DevicePluginServiceTest, AllocateCheckRefusesBeforeClaimingWithItsMessage) {
  std::atomic<bool> refuse{true};
  Serve([&](const PoolSnapshot& snap) {
    EXPECT_EQ(snap.resource, "vpc.amazonaws.com/efa");
    return refuse ? absl::UnavailableError("CDI spec not written: make /var/run/cdi writable")
                  : absl::OkStatus();
  });
  std::atomic<int> claims{0};
  pool_->SetClaimer([&](const std::string&, const std::vector<std::string>&) {
    ++claims;
    return absl::OkStatus();
  });
  v1beta1::AllocateResponse resp;
  grpc::Status refused = Allocate("rdmap0", &resp);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(refused.error_message(), "CDI spec not written: make /var/run/cdi writable");
  EXPECT_EQ(resp.container_responses_size(), 0);
  EXPECT_EQ(claims, 0);
  refuse = false;
  EXPECT_TRUE(Allocate("rdmap0").ok());
  EXPECT_EQ(claims, 1);
  PoolMetrics m = Rendered();
  EXPECT_EQ(m.allocate_ok, 1u);
  EXPECT_EQ(m.allocate_error, 1u);
}

}  // namespace
}  // namespace fabric
