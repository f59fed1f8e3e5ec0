#include "plugin/dra/dra_plugin_service.h"

#include <grpcpp/grpcpp.h>

#include <fstream>
#include <thread>

#include "agent/base/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "plugin/dra/dra_health_service.h"
#include "test/fakes/fake_claim_allocations.h"
#include "test/fakes/fake_device_preparer.h"
#include "test/testing/status_matchers.h"
#include "test/testing/test_dirs.h"

namespace fabric::dra {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kNode[] = "node-1";

drav1::Claim C(const std::string& ns, const std::string& name, const std::string& uid) {
  drav1::Claim c;
  c.set_namespace_(ns);
  c.set_name(name);
  c.set_uid(uid);
  return c;
}

drav1::NodePrepareResourcesRequest PrepareReq(std::vector<drav1::Claim> claims) {
  drav1::NodePrepareResourcesRequest r;
  for (auto& c : claims) *r.add_claims() = c;
  return r;
}

drav1::NodeUnprepareResourcesRequest UnprepareReq(std::vector<drav1::Claim> claims) {
  drav1::NodeUnprepareResourcesRequest r;
  for (auto& c : claims) *r.add_claims() = c;
  return r;
}

std::vector<std::string> CdiIds(const drav1::NodePrepareResourceResponse& r) {
  std::vector<std::string> out;
  for (const auto& d : r.devices()) {
    for (const auto& id : d.cdi_device_ids()) out.push_back(id);
  }
  return out;
}

class DraPluginServiceTest : public ::testing::Test {
 protected:
  DraPluginServiceTest() : dir_("dra-svc") {
    allocations_.Set(
        {"ns",
         "two",
         "u-two",
         {{"efa", kDriverName, kNode, "efa-0"}, {"efa", kDriverName, kNode, "efa-1"}}});
    allocations_.Set({"ns", "one", "u-one", {{"rdma", kDriverName, kNode, "mlx5-0"}}});
  }
  DraPluginOptions Options() {
    DraPluginOptions o;
    o.node_name = kNode;
    o.state_dir = dir_.path() + "/dra";
    return o;
  }
  std::unique_ptr<DraPluginService> NewService() {
    return std::make_unique<DraPluginService>(Options(), &allocations_, &preparer_);
  }

