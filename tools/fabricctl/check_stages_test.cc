// Stages 1-6 of `fabricctl check` as the verdict sees them: each failing
// stage's verdict, exit code and one line of cause and remedy, their
// precedence, and the per-device JSON. Facts are built by hand (the real
// collection runs in the soft-RoCE VM, test/e2e/cases/11-engine-env.sh).
#include "tools/fabricctl/check_stages.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>

#include "test/testing/fake_sysfs.h"
#include "tools/fabricctl/check_verbs.h"
#include "tools/fabricctl/check_verdict.h"

namespace fabric::fabricctl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const std::string kLinkLocal = "fe80:0000:0000:0000:5054:00ff:fe12:3456";
const std::string kIpv4 = "0000:0000:0000:0000:0000:ffff:0a00:020f";

StageOutcome Ok() { return {StageStatus::kOk, 0, ""}; }

// rxe0 in the VM: every stage passed.
FabricDeviceFacts Rxe() {
  FabricDeviceFacts d;
  d.ibdev = "rxe0";
  d.node = "infiniband/uverbs0";
  d.open = Ok();
  d.port = Ok();
  d.ports = {{1, "ACTIVE", "Ethernet", 1024, 0, 1024, true}};
  d.gid = Ok();
  d.gid_port = 1;
  d.gids = {{0, kLinkLocal, GidType::kRoceV2, "eth0"}, {1, kIpv4, GidType::kRoceV2, "eth0"}};
  d.mr = Ok();
  d.mr_bytes = 64ull << 20;
  d.qp = Ok();
  d.qp_type = "RC";
  d.qpn = 17;
  d.loopback = Ok();
  d.loopback_gid_index = 1;
  d.loopback_bytes = 128 * 1024;
  d.loopback_seconds = 0.004;
  return d;
}

CheckFacts Facts(std::vector<FabricDeviceFacts> devices) {
  CheckFacts f;
  f.dev_root = "/dev";
  for (size_t i = 0; i < devices.size(); ++i) {
    DeviceNodeFacts n;
    n.kind = NodeKind::kUverbs;
    n.rel_path = devices[i].node;
    n.path = "/dev/" + n.rel_path;
    n.probed = true;
    n.open_errno = devices[i].open.status == StageStatus::kFailed &&
                           devices[i].open.detail.rfind("open(", 0) == 0
                       ? devices[i].open.err
                       : 0;
    f.nodes.push_back(n);
  }
  f.fabric = std::move(devices);
  return f;
}

std::vector<StageStatus> Statuses(const FabricDeviceFacts& d, const GidEnv& env = {}) {
  std::vector<StageStatus> out;
  for (const StageView& s : StagesOf(d, env, MemlockText{"unlimited", "unlimited", false})) {
    out.push_back(s.status);
  }
  return out;
}

TEST(StagesTest, HealthyRxePassesEveryStage) {
  const FabricDeviceFacts d = Rxe();
  EXPECT_THAT(Statuses(d), ElementsAre(StageStatus::kOk, StageStatus::kOk, StageStatus::kOk,
                                       StageStatus::kOk, StageStatus::kOk, StageStatus::kOk));
  CheckReport r = Decide(Facts({d}), CheckPolicy{});
  EXPECT_EQ(r.verdict, Verdict::kOk);
  EXPECT_THAT(r.summary, HasSubstr("no stage fails on 1 device(s)"));
  const auto stages = StagesOf(d, {}, MemlockText{"unlimited", "unlimited", false});
  EXPECT_THAT(stages[2].message, HasSubstr("RoCE v2 IPv4 GID index 1 (10.0.2.15 on eth0)"));
  EXPECT_THAT(stages[5].message, HasSubstr("GID index 1"));
}

TEST(StagesTest, GidVariablesAreCheckedAgainstTheTable) {
  const FabricDeviceFacts d = Rxe();
  GidEnv match{"1", "1"};
  EXPECT_EQ(Statuses(d, match)[2], StageStatus::kOk);
  EXPECT_THAT(StagesOf(d, match, {})[2].message, HasSubstr("MC_GID_INDEX=1 matches"));
  // The operator's hand-written "3" from an mlx5 cluster, on rxe.
  CheckFacts f = Facts({d});
  f.gid_env.mc_gid_index = "3";
  CheckReport r = Decide(f, CheckPolicy{});
  EXPECT_EQ(r.verdict, Verdict::kGidMismatch);
  EXPECT_EQ(VerdictExitCode(r.verdict), 32);
  EXPECT_THAT(r.summary, HasSubstr("MC_GID_INDEX=3 names an empty GID slot"));
  EXPECT_THAT(r.summary, HasSubstr("set 1"));
  // A populated slot that is not the IPv4 v2 one (the link-local GID).
  f.gid_env = {std::nullopt, "0"};
  r = Decide(f, CheckPolicy{});
  EXPECT_EQ(r.verdict, Verdict::kGidMismatch);
  EXPECT_THAT(r.summary, HasSubstr("NCCL_IB_GID_INDEX=0 but the RoCE v2 IPv4 GID is index 1"));
  f.gid_env = {"one", std::nullopt};
  EXPECT_THAT(Decide(f, CheckPolicy{}).summary, HasSubstr("MC_GID_INDEX='one' is not a GID index"));
}

