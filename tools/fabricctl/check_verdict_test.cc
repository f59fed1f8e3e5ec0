#include "tools/fabricctl/check_verdict.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <set>

#include "tools/fabricctl/check_collect.h"

namespace fabric::fabricctl {
namespace {

using ::testing::HasSubstr;

DeviceNodeFacts Node(NodeKind kind, const std::string& name, int err, bool probed = true) {
  DeviceNodeFacts n;
  n.kind = kind;
  n.rel_path = "infiniband/" + name;
  n.path = "/dev/" + n.rel_path;
  n.is_char_device = true;
  n.major = 231;
  n.minor = 192;
  n.probed = probed;
  n.open_errno = err;
  return n;
}

CheckFacts HealthyFacts() {
  CheckFacts f;
  f.dev_root = "/dev";
  f.nodes = {Node(NodeKind::kUverbs, "uverbs0", 0)};
  f.memlock.soft = std::nullopt;  // unlimited
  f.memlock.hard = std::nullopt;
  f.providers = {{"efa", "efa", "rdmap79s0-rdm"}, {"tcp;ofi_rxm", "10.0.0.0/24", "eth0"}};
  return f;
}

// ---- Exhaustive: every combination of the inputs that matter, against an
// oracle written directly from the spec's precedence list.

enum class Access { kAbsent, kOk, kEacces, kEperm, kEnxio };
const Access kAllAccess[] = {Access::kAbsent, Access::kOk, Access::kEacces, Access::kEperm,
                             Access::kEnxio};

int ErrnoOf(Access a) {
  switch (a) {
    case Access::kEacces:
      return EACCES;
    case Access::kEperm:
      return EPERM;
    case Access::kEnxio:
      return ENXIO;
    default:
      return 0;
  }
}

struct Scenario {
  Access uverbs0, uverbs1, rdma_cm, umad0;
  bool issm0;
  bool require_efa;
  bool efa_offered;
  std::optional<uint64_t> soft;
  std::optional<uint64_t> hard;
  bool cap_ipc_lock;
};

Verdict Oracle(const Scenario& s, uint64_t mr_size) {
  auto denied = [](Access a) { return a == Access::kEacces || a == Access::kEperm; };
  if (denied(s.uverbs0) || denied(s.uverbs1) || denied(s.rdma_cm)) return Verdict::kNotGranted;
  if (s.uverbs0 == Access::kEnxio || s.uverbs1 == Access::kEnxio || s.rdma_cm == Access::kEnxio) {
    return Verdict::kOpenFailed;
  }
  if (s.uverbs0 == Access::kAbsent && s.uverbs1 == Access::kAbsent) return Verdict::kNoDevices;
  if (s.require_efa && !s.efa_offered) return Verdict::kProviderMissing;
  if (!s.cap_ipc_lock && s.soft && *s.soft < mr_size) return Verdict::kMemlockTooLow;
  return Verdict::kOk;
}

CheckFacts FactsFor(const Scenario& s) {
  CheckFacts f;
  f.dev_root = "/dev";
  auto add = [&](Access a, NodeKind k, const char* name) {
    if (a != Access::kAbsent) f.nodes.push_back(Node(k, name, ErrnoOf(a)));
  };
  add(s.uverbs0, NodeKind::kUverbs, "uverbs0");
  add(s.uverbs1, NodeKind::kUverbs, "uverbs1");
  add(s.rdma_cm, NodeKind::kRdmaCm, "rdma_cm");
  add(s.umad0, NodeKind::kUmad, "umad0");
  if (s.issm0) f.nodes.push_back(Node(NodeKind::kIssm, "issm0", 0, /*probed=*/false));
  f.providers.push_back({"tcp;ofi_rxm", "127.0.0.1/32", "lo"});
  if (s.efa_offered) f.providers.push_back({"efa", "efa", "rdmap79s0-rdm"});
  f.memlock = {s.soft, s.hard, s.cap_ipc_lock};
  return f;
}

TEST(DecideTest, ExhaustiveAgainstSpecOracle) {
  const uint64_t min = 64ull << 20;
  const std::optional<uint64_t> limits[] = {std::nullopt, 8ull << 20, min - 1, min, 1ull << 30};
  std::set<Verdict> seen;
  int cases = 0;
  for (Access u0 : kAllAccess)
    for (Access u1 : kAllAccess)
      for (Access cm : kAllAccess)
        for (Access umad : {Access::kAbsent, Access::kOk, Access::kEacces})
          for (bool issm : {false, true})
            for (bool require : {false, true})
              for (bool offered : {false, true})
                for (auto soft : limits)
                  for (auto hard : {std::optional<uint64_t>(), std::optional<uint64_t>(8 << 20)})
                    for (bool cap : {false, true}) {
                      Scenario s{u0, u1, cm, umad, issm, require, offered, soft, hard, cap};
                      CheckPolicy policy;
                      policy.mr_size = min;
                      if (require) policy.required_provider = "efa";
                      CheckFacts facts = FactsFor(s);
                      CheckReport r = Decide(facts, policy);
                      Verdict want = Oracle(s, min);
                      ++cases;
                      const bool first_of_verdict = seen.insert(r.verdict).second;
                      ASSERT_EQ(VerdictName(r.verdict), VerdictName(want))
                          << "case " << cases << " summary: " << r.summary;
                      // A plain prefix test: 60,000 gmock matchers cost more
                      // than Decide itself under ASan.
                      ASSERT_EQ(r.summary.rfind(VerdictName(want) + ":", 0), 0u) << r.summary;
                      // The first finding is the verdict; the others follow in precedence order.
                      if (want == Verdict::kOk) {
                        ASSERT_TRUE(r.findings.empty());
                      } else {
                        ASSERT_EQ(r.findings.front().verdict, want);
                        for (size_t i = 1; i < r.findings.size(); ++i) {
                          ASSERT_LT(static_cast<int>(r.findings[i - 1].verdict),
                                    static_cast<int>(r.findings[i].verdict));
                        }
                      }
                      // The JSON carries the verdict it is given; once per verdict
                      // proves the mapping (it was most of this test's time).
                      if (first_of_verdict) {
                        auto json = CheckReportToJson(facts, policy, r);
                        ASSERT_EQ(json["verdict"], VerdictName(want));
                        ASSERT_EQ(json["exit_code"], VerdictExitCode(want));
                      }
                    }
  EXPECT_EQ(cases, 5 * 5 * 5 * 3 * 2 * 2 * 2 * 5 * 2 * 2);
  EXPECT_EQ(seen.size(), 6u);  // every verdict is reachable
}

TEST(DecideTest, HealthyIsOk) {
  CheckPolicy policy{"efa", 64ull << 20};
  CheckReport r = Decide(HealthyFacts(), policy);
  EXPECT_EQ(r.verdict, Verdict::kOk);
  EXPECT_THAT(r.summary, HasSubstr("provider efa present"));
}

TEST(DecideTest, NotGrantedNamesTheNodesAndTheFix) {
  CheckFacts f = HealthyFacts();
  f.nodes.push_back(Node(NodeKind::kUverbs, "uverbs1", EPERM));
  f.nodes.push_back(Node(NodeKind::kUverbs, "uverbs2", EACCES));
  f.providers.clear();  // the EFA provider vanished because of the denied node
  CheckReport r = Decide(f, CheckPolicy{"efa", 64ull << 20});
  EXPECT_EQ(r.verdict, Verdict::kNotGranted);
  EXPECT_THAT(r.summary, HasSubstr("infiniband/uverbs1 (EPERM), infiniband/uverbs2 (EACCES)"));
  EXPECT_THAT(r.summary, HasSubstr("fall back to TCP"));
  ASSERT_EQ(r.findings.size(), 2u);
  EXPECT_EQ(r.findings[1].verdict, Verdict::kProviderMissing);
}

TEST(DecideTest, UmadDeniedAndIssmUnprobedDoNotFailTheCheck) {
  CheckFacts f = HealthyFacts();
  f.nodes.push_back(Node(NodeKind::kUmad, "umad0", EACCES));
  f.nodes.push_back(Node(NodeKind::kIssm, "issm0", 0, /*probed=*/false));
  EXPECT_EQ(Decide(f, CheckPolicy{}).verdict, Verdict::kOk);
}

TEST(DecideTest, RdmaCmAloneIsNoDevices) {
  CheckFacts f = HealthyFacts();
  f.nodes = {Node(NodeKind::kRdmaCm, "rdma_cm", 0)};
  EXPECT_EQ(Decide(f, CheckPolicy{}).verdict, Verdict::kNoDevices);
}

TEST(DecideTest, MemlockThresholdIsStrictAndCapIpcLockOverrides) {
  CheckFacts f = HealthyFacts();
  CheckPolicy policy{std::nullopt, 64ull << 20};
  f.memlock = {64ull << 20, 64ull << 20, false};
  EXPECT_EQ(Decide(f, policy).verdict, Verdict::kOk);
  f.memlock = {(64ull << 20) - 1, std::nullopt, false};
  CheckReport r = Decide(f, policy);
  EXPECT_EQ(r.verdict, Verdict::kMemlockTooLow);
  EXPECT_THAT(r.summary, HasSubstr("hard limit allows it"));
  f.memlock = {8ull << 20, 8ull << 20, false};
  EXPECT_THAT(Decide(f, policy).summary, HasSubstr("memlock unlimited in the container runtime"));
  f.memlock.cap_ipc_lock = true;
  EXPECT_EQ(Decide(f, policy).verdict, Verdict::kOk);
}

TEST(DecideTest, ProviderMissingMentionsTheQueryError) {
  CheckFacts f = HealthyFacts();
  f.providers.clear();
  f.provider_error = "fi_getinfo: No data available (-61)";
  CheckReport r = Decide(f, CheckPolicy{"efa", 1});
  EXPECT_EQ(r.verdict, Verdict::kProviderMissing);
  EXPECT_THAT(r.summary, HasSubstr("No data available"));
}

TEST(ProviderNamesTest, CoreNameIsBeforeTheSemicolon) {
  EXPECT_EQ(CoreProviderName("tcp;ofi_rxm"), "tcp");
  EXPECT_EQ(CoreProviderName("efa"), "efa");
  EXPECT_TRUE(ProviderSatisfies("tcp", "tcp;ofi_rxm"));
  EXPECT_TRUE(ProviderSatisfies("tcp;ofi_rxm", "tcp;ofi_rxm"));
  EXPECT_TRUE(ProviderSatisfies("efa", "efa"));
  EXPECT_FALSE(ProviderSatisfies("efa", "tcp;ofi_rxm"));
  EXPECT_FALSE(ProviderSatisfies("ofi_rxm", "tcp;ofi_rxm"));
  EXPECT_FALSE(ProviderSatisfies("tc", "tcp"));
  EXPECT_FALSE(ProviderSatisfies("verbs", "tcp;ofi_rxm"));
}

TEST(VerdictTest, ExitCodesAreDistinctAndOnlyOkIsZero) {
  std::set<int> codes;
  for (Verdict v : {Verdict::kOk, Verdict::kNotGranted, Verdict::kOpenFailed, Verdict::kNoDevices,
                    Verdict::kProviderMissing, Verdict::kMemlockTooLow}) {
    codes.insert(VerdictExitCode(v));
    EXPECT_EQ(VerdictExitCode(v) == 0, v == Verdict::kOk);
  }
  EXPECT_EQ(codes.size(), 6u);
  EXPECT_EQ(VerdictName(Verdict::kMemlockTooLow), "memlock-too-low");
  EXPECT_EQ(VerdictName(Verdict::kProviderMissing), "provider-missing");
  EXPECT_EQ(VerdictName(Verdict::kNoDevices), "no-devices");
  EXPECT_EQ(VerdictName(Verdict::kNotGranted), "not-granted");
}

TEST(ErrnoStringTest, NameAndText) {
  EXPECT_EQ(ErrnoString(EACCES), "EACCES (Permission denied)");
  EXPECT_EQ(ErrnoString(EPERM), "EPERM (Operation not permitted)");
  EXPECT_EQ(ErrnoString(0), "");
}

TEST(CheckJsonTest, Shape) {
  CheckFacts f = HealthyFacts();
  f.nodes.push_back(Node(NodeKind::kUverbs, "uverbs1", EACCES));
  f.nodes.back().ibdev = "mlx5_0";
  f.nodes.back().sysfs_dev = std::make_pair(231u, 193u);
  f.memlock = {8ull << 20, std::nullopt, false};
  CheckPolicy policy{"efa", 64ull << 20};
  auto j = CheckReportToJson(f, policy, Decide(f, policy));
  EXPECT_EQ(j.begin().key(), "verdict");
  EXPECT_EQ(j["verdict"], "not-granted");
  EXPECT_EQ(j["exit_code"], kExitNotGranted);
  ASSERT_EQ(j["devices"].size(), 2u);
  const auto& d = j["devices"][1];
  EXPECT_EQ(d["path"], "/dev/infiniband/uverbs1");
  EXPECT_EQ(d["name"], "infiniband/uverbs1");
  EXPECT_EQ(d["kind"], "uverbs");
  EXPECT_EQ(d["major"], 231);
  EXPECT_EQ(d["minor"], 192);
  EXPECT_EQ(d["open"], "failed");
  EXPECT_EQ(d["errno"], EACCES);
  EXPECT_EQ(d["error"], "EACCES (Permission denied)");
  EXPECT_EQ(d["ibdev"], "mlx5_0");
  EXPECT_EQ(d["sysfs_dev"], "231:193");
  EXPECT_EQ(j["devices"][0]["open"], "ok");
  EXPECT_TRUE(j["devices"][0]["ibdev"].is_null());
  EXPECT_EQ(j["memlock"]["soft_bytes"], 8ull << 20);
  EXPECT_TRUE(j["memlock"]["hard_bytes"].is_null());
  EXPECT_EQ(j["memlock"]["hard_unlimited"], true);
  EXPECT_EQ(j["memlock"]["min_bytes"], 64ull << 20);
  EXPECT_EQ(j["provider_requested"], "efa");
  ASSERT_EQ(j["providers"].size(), 2u);
  EXPECT_EQ(j["providers"][1]["provider"], "tcp;ofi_rxm");
  EXPECT_EQ(j["providers"][1]["core"], "tcp");
  EXPECT_EQ(j["providers"][1]["domain"], "eth0");
  ASSERT_EQ(j["findings"].size(), 2u);
  EXPECT_EQ(j["findings"][1]["verdict"], "memlock-too-low");
}

TEST(CheckTextTest, ShowsNodesProvidersAndVerdictLast) {
  CheckFacts f = HealthyFacts();
  f.nodes.push_back(Node(NodeKind::kIssm, "issm0", 0, false));
  f.nodes.front().ibdev = "rdmap79s0";
  f.nodes.front().sysfs_dev = std::make_pair(231u, 200u);
  CheckPolicy policy{"efa", 64ull << 20};
  std::string text = CheckReportToText(f, policy, Decide(f, policy));
  EXPECT_THAT(text, HasSubstr("infiniband/uverbs0"));
  EXPECT_THAT(text, HasSubstr("rdmap79s0"));
  EXPECT_THAT(text, HasSubstr("libibverbs will refuse this node"));
  EXPECT_THAT(text, HasSubstr("not opened (opening issm claims the SM role)"));
  EXPECT_THAT(text, HasSubstr("efa: rdmap79s0-rdm"));
  EXPECT_THAT(text, HasSubstr("memlock: soft unlimited"));
  EXPECT_THAT(text, ::testing::EndsWith("verdict: ok: 1 uverbs node(s) open, memlock unlimited, "
                                        "provider efa present\n"));
}

// ---- Collection over a temp dev root (real open() calls).

class CollectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fctl-check-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    std::filesystem::create_directories(root_ + "/dev/infiniband");
    std::filesystem::create_directories(root_ + "/sys/class/infiniband_verbs/uverbs0");
    std::ofstream(root_ + "/sys/class/infiniband_verbs/uverbs0/ibdev") << "rdmap79s0\n";
    std::ofstream(root_ + "/sys/class/infiniband_verbs/uverbs0/dev") << "231:192\n";
  }
  void TearDown() override {
    for (const std::string& p : immutable_) SetImmutable(p, false);
    std::filesystem::remove_all(root_);
  }
  std::string Dev(const std::string& name) { return root_ + "/dev/infiniband/" + name; }
  void Touch(const std::string& name, mode_t mode = 0644) {
    std::ofstream(Dev(name)) << "";
    ASSERT_EQ(chmod(Dev(name).c_str(), mode), 0);
  }
  static bool SetImmutable(const std::string& path, bool on) {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    int flags = 0;
    bool ok = ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0;
    flags = on ? (flags | FS_IMMUTABLE_FL) : (flags & ~FS_IMMUTABLE_FL);
    ok = ok && ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
    close(fd);
    return ok;
  }
  const DeviceNodeFacts* Find(const std::vector<DeviceNodeFacts>& v, const std::string& rel) {
    for (const auto& n : v) {
      if (n.rel_path == rel) return &n;
    }
    return nullptr;
  }
  std::string root_;
  std::vector<std::string> immutable_;
};