  testing::TempDir dir_;
  FakeClaimAllocations allocations_;
  FakeDevicePreparer preparer_;
};

TEST_F(DraPluginServiceTest, PreparesEveryClaimOfTheRequest) {
  auto svc = NewService();
  auto resp = svc->Prepare(PrepareReq({C("ns", "two", "u-two"), C("ns", "one", "u-one")}));
  ASSERT_EQ(resp.claims().size(), 2u);
  const auto& two = resp.claims().at("u-two");
  EXPECT_EQ(two.error(), "");
  ASSERT_EQ(two.devices_size(), 2);
  EXPECT_THAT(two.devices(0).request_names(), ElementsAre("efa"));
  EXPECT_EQ(two.devices(0).pool_name(), kNode);
  EXPECT_EQ(two.devices(0).device_name(), "efa-0");
  EXPECT_THAT(CdiIds(two), ElementsAre("fabric.gpustack.ai/device=u-two-efa-0",
                                       "fabric.gpustack.ai/device=u-two-efa-1"));
  EXPECT_THAT(CdiIds(resp.claims().at("u-one")),
              ElementsAre("fabric.gpustack.ai/device=u-one-mlx5-0"));
  EXPECT_EQ(preparer_.prepare_calls(), 2);
  DraPluginStats stats = svc->Stats();
  EXPECT_EQ(stats.prepared_claims, 2u);
  EXPECT_EQ(stats.prepare_calls, 1u);
  EXPECT_EQ(stats.prepare_errors, 0u);
  EXPECT_EQ(stats.prepare_latency.count, 1u);
  // Checkpointed before the answer.
  PreparedClaims on_disk(Options().state_dir);
  ASSERT_OK(on_disk.Load());
  EXPECT_EQ(on_disk.size(), 2u);
}

TEST_F(DraPluginServiceTest, PrepareIsIdempotent) {
  auto svc = NewService();
  auto first = svc->Prepare(PrepareReq({C("ns", "two", "u-two")}));
  const int gets = allocations_.calls();
  auto second = svc->Prepare(PrepareReq({C("ns", "two", "u-two")}));
  EXPECT_EQ(preparer_.prepare_calls(), 1);
  EXPECT_EQ(allocations_.calls(), gets) << "a prepared claim needs no API read";
  EXPECT_EQ(first.SerializeAsString(), second.SerializeAsString());
  // The same UID twice in one request: one entry, one preparation.
  auto dup = svc->Prepare(PrepareReq({C("ns", "one", "u-one"), C("ns", "one", "u-one")}));
  EXPECT_EQ(dup.claims().size(), 1u);
  EXPECT_EQ(preparer_.prepare_calls(), 2);
}

TEST_F(DraPluginServiceTest, OneBadClaimIsThatClaimsErrorOnly) {
  allocations_.SetError("ns", "broken", absl::UnavailableError("API server unreachable"));
  allocations_.Set({"ns", "refused", "u-refused", {{"efa", kDriverName, kNode, "efa-9"}}});
  preparer_.FailPrepare("u-refused", absl::FailedPreconditionError("efa-9 is unhealthy"));
  auto svc = NewService();
  auto resp = svc->Prepare(PrepareReq({C("ns", "broken", "u-broken"), C("ns", "one", "u-one"),
                                       C("ns", "missing", "u-missing"),
                                       C("ns", "refused", "u-refused"), C("", "", "u-anon")}));
  ASSERT_EQ(resp.claims().size(), 5u);
  EXPECT_THAT(resp.claims().at("u-broken").error(), HasSubstr("API server unreachable"));
  EXPECT_THAT(resp.claims().at("u-broken").error(), HasSubstr("ns/broken"));
  EXPECT_THAT(resp.claims().at("u-missing").error(), HasSubstr("not found"));
  EXPECT_THAT(resp.claims().at("u-refused").error(), HasSubstr("efa-9 is unhealthy"));
  EXPECT_THAT(resp.claims().at("u-anon").error(), HasSubstr("namespace, name and UID"));
  EXPECT_EQ(resp.claims().at("u-one").error(), "");
  EXPECT_THAT(resp.claims().at("u-refused").devices(), IsEmpty());
  DraPluginStats stats = svc->Stats();
  EXPECT_EQ(stats.prepare_errors, 4u);
  EXPECT_EQ(stats.prepared_claims, 1u) << "failed claims are not checkpointed";
  // A retry after the cause is fixed prepares it.
  preparer_.FailPrepare("u-refused", absl::OkStatus());
  auto retry = svc->Prepare(PrepareReq({C("ns", "refused", "u-refused")}));
  EXPECT_EQ(retry.claims().at("u-refused").error(), "");
}

TEST_F(DraPluginServiceTest, SurvivesRestart) {
  std::string before;
  {
    auto svc = NewService();
    before = svc->Prepare(PrepareReq({C("ns", "two", "u-two")})).SerializeAsString();
  }
  auto svc = NewService();
  EXPECT_EQ(svc->Stats().prepared_claims, 1u);
  EXPECT_EQ(svc->Prepare(PrepareReq({C("ns", "two", "u-two")})).SerializeAsString(), before);
  EXPECT_EQ(preparer_.prepare_calls(), 1);
}

TEST_F(DraPluginServiceTest, UnprepareForgetsAndUnknownSucceeds) {
  auto svc = NewService();
  svc->Prepare(PrepareReq({C("ns", "two", "u-two")}));
  auto resp = svc->Unprepare(UnprepareReq({C("ns", "two", "u-two"), C("ns", "gone", "u-gone")}));
  ASSERT_EQ(resp.claims().size(), 2u);
  EXPECT_EQ(resp.claims().at("u-two").error(), "");
  EXPECT_EQ(resp.claims().at("u-gone").error(), "");
  EXPECT_FALSE(preparer_.IsPrepared("u-two"));
  EXPECT_EQ(svc->Stats().prepared_claims, 0u);
  // Unprepare again: still fine.
  EXPECT_EQ(svc->Unprepare(UnprepareReq({C("ns", "two", "u-two")})).claims().at("u-two").error(),
            "");
  // And a new prepare of the same claim prepares it again.
  svc->Prepare(PrepareReq({C("ns", "two", "u-two")}));
  EXPECT_EQ(preparer_.prepare_calls(), 2);
}

TEST_F(DraPluginServiceTest, UnprepareFailureKeepsTheClaim) {
  auto svc = NewService();
  svc->Prepare(PrepareReq({C("ns", "one", "u-one")}));
  preparer_.FailUnprepare("u-one", absl::InternalError("spec busy"));
  auto resp = svc->Unprepare(UnprepareReq({C("ns", "one", "u-one")}));
  EXPECT_THAT(resp.claims().at("u-one").error(), HasSubstr("spec busy"));
  EXPECT_EQ(svc->Stats().prepared_claims, 1u);
  EXPECT_EQ(svc->Stats().unprepare_errors, 1u);
}

TEST_F(DraPluginServiceTest, CorruptCheckpointStartsEmptyAndSaysWhich) {
  ASSERT_OK(MkdirAll(Options().state_dir));
  const std::string file = Options().state_dir + "/prepared-claims.json";
  std::ofstream(file) << "{\"version\":1,\"claims\":{\"u-two\":";
  auto svc = NewService();
  DraPluginStats stats = svc->Stats();
  EXPECT_THAT(stats.checkpoint_load_error, HasSubstr(file));
  EXPECT_EQ(stats.prepared_claims, 0u);
  auto resp = svc->Prepare(PrepareReq({C("ns", "two", "u-two")}));
  EXPECT_EQ(resp.claims().at("u-two").error(), "");
  EXPECT_EQ(preparer_.prepare_calls(), 1);
}

TEST_F(DraPluginServiceTest, CheckpointWriteFailureIsAClaimError) {
  std::ofstream(Options().state_dir) << "not a directory";
  auto svc = NewService();
  auto resp = svc->Prepare(PrepareReq({C("ns", "one", "u-one")}));
  EXPECT_THAT(resp.claims().at("u-one").error(), HasSubstr("cannot checkpoint"));
  EXPECT_THAT(resp.claims().at("u-one").devices(), IsEmpty());
}

TEST_F(DraPluginServiceTest, OneDeviceForTwoRequestsIsOneEntry) {
  allocations_.Set({"ns",
                    "admin",
                    "u-admin",
                    {{"a", kDriverName, kNode, "efa-0"}, {"b", kDriverName, kNode, "efa-0"}}});
  auto svc = NewService();
  auto resp = svc->Prepare(PrepareReq({C("ns", "admin", "u-admin")}));
  const auto& r = resp.claims().at("u-admin");
  ASSERT_EQ(r.devices_size(), 1);
  EXPECT_THAT(r.devices(0).request_names(), ElementsAre("a", "b"));
}

TEST_F(DraPluginServiceTest, ConcurrentPrepareOfOneClaimPreparesOnce) {
  auto svc = NewService();
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] { svc->Prepare(PrepareReq({C("ns", "two", "u-two")})); });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(preparer_.prepare_calls(), 1);
}