// Issue 32, item 14: -1 is the engines' own "select it yourself" (NCCL's
// default; Mooncake's config.h), not a wrong index.
TEST(StagesTest, MinusOneIsTheEnginesAutoSelect) {
  const FabricDeviceFacts d = Rxe();
  CheckFacts f = Facts({d});
  f.gid_env = {"-1", "-1"};
  CheckReport r = Decide(f, CheckPolicy{});
  EXPECT_EQ(r.verdict, Verdict::kOk) << r.summary;
  const auto stages = StagesOf(d, f.gid_env, {});
  EXPECT_EQ(stages[2].status, StageStatus::kOk);
  EXPECT_THAT(stages[2].message, HasSubstr("MC_GID_INDEX=-1: the engine selects"));
  EXPECT_THAT(stages[2].message, HasSubstr("NCCL_IB_GID_INDEX=-1: the engine selects"));
  // Other negative numbers are no engine's value.
  f.gid_env = {"-2", std::nullopt};
  EXPECT_EQ(Decide(f, CheckPolicy{}).verdict, Verdict::kGidMismatch);
}

// Issue 32, item 14: in a mixed EFA + RoCE grant the GID variables name the
// RoCE port's index; the EFA device (one GID, no RoCE) does not use them.
TEST(StagesTest, GidVariablesDoNotApplyToAnEfaDevice) {
  FabricDeviceFacts efa = Rxe();
  efa.ibdev = "rdmap79s0";
  efa.node = "infiniband/uverbs1";
  efa.efa = true;
  efa.ports[0].link_layer = "Unspecified";
  efa.gids = {{0, kLinkLocal, GidType::kIbRoceV1, ""}};
  efa.qp_type = "SRD";
  efa.loopback = {StageStatus::kSkipped, 0, "SRD: no RC loopback"};
  CheckFacts f = Facts({Rxe(), efa});
  f.gid_env = {"1", "1"};
  CheckReport r = Decide(f, CheckPolicy{});
  EXPECT_EQ(r.verdict, Verdict::kOk) << r.summary;
  const auto stages = StagesOf(efa, f.gid_env, {});
  EXPECT_EQ(stages[2].status, StageStatus::kOk);
  EXPECT_THAT(stages[2].message, HasSubstr("EFA"));
}

TEST(StagesTest, InfinibandIgnoresTheMissingRoceGidButNotAnEmptySlot) {
  FabricDeviceFacts d = Rxe();
  d.ibdev = "mlx5_0";
  d.ports[0].link_layer = "InfiniBand";
  d.gids = {{0, kLinkLocal, GidType::kIbRoceV1, ""}};
  d.loopback_gid_index = -1;
  EXPECT_EQ(Statuses(d)[2], StageStatus::kOk);
  EXPECT_THAT(StagesOf(d, {}, {})[2].message, HasSubstr("InfiniBand port"));
  EXPECT_EQ(Statuses(d, {"0", std::nullopt})[2], StageStatus::kOk);
  EXPECT_EQ(Statuses(d, {"3", std::nullopt})[2], StageStatus::kFailed);
}

TEST(StagesTest, MemlockFailurePrintsTheLimitAndHasItsExitCode) {
  FabricDeviceFacts d = Rxe();
  d.mr = {StageStatus::kFailed, ENOMEM, "ibv_reg_mr of 64 MiB"};
  d.qp = Ok();
  d.loopback = {StageStatus::kSkipped, 0, "needs stages 2, 4 and 5"};
  CheckFacts f = Facts({d});
  f.memlock = {64 * 1024, 64 * 1024, false};
  CheckReport r = Decide(f, CheckPolicy{});
  EXPECT_EQ(r.verdict, Verdict::kMemlockTooLow);
  EXPECT_EQ(VerdictExitCode(r.verdict), 7);
  EXPECT_THAT(r.summary, HasSubstr("rxe0 stage 4 (mr): ibv_reg_mr of 64 MiB: ENOMEM"));
  EXPECT_THAT(r.summary, HasSubstr("RLIMIT_MEMLOCK soft 64 KiB, hard 64 KiB, no CAP_IPC_LOCK"));
  // The floor check does not repeat what the registration proved.
  ASSERT_EQ(r.findings.size(), 1u);
  d.mr.err = EINVAL;
  r = Decide(Facts({d}), CheckPolicy{});
  EXPECT_EQ(r.verdict, Verdict::kMrFailed);
  EXPECT_EQ(VerdictExitCode(r.verdict), 33);
}

