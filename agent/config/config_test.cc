#include "agent/config/config.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/status_matchers.h"

namespace fabric {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

RdmaDevice Efa(const std::string& name) {
  RdmaDevice d;
  d.name = name;
  d.kind = DeviceKind::kEfa;
  d.pci = PciInfo{"0000:4f:00.0", 0x1d0f, 0xefa1, "efa", 0, "", 0};
  d.ports.push_back(PortInfo{1, 4, "ACTIVE", 5, "LinkUp", "Unknown", "100 Gb/sec (4X EDR)", ""});
  return d;
}

RdmaDevice Mlx5(const std::string& name, const std::string& physfn, int numvfs) {
  RdmaDevice d;
  d.name = name;
  d.pci = PciInfo{"0000:3b:00.0", 0x15b3, 0x101d, "mlx5_core", 0, physfn, numvfs};
  d.ports.push_back(PortInfo{1, 4, "ACTIVE", 5, "LinkUp", "Ethernet", "", "ens1f0np0"});
  return d;
}

TEST(DefaultConfigTest, SelectsTheOperatorsPools) {
  Config c = DefaultConfig();
  EXPECT_THAT(PoolsSelecting(c, Efa("rdmap79s0")), ElementsAre("vpc.amazonaws.com/efa"));
  EXPECT_THAT(PoolsSelecting(c, Mlx5("mlx5_0", "", 0)),
              ElementsAre("device.gpustack.ai/rdma", "device.gpustack.ai/rdma.shared"));
  // A PF with VFs serves only through its VFs.
  EXPECT_THAT(PoolsSelecting(c, Mlx5("mlx5_0", "", 4)), ElementsAre());
  EXPECT_THAT(PoolsSelecting(c, Mlx5("mlx5_2", "0000:3b:00.0", 0)),
              ElementsAre("device.gpustack.ai/rdma.partitioned"));
  RdmaDevice rxe;
  rxe.name = "rxe0";
  EXPECT_THAT(PoolsSelecting(c, rxe),
              ElementsAre("device.gpustack.ai/rdma", "device.gpustack.ai/rdma.shared"));
  EXPECT_EQ(c.FindPool("device.gpustack.ai/rdma.shared")->tokens_per_device, 64);
}

TEST(ParseConfigTest, YamlPools) {
  auto c = ParseConfig(R"(
pools:
  - name: example.com/roce
    mode: shared
    tokensPerDevice: 8
    selector:
      vendors: ["0x15b3"]
      linkTypes: [Ethernet]
      netdevNames: ["ens1f*"]
)",
                       "test.yaml");
  ASSERT_OK(c);
  ASSERT_EQ(c->pools.size(), 1u);
  EXPECT_EQ(c->pools[0].mode, PoolMode::kShared);
  EXPECT_EQ(c->pools[0].tokens_per_device, 8);
  EXPECT_TRUE(c->pools[0].selector.Matches(Mlx5("mlx5_0", "", 0)));
  EXPECT_FALSE(c->pools[0].selector.Matches(Efa("rdmap79s0")));
}

TEST(ParseConfigTest, JsonIsAccepted) {
  auto c = ParseConfig(
      R"({"pools": [{"name": "example.com/efa", "selector": {"kinds": ["efa"], "ibdevNames": ["rdmap*"]}}]})",
      "c.json");
  ASSERT_OK(c);
  EXPECT_TRUE(c->pools[0].selector.Matches(Efa("rdmap79s0")));
  EXPECT_FALSE(c->pools[0].selector.Matches(Efa("efa_0")));
}

struct BadCase {
  std::string text;
  std::string expected;
};

class BadConfigTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadConfigTest, RejectedNamingTheKey) {
  auto c = ParseConfig(GetParam().text, "bad.yaml");
  ASSERT_THAT(c, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(GetParam().expected));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("bad.yaml"));
}