TEST_F(DraPluginServiceTest, ErrorsAreValidUtf8) {
  allocations_.SetError("ns", "bin", absl::InternalError("bad \xff byte"));
  auto svc = NewService();
  auto resp = svc->Prepare(PrepareReq({C("ns", "bin", "u-bin")}));
  EXPECT_THAT(resp.claims().at("u-bin").error(), HasSubstr("bad \xEF\xBF\xBD byte"));
}

// Both API versions over real gRPC on a unix socket.
TEST_F(DraPluginServiceTest, ServesV1AndV1beta1) {
  auto svc = NewService();
  const std::string sock = dir_.path() + "/dra.sock";
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + sock, grpc::InsecureServerCredentials());
  builder.RegisterService(svc->v1_service());
  builder.RegisterService(svc->v1beta1_service());
  auto server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto channel = grpc::CreateChannel("unix:" + sock, grpc::InsecureChannelCredentials());

  auto v1 = drav1::DRAPlugin::NewStub(channel);
  drav1::NodePrepareResourcesResponse r1;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(v1->NodePrepareResources(&ctx, PrepareReq({C("ns", "two", "u-two")}), &r1).ok());
  }
  auto beta = drav1beta1::DRAPlugin::NewStub(channel);
  drav1beta1::NodePrepareResourcesResponse r2;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(beta->NodePrepareResources(
                        &ctx,
                        ToV1beta1(PrepareReq({C("ns", "two", "u-two"), C("ns", "one", "u-one")})),
                        &r2)
                    .ok());
  }
  ASSERT_EQ(r2.claims().size(), 2u);
  EXPECT_EQ(ToV1(r2).claims().at("u-two").SerializeAsString(),
            r1.claims().at("u-two").SerializeAsString());
  EXPECT_THAT(r2.claims().at("u-one").devices(0).cdi_device_ids(),
              ElementsAre("fabric.gpustack.ai/device=u-one-mlx5-0"));
  drav1beta1::NodeUnprepareResourcesResponse u;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(
        beta->NodeUnprepareResources(&ctx, ToV1beta1(UnprepareReq({C("ns", "two", "u-two")})), &u)
            .ok());
  }
  EXPECT_EQ(u.claims().at("u-two").error(), "");
  EXPECT_EQ(svc->Stats().prepared_claims, 1u);
  EXPECT_EQ(preparer_.prepare_calls(), 2);
  server->Shutdown();
}

TEST(DraHealthServiceTest, PublishOnlyChangesBumpTheMessage) {
  DraHealthService health(kNode);
  health.Publish({{"efa-0", true, ""}, {"efa-1", false, "port DOWN"}});
  auto m = health.Current();
  ASSERT_EQ(m.devices_size(), 2);
  EXPECT_EQ(m.devices(0).device().pool_name(), kNode);
  EXPECT_EQ(m.devices(0).device().device_name(), "efa-0");
  EXPECT_EQ(m.devices(0).health(), ::v1alpha1::HEALTHY);
  EXPECT_EQ(m.devices(1).health(), ::v1alpha1::UNHEALTHY);
  EXPECT_EQ(m.devices(1).message(), "port DOWN");
  EXPECT_GT(m.devices(1).last_updated_time(), 1700000000);
  health.Publish({{"efa-0", true, ""}, {"efa-1", false, std::string(2000, 'x')}});
  EXPECT_EQ(health.Current().devices(1).message().size(), 1024u);
}

}  // namespace
}  // namespace fabric::dra
