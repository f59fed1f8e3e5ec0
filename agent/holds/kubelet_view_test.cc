#include "agent/holds/kubelet_view.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fabric::holds {
namespace {

using podresources::PodDevices;
using ::testing::ElementsAre;

constexpr char kEfa[] = "vpc.amazonaws.com/efa";
constexpr char kShared[] = "device.gpustack.ai/rdma.shared";

TEST(KubeletViewTest, InitContainersOfAListedPodTakeItsName) {
  std::vector<PodDevices> listed = {{"ns", "p", "c", kEfa, {"efa0", "efa1"}}};
  std::vector<PodDevices> ckpt = {{"", "", "c", kEfa, {"efa1", "efa0"}, "uid-p"},
                                  {"", "", "init", kShared, {"mlx5_0.t0"}, "uid-p"}};
  auto joined = JoinListAndCheckpoint(listed, ckpt);
  ASSERT_EQ(joined.size(), 2u);
  EXPECT_EQ(joined[0].pod_uid, "uid-p") << "the listed entry learns its UID";
  EXPECT_THAT(joined[0].device_ids, ElementsAre("efa0", "efa1"));
  EXPECT_EQ(joined[1].ns, "ns");
  EXPECT_EQ(joined[1].pod, "p");
  EXPECT_EQ(joined[1].container, "init");
  // The List shows app and sidecar containers only: the checkpoint's other
  // container of a listed Pod is an init container (its end is no fallback).
  EXPECT_TRUE(joined[1].init_container);
  EXPECT_FALSE(joined[0].init_container);
}

TEST(KubeletViewTest, CheckpointPodsTheListDoesNotShowStayByUid) {
  // Right after a kubelet restart: List is empty, the checkpoint is not.
  auto joined = JoinListAndCheckpoint({}, {{"", "", "c", kShared, {"mlx5_0.t3"}, "uid-q"}});
  ASSERT_EQ(joined.size(), 1u);
  EXPECT_TRUE(joined[0].pod.empty());
  EXPECT_EQ(joined[0].pod_uid, "uid-q");
  EXPECT_FALSE(joined[0].init_container) << "the List says nothing of this Pod";
}

TEST(KubeletViewTest, ListEntriesTheCheckpointLacksAreKept) {
  // A checkpoint written before the last allocation (or none at all).
  auto joined = JoinListAndCheckpoint({{"ns", "p", "c", kEfa, {"efa0"}}}, {});
  ASSERT_EQ(joined.size(), 1u);
  EXPECT_EQ(joined[0].pod, "p");
  EXPECT_TRUE(joined[0].pod_uid.empty());
}

TEST(KubeletViewTest, DevicePluginHoldsJoinTheClaimsView) {
  KubeletView claims;
  claims.entries = {{"team", "p", "c", kShared, {"mlx5_0.t0"}, "uid-p"}};
  claims.observed_at = absl::FromUnixSeconds(200);
  claims.proves_absence = true;
  KubeletView legacy;
  legacy.entries = {{"", "", "member", kEfa, {"efa1"}, "uid-old"}};
  legacy.observed_at = absl::FromUnixSeconds(150);
  legacy.proves_absence = false;  // e.g. a node with the checkpoint only

  KubeletView both = WithDevicePluginHolds(claims, legacy);
  ASSERT_EQ(both.entries.size(), 2u);
  EXPECT_EQ(both.entries[1].device_ids, std::vector<std::string>{"efa1"});
  EXPECT_EQ(both.observed_at, absl::FromUnixSeconds(150));
  EXPECT_TRUE(both.complete);
  EXPECT_TRUE(both.proves_absence) << "the claims' view decides";

  legacy.complete = false;
  legacy.incomplete_reason = "kubelet restart settling";
  both = WithDevicePluginHolds(claims, legacy);
  EXPECT_FALSE(both.complete);
  EXPECT_EQ(both.incomplete_reason, "device-plugin grants: kubelet restart settling");
  claims.complete = false;
  claims.incomplete_reason = "ResourceClaims not listed yet";
  EXPECT_EQ(WithDevicePluginHolds(claims, legacy).incomplete_reason,
            "ResourceClaims not listed yet; device-plugin grants: kubelet restart settling");
}

}  // namespace
}  // namespace fabric::holds