INSTANTIATE_TEST_SUITE_P(
    All, BadConfigTest,
    ::testing::Values(
        BadCase{"pool: []", "pool: unknown key"},
        BadCase{"pools: [{name: a.com/x, selector: {kind: [efa]}}]",
                "pools[0].selector.kind: unknown key"},
        BadCase{"pools: [{name: rdma, selector: {}}]", "pools[0].name"},
        BadCase{"pools: [{name: kubernetes.io/rdma, selector: {}}]", "reserved"},
        BadCase{"pools: [{name: Example.com/rdma, selector: {}}]", "DNS subdomain"},
        BadCase{"pools: [{name: a.com/x, mode: sliced, selector: {}}]", "pools[0].mode"},
        BadCase{"pools: [{name: a.com/x, mode: exclusive, tokensPerDevice: 4, selector: {}}]",
                "only valid with mode: shared"},
        BadCase{"pools: [{name: a.com/x, mode: shared, tokensPerDevice: 0, selector: {}}]",
                "out of range"},
        BadCase{"pools: [{name: a.com/x, selector: {vendors: [amazon]}}]", "not a hex id"},
        BadCase{"pools: [{name: a.com/x, selector: {ibdevNames: ['mlx5_[0']}}]", "unclosed"},
        BadCase{"pools: [{name: a.com/x, selector: {linkTypes: [IB]}}]", "linkTypes"},
        BadCase{"pools: [{name: a.com/x, selector: {isVF: maybe}}]", "isVF"},
        BadCase{"pools: [{name: a.com/x, selector: {}, env: [mooncake, rccl]}]",
                "pools[0].env: 'rccl' is not a preset (mooncake, nccl, nccl-gid-index, ucx, "
                "libfabric)"},
        BadCase{"pools: [{name: a.com/x, selector: {}, env: [nccl, nccl]}]",
                "pools[0].env: 'nccl' is listed twice"},
        BadCase{"pools: [{name: a.com/x, selector: {}, env: {nccl: true}}]",
                "pools[0].env: expected a string or a list of strings"},
        BadCase{"pools: [{name: a.com/x, selector: {}, env: [NCCL]}]", "'NCCL' is not a preset"},
        BadCase{"pools: [{name: a.com/x}]", "pools[0].selector: required"},
        BadCase{"pools: [{name: a.com/x, selector: {}}, {name: a.com/x, selector: {}}]",
                "duplicate"},
        BadCase{"pools: [{name: a.com/x, selector: {}]", "not valid YAML"},
        BadCase{"health: {efa: {errorCounters: {cmds_err: 0}}}",
                "health.efa.errorCounters.cmds_err"},
        // A key given twice: yaml-cpp keeps both and node[key] reads the
        // first, so the second would be silently ignored (found by
        // test/fuzz/config_fuzzer).
        BadCase{"pools: []\npools: [{name: a.com/x, selector: {}}]", "pools: duplicate key"},
        BadCase{"pools: [{name: a.com/x, selector: {isVF: true, isVF: false}}]",
                "pools[0].selector.isVF: duplicate key"},
        BadCase{"health: {efa: {errorCounters: {cmds_err: 1, cmds_err: 5}}}",
                "health.efa.errorCounters.cmds_err: duplicate key"},
        // A control byte in a counter name: the JSON written from it did not read back
        // (test/fuzz/config_fuzzer).
        BadCase{"health: {efa: {errorCounters: {\"cm\\x1a\": 1}}}",
                "\"cm\\x1a\" is not a counter file name"},
        BadCase{"health: {efa: {errorCounters: {\"..\": 1}}}", "not a counter file name"},
        BadCase{"health: {efa: {errorCounters: {a/b: 1}}}", "not a counter file name"}));

TEST(ParseConfigTest, EnvPresetsPerPoolDefaultNone) {
  auto c = ParseConfig(R"(
pools:
  - name: example.com/roce
    selector: {linkTypes: [Ethernet]}
    env: [ucx, mooncake, nccl]
  - name: example.com/efa
    selector: {kinds: efa}
    env: libfabric
  - name: example.com/plain
    selector: {}
  - name: example.com/old-nccl
    selector: {linkTypes: [Ethernet]}
    env: [nccl-gid-index, nccl]
)",
                       "test.yaml");
  ASSERT_OK(c);
  // A fixed order, whatever the file's.
  EXPECT_THAT(c->pools[0].env,
              ElementsAre(EnvPreset::kMooncake, EnvPreset::kNccl, EnvPreset::kUcx));
  EXPECT_THAT(c->pools[1].env, ElementsAre(EnvPreset::kLibfabric));
  EXPECT_TRUE(c->pools[2].env.empty());
  EXPECT_THAT(c->pools[3].env, ElementsAre(EnvPreset::kNccl, EnvPreset::kNcclGidIndex));
  EXPECT_EQ(EnvPresetName(EnvPreset::kNcclGidIndex), "nccl-gid-index");
  for (const PoolConfig& p : DefaultConfig().pools) EXPECT_TRUE(p.env.empty()) << p.name;
  EXPECT_EQ(EnvPresetName(EnvPreset::kUcx), "ucx");
}

TEST(ResourceNameTest, KubeletRules) {
  EXPECT_OK(ValidateResourceName("vpc.amazonaws.com/efa"));
  EXPECT_OK(ValidateResourceName("device.gpustack.ai/rdma.shared"));
  EXPECT_FALSE(ValidateResourceName("efa").ok());
  EXPECT_FALSE(ValidateResourceName("requests.a.com/x").ok());
  EXPECT_FALSE(ValidateResourceName("a.com/" + std::string(64, 'x')).ok());
  EXPECT_FALSE(ValidateResourceName("a.com/-x").ok());
}

TEST(PoolConfigTest, SocketNameIsAFileName) {
  PoolConfig p;
  p.name = "vpc.amazonaws.com/efa";
  EXPECT_EQ(p.SocketName(), "fabric-vpc.amazonaws.com_efa.sock");
}

}  // namespace
}  // namespace fabric
