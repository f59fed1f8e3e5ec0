#include "agent/engine_env/gid_ledger.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

// A namespace of its own: this file shares a unity build with engine_env_test.cc.
namespace fabric::engine_env::gid_ledger_test {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const std::string kLinkLocal = "fe80:0000:0000:0000:5054:00ff:fe12:3456";
const std::string kA = "0000:0000:0000:0000:0000:ffff:0a00:020f";  // 10.0.2.15
const std::string kB = "0000:0000:0000:0000:0000:ffff:0a00:030f";  // 10.0.3.15

RdmaDevice Rxe(std::vector<GidEntry> gids) {
  RdmaDevice d;
  d.name = "rxe0";
  PortInfo p;
  p.number = 1;
  p.link_layer = "Ethernet";
  p.gids = std::move(gids);
  d.ports.push_back(p);
  return d;
}

GivenGid Given(int index, const std::string& gid, const std::string& ipv4) {
  return {"rxe0", 1, index, gid, ipv4, "eth0", {"MC_GID_INDEX"}};
}

TEST(WhyGoneTest, SaysWhatTheIndexNamesNow) {
  const GivenGid g = Given(1, kA, "10.0.2.15");
  RdmaDevice same =
      Rxe({{0, kLinkLocal, GidType::kRoceV2, "eth0"}, {1, kA, GidType::kRoceV2, "eth0"}});
  EXPECT_EQ(WhyGone(g, &same), "");
  EXPECT_EQ(GivenText(g), "MC_GID_INDEX=1 (10.0.2.15 on eth0)");

  // DHCP gave another address: the slot was emptied, the new one took the next.
  RdmaDevice renewed =
      Rxe({{0, kLinkLocal, GidType::kRoceV2, "eth0"}, {2, kB, GidType::kRoceV2, "eth0"}});
  EXPECT_EQ(WhyGone(g, &renewed),
            "MC_GID_INDEX=1 (10.0.2.15 on eth0), given at Allocate, no longer names its GID: "
            "index 1 is empty now, and 10.0.2.15 has left rxe0 port 1's table");
  // The slot reused by another address.
  RdmaDevice reused =
      Rxe({{0, kLinkLocal, GidType::kRoceV2, "eth0"}, {1, kB, GidType::kRoceV2, "eth0"}});
  EXPECT_THAT(WhyGone(g, &reused), HasSubstr("index 1 now holds 10.0.3.15 on eth0"));
  // Removed and added back: a new slot.
  RdmaDevice moved = Rxe({{0, kLinkLocal, GidType::kRoceV2, "eth0"},
                          {1, kB, GidType::kRoceV2, "eth0"},
                          {2, kA, GidType::kRoceV2, "eth0"}});
  EXPECT_THAT(WhyGone(g, &moved), HasSubstr("and 10.0.2.15 is at index 2"));
  // Gone, or a table that cannot be read: nothing is claimed.
  EXPECT_EQ(WhyGone(g, nullptr), "");
  RdmaDevice unreadable = Rxe({});
  unreadable.ports[0].gid_error = "gids/1: expected a GID";
  EXPECT_EQ(WhyGone(g, &unreadable), "");
}

class GidLedgerTest : public ::testing::Test {
 protected:
  absl::Time mono_ = absl::UnixEpoch() + absl::Hours(1);
  absl::Time wall_ = absl::FromUnixSeconds(1796169600);
  GidLedger ledger_{[this] { return mono_; }, [this] { return wall_; }};
};

TEST_F(GidLedgerTest, AnExclusiveDevicesNewestGrantIsItsHolders) {
  ledger_.Record({Given(1, kA, "10.0.2.15")}, /*exclusive=*/true);
  mono_ += absl::Seconds(5);
  ledger_.Record({Given(2, kB, "10.0.3.15")}, true);
  std::vector<GivenGid> now = ledger_.Current({"rxe0"});
  ASSERT_EQ(now.size(), 1u);
  EXPECT_EQ(now[0].index, 2);
  EXPECT_EQ(now[0].given_at, wall_);
  ASSERT_TRUE(HolderValue(now, "rxe0", 1).has_value());
  EXPECT_EQ(HolderValue(now, "rxe0", 1)->gid, kB);
  EXPECT_FALSE(HolderValue(now, "rxe0", 2).has_value());
}

TEST_F(GidLedgerTest, ASharedDeviceKeepsEachValueAndCannotTellWhoseIsWhose) {
  GivenGid nccl = Given(1, kA, "10.0.2.15");
  nccl.variables = {"NCCL_IB_GID_INDEX"};
  ledger_.Record({Given(1, kA, "10.0.2.15")}, /*exclusive=*/false);
  ledger_.Record({nccl}, false);  // the same value: merged
  std::vector<GivenGid> now = ledger_.Current({"rxe0"});
  ASSERT_EQ(now.size(), 1u);
  EXPECT_THAT(now[0].variables, ElementsAre("MC_GID_INDEX", "NCCL_IB_GID_INDEX"));
  EXPECT_TRUE(HolderValue(now, "rxe0", 1).has_value());
  ledger_.Record({Given(2, kB, "10.0.3.15")}, false);
  now = ledger_.Current({"rxe0"});
  EXPECT_EQ(now.size(), 2u);
  EXPECT_FALSE(HolderValue(now, "rxe0", 1).has_value());
  // Which holder got which cannot be told: nothing is claimed for a holder.
  RdmaDevice renewed = Rxe({{0, kLinkLocal, GidType::kRoceV2, "eth0"}});
  EXPECT_EQ(HolderGidGone(now, renewed), "");
}

TEST_F(GidLedgerTest, AHoldersValueThatLeftTheTable) {
  ledger_.Record({Given(1, kA, "10.0.2.15")}, true);
  std::vector<GivenGid> now = ledger_.Current({"rxe0"});
  RdmaDevice same =
      Rxe({{0, kLinkLocal, GidType::kRoceV2, "eth0"}, {1, kA, GidType::kRoceV2, "eth0"}});
  EXPECT_EQ(HolderGidGone(now, same), "");
  RdmaDevice renewed = Rxe({{0, kLinkLocal, GidType::kRoceV2, "eth0"}});
  EXPECT_THAT(HolderGidGone(now, renewed), AllOf(HasSubstr("MC_GID_INDEX=1 (10.0.2.15 on eth0)"),
                                                 HasSubstr("index 1 is empty")));
}

TEST_F(GidLedgerTest, UnheldDevicesAreForgottenOnceTheirGrantsHadTimeToShow) {
  ledger_.Record({Given(1, kA, "10.0.2.15")}, true);
  mono_ += absl::Seconds(30);
  EXPECT_EQ(ledger_.Current({}).size(), 1u) << "a grant the kubelet's view may not show yet";
  mono_ += absl::Seconds(31);
  EXPECT_EQ(ledger_.Current({"rxe0"}).size(), 1u) << "held: kept";
  EXPECT_THAT(ledger_.Current({}), IsEmpty());
}

TEST_F(GidLedgerTest, ValuesPerPortAreBounded) {
  for (int i = 0; i < 20; ++i) {
    mono_ += absl::Seconds(1);
    ledger_.Record({Given(i, kA, "10.0.2.15")}, false);
  }
  std::vector<GivenGid> now = ledger_.Current({"rxe0"});
  ASSERT_EQ(now.size(), 8u);
  EXPECT_EQ(now.front().index, 12) << "the oldest went first";
  EXPECT_EQ(now.back().index, 19);
}

}  // namespace
}  // namespace fabric::engine_env::gid_ledger_test