TEST(StagesTest, EachStageHasItsVerdictAndExitCode) {
  struct Case {
    int stage;
    Verdict verdict;
    int exit;
  };
  for (Case c : {Case{2, Verdict::kPortDown, 31}, Case{5, Verdict::kQpFailed, 34},
                 Case{6, Verdict::kLoopbackFailed, 35}}) {
    FabricDeviceFacts d = Rxe();
    StageOutcome* s = c.stage == 2 ? &d.port : c.stage == 5 ? &d.qp : &d.loopback;
    *s = {StageStatus::kFailed, c.stage == 2 ? 0 : EIO, c.stage == 2 ? "port 1 is DOWN" : "x"};
    CheckReport r = Decide(Facts({d}), CheckPolicy{});
    EXPECT_EQ(r.verdict, c.verdict) << c.stage;
    EXPECT_EQ(VerdictExitCode(r.verdict), c.exit) << c.stage;
    EXPECT_THAT(r.summary, HasSubstr("stage " + std::to_string(c.stage))) << r.summary;
  }
  FabricDeviceFacts missing = Rxe();
  missing.verbs_missing = true;
  missing.open = {StageStatus::kFailed, 0, "libibverbs.so.1 is not installed"};
  CheckReport r = Decide(Facts({missing}), CheckPolicy{});
  EXPECT_EQ(r.verdict, Verdict::kVerbsUnavailable);
  EXPECT_EQ(VerdictExitCode(r.verdict), 30);
  FabricDeviceFacts ibv = Rxe();
  ibv.open = {StageStatus::kFailed, ENOENT, "ibv_open_device(rxe0) after open(2) succeeded"};
  EXPECT_EQ(Decide(Facts({ibv}), CheckPolicy{}).verdict, Verdict::kOpenFailed);
}

// A hostPath-only Pod: open(2) gives EPERM. The node finding says it once.
TEST(StagesTest, EpermAtStageOneIsNotGrantedOnce) {
  FabricDeviceFacts d = Rxe();
  d.open = {StageStatus::kFailed, EPERM, "open(/dev/infiniband/uverbs0)"};
  for (StageOutcome* s : {&d.port, &d.gid, &d.mr, &d.qp, &d.loopback}) {
    *s = {StageStatus::kSkipped, 0, "stage 1 failed"};
  }
  CheckReport r = Decide(Facts({d}), CheckPolicy{});
  EXPECT_EQ(r.verdict, Verdict::kNotGranted);
  EXPECT_EQ(r.findings.size(), 1u);
  auto stages = StagesOf(d, {}, {});
  EXPECT_EQ(stages[0].err, EPERM);
  EXPECT_THAT(stages[0].message, HasSubstr("EPERM"));
  EXPECT_THAT(stages[0].message, HasSubstr("not granted rxe0"));
}

TEST(StagesTest, PrecedenceFollowsTheStagesThenTheProviderThenTheFloor) {
  FabricDeviceFacts down = Rxe(), mr = Rxe();
  down.port = {StageStatus::kFailed, 0, "port 1 is DOWN"};
  mr.ibdev = "rxe1";
  mr.node = "infiniband/uverbs1";
  mr.mr = {StageStatus::kFailed, ENOMEM, "ibv_reg_mr of 64 MiB"};
  CheckFacts f = Facts({mr, down});
  CheckReport r = Decide(f, CheckPolicy{"efa", 64ull << 20});
  ASSERT_EQ(r.findings.size(), 3u);
  EXPECT_EQ(r.findings[0].verdict, Verdict::kPortDown);
  EXPECT_EQ(r.findings[1].verdict, Verdict::kMemlockTooLow);
  EXPECT_EQ(r.findings[2].verdict, Verdict::kProviderMissing);
  // Without a device at stage 4, a low limit comes last, as before stages.
  CheckFacts floor = Facts({});
  floor.nodes.push_back(DeviceNodeFacts{});
  floor.nodes.back().kind = NodeKind::kUverbs;
  floor.nodes.back().probed = true;
  floor.memlock = {1 << 20, 1 << 20, false};
  r = Decide(floor, CheckPolicy{"efa", 64ull << 20});
  ASSERT_EQ(r.findings.size(), 2u);
  EXPECT_EQ(r.findings[0].verdict, Verdict::kProviderMissing);
  EXPECT_EQ(r.findings[1].verdict, Verdict::kMemlockTooLow);
}