TEST_F(CollectTest, MissingDirectoryMeansNoNodes) {
  EXPECT_TRUE(CollectDeviceNodes(root_ + "/nowhere", root_ + "/sys").empty());
}

TEST_F(CollectTest, ProbesEachKindInNaturalOrder) {
  Touch("uverbs0");
  Touch("uverbs10");
  Touch("uverbs2");
  Touch("umad0");
  Touch("issm0");
  Touch("not-a-fabric-node");
  std::filesystem::create_directory(Dev("uverbs3"));                  // EISDIR
  std::filesystem::create_symlink("/nonexistent/x", Dev("rdma_cm"));  // ENOENT
  auto nodes = CollectDeviceNodes(root_ + "/dev", root_ + "/sys");
  std::vector<std::string> order;
  for (const auto& n : nodes) order.push_back(n.rel_path);
  EXPECT_THAT(order,
              ::testing::ElementsAre("infiniband/issm0", "infiniband/rdma_cm", "infiniband/umad0",
                                     "infiniband/uverbs0", "infiniband/uverbs2",
                                     "infiniband/uverbs3", "infiniband/uverbs10"));
  const DeviceNodeFacts* u0 = Find(nodes, "infiniband/uverbs0");
  ASSERT_NE(u0, nullptr);
  EXPECT_TRUE(u0->probed);
  EXPECT_EQ(u0->open_errno, 0);
  EXPECT_FALSE(u0->is_char_device);
  EXPECT_EQ(u0->ibdev, "rdmap79s0");
  EXPECT_EQ(u0->sysfs_dev, std::make_pair(231u, 192u));
  EXPECT_EQ(u0->path, root_ + "/dev/infiniband/uverbs0");
  EXPECT_EQ(Find(nodes, "infiniband/uverbs3")->open_errno, EISDIR);
  EXPECT_EQ(Find(nodes, "infiniband/rdma_cm")->open_errno, ENOENT);
  EXPECT_EQ(Find(nodes, "infiniband/rdma_cm")->kind, NodeKind::kRdmaCm);
  EXPECT_FALSE(Find(nodes, "infiniband/issm0")->probed);
  EXPECT_EQ(Find(nodes, "infiniband/umad0")->kind, NodeKind::kUmad);
}

