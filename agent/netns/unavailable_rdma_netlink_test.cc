#include "agent/netns/unavailable_rdma_netlink.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fabric::netns {
namespace {

TEST(UnavailableRdmaNetlinkTest, EveryCallIsUnavailableWithTheReason) {
  UnavailableRdmaNetlink nl("no RDMA netlink family");
  EXPECT_EQ(nl.GetNetnsMode().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(nl.ListDevices("").status().code(), absl::StatusCode::kUnavailable);
  absl::Status s = nl.MoveDevice("mlx5_0", "", "/proc/1/ns/net");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("mlx5_0"));
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("no RDMA netlink family"));
}

}  // namespace
}  // namespace fabric::netns
