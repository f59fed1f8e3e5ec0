#include "agent/podresources/podresources_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include "test/fakes/fake_podresources_server.h"
#include "test/testing/status_matchers.h"

namespace fabric::podresources {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

class PodResourcesClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/prtXXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    socket_ = dir_ + "/kubelet.sock";
    server_.SetPods({
        {"ns1",
         "pod-a",
         {{"main",
           {{"fabric.io/efa", "efa0", {0, 1}},  // two NUMA nodes -> two entries
            {"fabric.io/efa", "efa1", {0}},
            {"fabric.io/rdma", "mlx5_0", {}}}},
          {"sidecar", {{"fabric.io/efa", "efa2", {1}}}}}},
        {"ns1", "pod-b", {{"main", {}}}},
    });
    ASSERT_OK(server_.Start(socket_));
  }
  void TearDown() override {
    server_.Stop();
    std::system(("rm -rf " + dir_).c_str());
  }

  PodResourcesClientOptions Options() {
    PodResourcesClientOptions o;
    o.socket_path = socket_;
    o.qps = 1000;
    o.burst = 1000;
    return o;
  }

  std::string dir_, socket_;
  FakePodResourcesServer server_;
};

TEST_F(PodResourcesClientTest, GetMergesPerNumaDuplicates) {
  server_.EnableGet(true);
  PodResourcesClient client(Options());
  auto devices = client.GetPodDevices("ns1", "pod-a");
  ASSERT_OK(devices.status());
  EXPECT_THAT(*devices,
              ElementsAre(PodDevices{"ns1", "pod-a", "main", "fabric.io/efa", {"efa0", "efa1"}},
                          PodDevices{"ns1", "pod-a", "main", "fabric.io/rdma", {"mlx5_0"}},
                          PodDevices{"ns1", "pod-a", "sidecar", "fabric.io/efa", {"efa2"}}));
  EXPECT_EQ(server_.get_calls(), 1);
  EXPECT_EQ(server_.list_calls(), 0);
}

TEST_F(PodResourcesClientTest, GetDisabledFallsBackToListAndRemembers) {
  PodResourcesClient client(Options());
  auto devices = client.GetPodDevices("ns1", "pod-a");
  ASSERT_OK(devices.status());
  EXPECT_EQ(devices->size(), 3u);
  EXPECT_EQ((*devices)[0].device_ids, (std::vector<std::string>{"efa0", "efa1"}));
  EXPECT_TRUE(client.get_disabled());
  ASSERT_OK(client.GetPodDevices("ns1", "pod-b").status());
  EXPECT_EQ(server_.get_calls(), 1);  // not asked again
  EXPECT_EQ(server_.list_calls(), 2);
}

TEST_F(PodResourcesClientTest, UnknownPodIsNotFoundWithGetAndEmptyWithList) {
  server_.EnableGet(true);
  PodResourcesClient client(Options());
  EXPECT_THAT(client.GetPodDevices("ns1", "nope"), StatusIs(absl::StatusCode::kNotFound));
  PodResourcesClientOptions o = Options();
  o.use_get = false;
  PodResourcesClient list_client(o);
  auto devices = list_client.GetPodDevices("ns1", "nope");
  ASSERT_OK(devices.status());
  EXPECT_THAT(*devices, IsEmpty());
}

TEST_F(PodResourcesClientTest, PodWithoutDevicesIsEmpty) {
  server_.EnableGet(true);
  PodResourcesClient client(Options());
  auto devices = client.GetPodDevices("ns1", "pod-b");
  ASSERT_OK(devices.status());
  EXPECT_THAT(*devices, IsEmpty());
}

TEST_F(PodResourcesClientTest, ServerRateLimitIsRetriedThenReported) {
  server_.SetRateLimit(0.001, 2);  // two calls, then nothing for a long time
  PodResourcesClientOptions o = Options();
  o.retries_on_rate_limit = 1;
  PodResourcesClient client(o);
  ASSERT_OK(client.ListPodDevices().status());
  ASSERT_OK(client.ListPodDevices().status());
  EXPECT_THAT(client.ListPodDevices(), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(server_.rejected_calls(), 2);  // first try + one retry
}

TEST_F(PodResourcesClientTest, KubeletDefaultLimiterRejectsBurstAbove10) {
  PodResourcesClientOptions o = Options();
  o.retries_on_rate_limit = 0;
  PodResourcesClient client(o);
  int ok = 0, exhausted = 0;
  for (int i = 0; i < 30; ++i) {
    auto r = client.ListPodDevices();
    if (r.ok())
      ++ok;
    else if (r.status().code() == absl::StatusCode::kResourceExhausted)
      ++exhausted;
  }
  EXPECT_GE(ok, 10);
  EXPECT_GT(exhausted, 0);
}

TEST_F(PodResourcesClientTest, ClientPacingKeepsUnderServerLimit) {
  PodResourcesClientOptions o = Options();
  o.qps = 50;
  o.burst = 5;
  PodResourcesClient client(o);
  for (int i = 0; i < 30; ++i) ASSERT_OK(client.ListPodDevices().status()) << i;
  EXPECT_EQ(server_.rejected_calls(), 0);
}

TEST_F(PodResourcesClientTest, UnreachableKubeletIsUnavailable) {
  PodResourcesClientOptions o = Options();
  o.socket_path = dir_ + "/missing.sock";
  o.rpc_timeout = std::chrono::milliseconds(500);
  PodResourcesClient client(o);
  auto r = client.ListPodDevices();
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().code() == absl::StatusCode::kUnavailable ||
              r.status().code() == absl::StatusCode::kDeadlineExceeded)
      << r.status();
}

}  // namespace
}  // namespace fabric::podresources
