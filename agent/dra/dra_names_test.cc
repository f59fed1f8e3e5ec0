#include "agent/dra/dra_names.h"

#include <algorithm>
#include <random>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fabric::dra {
namespace {

using ::testing::EndsWith;
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kRdma[] = "device.gpustack.ai/rdma";
constexpr char kShared[] = "device.gpustack.ai/rdma.shared";

PublishedUnit Whole(const std::string& resource, const std::string& ibdev) {
  return {resource, ibdev, ibdev, -1};
}
PublishedUnit Token(const std::string& ibdev, int index) {
  return {kShared, ibdev, TokenId(ibdev, index, 64), index};
}

// Every name is a label, every unit has one, and each name leads back to it.
void ExpectConsistent(const DraNames& names, const std::vector<PublishedUnit>& units) {
  std::set<std::string> seen;
  for (const PublishedUnit& u : units) {
    const std::string* name = names.NameOf(u.resource, u.unit_id);
    ASSERT_NE(name, nullptr) << u.unit_id;
    EXPECT_TRUE(IsDnsLabel(*name)) << *name;
    EXPECT_TRUE(seen.insert(*name).second) << "two units named " << *name;
    const PublishedUnit* back = names.Lookup(*name);
    ASSERT_NE(back, nullptr) << *name;
    EXPECT_EQ(*back, u);
  }
  EXPECT_EQ(names.size(), units.size());
}

TEST(DraNamesTest, LabelRules) {
  EXPECT_EQ(LabelOf("mlx5_0"), "mlx5-0");
  EXPECT_EQ(LabelOf("rdmap79s0"), "rdmap79s0");
  EXPECT_EQ(LabelOf("MLX5.bond_0"), "mlx5-bond-0");
  EXPECT_TRUE(IsDnsLabel("mlx5-0"));
  EXPECT_TRUE(IsDnsLabel(std::string(63, 'a')));
  EXPECT_FALSE(IsDnsLabel(std::string(64, 'a')));
  EXPECT_FALSE(IsDnsLabel(""));
  EXPECT_FALSE(IsDnsLabel("-mlx5"));
  EXPECT_FALSE(IsDnsLabel("mlx5-"));
  EXPECT_FALSE(IsDnsLabel("mlx5_0"));
  EXPECT_FALSE(IsDnsLabel("Mlx5"));
}

TEST(DraNamesTest, WholeDevicesAndTokensGetPlainLabels) {
  std::vector<PublishedUnit> units = {Whole(kRdma, "mlx5_0"), Token("mlx5_0", 0),
                                      Token("mlx5_0", 7), Token("mlx5_0", 63)};
  DraNames names = DraNames::Assign(units);
  ExpectConsistent(names, units);
  EXPECT_EQ(*names.NameOf(kRdma, "mlx5_0"), "mlx5-0");
  EXPECT_EQ(*names.NameOf(kShared, "mlx5_0.t00"), "mlx5-0-t00");
  EXPECT_EQ(*names.NameOf(kShared, "mlx5_0.t07"), "mlx5-0-t07");
  EXPECT_EQ(*names.NameOf(kShared, "mlx5_0.t63"), "mlx5-0-t63");
  EXPECT_EQ(names.Lookup("mlx5-0-t07")->token, 7);
  EXPECT_EQ(names.Lookup("mlx5-0")->token, -1);
  EXPECT_EQ(names.Lookup("mlx5-0-t64"), nullptr);
}

TEST(DraNamesTest, OverLongIbdevIsShortenedWithAHashAndKeepsTokenSuffixes) {
  const std::string ibdev = "rdma_" + std::string(60, 'x') + "_end0";  // 70 bytes
  ASSERT_EQ(ibdev.size(), 70u);
  std::vector<PublishedUnit> units = {Whole(kRdma, ibdev), Token(ibdev, 0), Token(ibdev, 42)};
  DraNames names = DraNames::Assign(units);
  ExpectConsistent(names, units);
  const std::string& whole = *names.NameOf(kRdma, ibdev);
  EXPECT_LE(whole.size(), 63u);
  EXPECT_THAT(whole, StartsWith("rdma-xxx"));
  EXPECT_THAT(*names.NameOf(kShared, TokenId(ibdev, 42, 64)), EndsWith("-t42"));
  // The two pools hash differently, so the whole device and the tokens'
  // stems differ; the tokens of one device share theirs.
  const std::string t0 = *names.NameOf(kShared, TokenId(ibdev, 0, 64));
  const std::string t42 = *names.NameOf(kShared, TokenId(ibdev, 42, 64));
  EXPECT_EQ(t0.substr(0, t0.size() - 4), t42.substr(0, t42.size() - 4));
  EXPECT_NE(whole, t0.substr(0, t0.size() - 4));
}

TEST(DraNamesTest, IbdevsThatCollideAfterLoweringBothGetHashes) {
  std::vector<PublishedUnit> units = {Whole(kRdma, "MLX5_0"), Whole(kRdma, "mlx5_0"),
                                      Whole(kRdma, "mlx5_1")};
  DraNames names = DraNames::Assign(units);
  ExpectConsistent(names, units);
  const std::string& upper = *names.NameOf(kRdma, "MLX5_0");
  const std::string& lower = *names.NameOf(kRdma, "mlx5_0");
  EXPECT_NE(upper, lower);
  EXPECT_THAT(upper, StartsWith("mlx5-0-"));
  EXPECT_THAT(lower, StartsWith("mlx5-0-"));
  EXPECT_EQ(names.Lookup("mlx5-0"), nullptr) << "neither takes the plain name";
  // A bystander keeps its plain name.
  EXPECT_EQ(*names.NameOf(kRdma, "mlx5_1"), "mlx5-1");
}

TEST(DraNamesTest, TokenNameOfOneDeviceCollidingWithAnotherIbdevIsResolved) {
  // "mlx5_0_t01" lowers to the name token 1 of mlx5_0 would have.
  std::vector<PublishedUnit> units = {Whole(kRdma, "mlx5_0_t01"), Token("mlx5_0", 0),
                                      Token("mlx5_0", 1)};
  DraNames names = DraNames::Assign(units);
  ExpectConsistent(names, units);
  EXPECT_EQ(names.Lookup("mlx5-0-t01"), nullptr);
}

TEST(DraNamesTest, OneDeviceInTwoExclusivePoolsGetsTwoNames) {
  std::vector<PublishedUnit> units = {Whole(kRdma, "mlx5_0"),
                                      Whole("example.com/rdma-b", "mlx5_0")};
  DraNames names = DraNames::Assign(units);
  ExpectConsistent(names, units);
}

TEST(DraNamesTest, NamesDoNotDependOnOrder) {
  std::vector<PublishedUnit> units = {Whole(kRdma, "MLX5_0"), Whole(kRdma, "mlx5_0"),
                                      Whole(kRdma, "rdmap79s0"),
                                      Whole(kRdma, std::string(70, 'q'))};
  for (int t = 0; t < 8; ++t) units.push_back(Token("mlx5_1", t));
  const auto reference = DraNames::Assign(units).by_name();
  std::mt19937 rng(7);
  for (int round = 0; round < 5; ++round) {
    std::shuffle(units.begin(), units.end(), rng);
    EXPECT_EQ(DraNames::Assign(units).by_name(), reference);
  }
  units.push_back(units.front());  // a duplicate is named once
  EXPECT_EQ(DraNames::Assign(units).by_name(), reference);
}

TEST(DraNamesTest, UnitsOfReadsTokensFromASharedSnapshot) {
  PoolConfig shared{kShared, PoolMode::kShared, 12, {}};
  RdmaDevice dev;
  dev.name = "mlx5_0";
  SnapshotInputs in;
  in.pool = &shared;
  in.devices = {dev};
  auto units = UnitsOf({BuildSnapshot(in)});
  ASSERT_EQ(units.size(), 12u);
  EXPECT_EQ(units[3], (PublishedUnit{kShared, "mlx5_0", "mlx5_0.t03", 3}));
  DraNames names = DraNames::Assign(units);
  EXPECT_EQ(*names.NameOf(kShared, "mlx5_0.t11"), "mlx5-0-t11");
  EXPECT_THAT(*names.NameOf(kShared, "mlx5_0.t03"), Not(EndsWith("-t3")));
}

}  // namespace
}  // namespace fabric::dra