// EACCES for real: mode 0000 as non-root. Root bypasses DAC, so there this
// part is skipped (the integration test re-runs the binary as nobody).
TEST_F(CollectTest, ModeZeroGivesEaccesForNonRoot) {
  if (geteuid() == 0) GTEST_SKIP() << "root bypasses file modes";
  Touch("uverbs0", 0000);
  auto nodes = CollectDeviceNodes(root_ + "/dev", root_ + "/sys");
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].open_errno, EACCES);
}

// EPERM for real: open(O_RDWR) of an immutable file fails with EPERM even
// for root (setting the flag needs CAP_LINUX_IMMUTABLE and ext2/3/4, xfs, btrfs).
TEST_F(CollectTest, ImmutableFileGivesEperm) {
  Touch("uverbs0");
  if (!SetImmutable(Dev("uverbs0"), true)) {
    GTEST_SKIP() << "cannot set FS_IMMUTABLE_FL here (needs root on ext4/xfs/btrfs)";
  }
  immutable_.push_back(Dev("uverbs0"));
  auto nodes = CollectDeviceNodes(root_ + "/dev", root_ + "/sys");
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].open_errno, EPERM);
  CheckFacts f;
  f.nodes = nodes;
  f.memlock.cap_ipc_lock = true;
  EXPECT_EQ(Decide(f, CheckPolicy{}).verdict, Verdict::kNotGranted);
}

