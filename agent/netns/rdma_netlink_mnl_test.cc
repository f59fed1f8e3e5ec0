#include "agent/netns/rdma_netlink_mnl.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "test/fakes/fake_rdma_netlink.h"
#include "test/testing/status_matchers.h"

namespace fabric::netns {
namespace {

using ::testing::HasSubstr;

// The real netlink path on whatever kernel runs the test: either RDMA netlink
// works (then listing must succeed) or the error must say why.
TEST(MnlRdmaNetlinkTest, ModeAndListWorkOrExplainWhy) {
  auto nl = MnlRdmaNetlink::Create();
  if (!nl.ok()) GTEST_SKIP() << "cannot capture own netns: " << nl.status();
  auto mode = (*nl)->GetNetnsMode();
  if (!mode.ok()) {
    EXPECT_THAT(std::string(mode.status().message()), HasSubstr("NETLINK_RDMA"));
    auto links = (*nl)->ListDevices("");
    EXPECT_FALSE(links.ok());
    return;
  }
  EXPECT_OK((*nl)->ListDevices("").status());
}

TEST(MnlRdmaNetlinkTest, MoveOfUnknownDeviceNamesIt) {
  auto nl = MnlRdmaNetlink::Create();
  if (!nl.ok()) GTEST_SKIP() << nl.status();
  absl::Status s = (*nl)->MoveDevice("nosuchdev0", "", "/tmp");
  ASSERT_FALSE(s.ok());
  if ((*nl)->GetNetnsMode().ok()) {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kNotFound));
    EXPECT_THAT(std::string(s.message()), HasSubstr("nosuchdev0"));
  }
}

TEST(MnlRdmaNetlinkTest, MissingNetnsPathIsReported) {
  auto nl = MnlRdmaNetlink::Create();
  if (!nl.ok()) GTEST_SKIP() << nl.status();
  auto links = (*nl)->ListDevices("/tmp/no-such-netns-path");
  ASSERT_FALSE(links.ok());
  EXPECT_THAT(links, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(std::string(links.status().message()), HasSubstr("/tmp/no-such-netns-path"));
}

TEST(FakeRdmaNetlinkTest, ExclusiveModeMovesAndScopesVisibility) {
  FakeRdmaNetlink nl;
  nl.SetMode(NetnsMode::kExclusive);
  nl.AddDevice("mlx5_0");
  nl.AddDevice("efa0");
  nl.RefuseMoves("efa0");
  ASSERT_OK(nl.MoveDevice("mlx5_0", "", "/run/netns/p"));
  EXPECT_EQ(nl.Location("mlx5_0"), "/run/netns/p");
  EXPECT_THAT(nl.MoveDevice("efa0", "", "/run/netns/p"),
              StatusIs(absl::StatusCode::kUnimplemented));
  auto in_pod = nl.ListDevices("/run/netns/p");
  ASSERT_OK(in_pod.status());
  ASSERT_EQ(in_pod->size(), 1u);
  EXPECT_EQ((*in_pod)[0].name, "mlx5_0");
  nl.DestroyNetns("/run/netns/p");
  EXPECT_EQ(nl.Location("mlx5_0"), "");
}

TEST(FakeRdmaNetlinkTest, SharedModeRefusesMoves) {
  FakeRdmaNetlink nl;
  nl.AddDevice("rxe0");
  EXPECT_THAT(nl.MoveDevice("rxe0", "", "/run/netns/p"),
              StatusIs(absl::StatusCode::kUnimplemented));
  EXPECT_EQ(nl.ListDevices("/run/netns/p")->size(), 1u);
}

}  // namespace
}  // namespace fabric::netns