TEST(StagesTest, JsonPerDevicePerStage) {
  CheckFacts f = Facts({Rxe()});
  f.gid_env.mc_gid_index = "1";
  auto j = CheckReportToJson(f, CheckPolicy{}, Decide(f, CheckPolicy{}));
  EXPECT_EQ(j["mr_size_bytes"], 64ull << 20);
  EXPECT_EQ(j["gid_env"]["MC_GID_INDEX"], "1");
  EXPECT_TRUE(j["gid_env"]["NCCL_IB_GID_INDEX"].is_null());
  ASSERT_EQ(j["fabric"].size(), 1u);
  const auto& d = j["fabric"][0];
  EXPECT_EQ(d["device"], "rxe0");
  ASSERT_EQ(d["stages"].size(), 6u);
  std::vector<std::string> names;
  for (const auto& s : d["stages"]) {
    names.push_back(s["name"]);
    EXPECT_EQ(s["status"], "ok") << s.dump();
  }
  EXPECT_THAT(names, ElementsAre("open", "port", "gid", "mr", "qp", "loopback"));
  EXPECT_EQ(d["stages"][1]["ports"][0]["active_mtu"], 1024);
  EXPECT_EQ(d["stages"][2]["roce_v2_ipv4_index"], 1);
  EXPECT_EQ(d["stages"][2]["entries"][1]["type"], "RoCE v2");
  EXPECT_EQ(d["stages"][3]["bytes"], 64ull << 20);
  EXPECT_EQ(d["stages"][4]["qp_type"], "RC");
  EXPECT_EQ(d["stages"][5]["gid_index"], 1);
  const std::string text = CheckReportToText(f, CheckPolicy{}, Decide(f, CheckPolicy{}));
  EXPECT_THAT(text, HasSubstr("rxe0 (infiniband/uverbs0)"));
  EXPECT_THAT(text, HasSubstr("6 loopback  ok"));
}

TEST(StagesTest, AnotherDevRootRunsStageOneOnly) {
  FabricDeviceFacts d = Rxe();
  d.open.detail = "open(2) only";
  for (StageOutcome* s : {&d.port, &d.gid, &d.mr, &d.qp, &d.loopback}) {
    *s = {StageStatus::kSkipped, 0, "libibverbs opens /dev/infiniband only"};
  }
  CheckFacts f = Facts({d});
  f.fabric_skipped = "libibverbs opens /dev/infiniband only; --dev-root is /tmp/x";
  f.memlock = {1 << 20, 1 << 20, false};
  CheckReport r = Decide(f, CheckPolicy{});
  // The floor stands in for stage 4.
  EXPECT_EQ(r.verdict, Verdict::kMemlockTooLow);
  EXPECT_THAT(r.summary, HasSubstr("RLIMIT_MEMLOCK soft 1 MiB"));
  f.memlock = {};
  EXPECT_EQ(Decide(f, CheckPolicy{}).verdict, Verdict::kOk);
  EXPECT_THAT(Decide(f, CheckPolicy{}).findings, IsEmpty());
}

// Issue 32, item 16: in a Pod with its own network namespace the interface
// index ibv_query_gid_table reports is the host's; the same index here is
// another interface (1 is lo in every netns). The netdev is named as the
// kernel names it in sysfs, the name the agent reads too.
TEST(GidNetdevNameTest, TheKernelsNameNotThisNetnsInterfaceOfTheSameIndex) {
  testing::FakeSysfs fs;
  fs.AddRxe("rxe0", "d0");
  const std::string root = fs.paths().sysfs_root;
  EXPECT_EQ(GidNetdevName(root, "rxe0", 1, 1, /*ndev_ifindex=*/1), "d0");
  EXPECT_EQ(GidNetdevName(root, "rxe0", 1, 1, 0), "") << "the kernel names no netdev";
  EXPECT_EQ(GidNetdevName(root, "rxe0", 1, 9, 1), "") << "no ndevs file: not named";
}

}  // namespace
}  // namespace fabric::fabricctl