// A real character device whose major has no driver: ENXIO, "open-failed".
TEST_F(CollectTest, CharDeviceWithoutDriverGivesEnxio) {
  // Major 231 minor 250 is never a live uverbs node (uverbs uses 192..223).
  if (mknod(Dev("uverbs0").c_str(), S_IFCHR | 0666, makedev(231, 250)) != 0) {
    GTEST_SKIP() << "mknod needs CAP_MKNOD";
  }
  auto nodes = CollectDeviceNodes(root_ + "/dev", root_ + "/sys");
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_TRUE(nodes[0].is_char_device);
  EXPECT_EQ(nodes[0].major, 231u);
  EXPECT_EQ(nodes[0].minor, 250u);
  EXPECT_EQ(nodes[0].open_errno, ENXIO);
}

TEST(CollectMemlockTest, MatchesGetrlimit) {
  MemlockFacts m = CollectMemlock();
  struct rlimit rl {};
  ASSERT_EQ(getrlimit(RLIMIT_MEMLOCK, &rl), 0);
  EXPECT_EQ(m.soft.has_value(), rl.rlim_cur != RLIM_INFINITY);
  if (m.soft) {
    EXPECT_EQ(*m.soft, rl.rlim_cur);
  }
}

TEST(CollectProvidersTest, TcpAndShmAnswerHere) {
  std::string error;
  auto providers = CollectProviders(&error);
  EXPECT_EQ(error, "");
  bool tcp = false, shm = false;
  for (const auto& p : providers) {
    tcp = tcp || ProviderSatisfies("tcp", p.provider);
    shm = shm || p.provider == "shm";
  }
  EXPECT_TRUE(tcp);
  EXPECT_TRUE(shm);
}

}  // namespace
}  // namespace fabric::fabricctl
