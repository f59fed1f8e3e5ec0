// Runs the real fabricctl binary: `bench` on tcp and shm (short and small:
// asserts completion, provider and positive numbers, never throughput), the
// provider guards, and `check -o json` on temp dev roots.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

struct RunOptions {
  bool as_nobody = false;                 // drop to uid/gid 65534 (when root)
  std::optional<rlim_t> memlock;          // RLIMIT_MEMLOCK (soft and hard) for the child
  bool drop_ipc_lock = false;             // remove CAP_IPC_LOCK from the child
  std::string binary = FABRICCTL_BINARY;  // what to exec
  std::string lsan_options;               // LSAN_OPTIONS for the child, when set
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// fork + exec with stdout/stderr captured in files of a temp dir.
RunResult RunFabricctl(const std::vector<std::string>& args, const RunOptions& opt = {}) {
  char tmpl[] = "/tmp/fctl-run-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return {};
  std::string dir = tmpl;
  std::string out = dir + "/out", err = dir + "/err";
  pid_t pid = fork();
  if (pid == 0) {
    int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(o, 1);
    dup2(e, 2);
    if (opt.memlock) {
      struct rlimit rl {
        *opt.memlock, *opt.memlock
      };
      if (setrlimit(RLIMIT_MEMLOCK, &rl) != 0) _exit(120);
    }
    // Dropping from the bounding set keeps root from regaining it at exec.
    if (opt.drop_ipc_lock && geteuid() == 0 && prctl(PR_CAPBSET_DROP, CAP_IPC_LOCK) != 0) {
      _exit(121);
    }
    if (!opt.lsan_options.empty()) setenv("LSAN_OPTIONS", opt.lsan_options.c_str(), 1);
    if (opt.as_nobody && geteuid() == 0) {
      if (setgroups(0, nullptr) != 0 || setresgid(65534, 65534, 65534) != 0 ||
          setresuid(65534, 65534, 65534) != 0) {
        _exit(122);
      }
    }
    std::vector<char*> argv;
    std::string bin = opt.binary;
    argv.push_back(bin.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = Slurp(out);
  r.err = Slurp(err);
  std::filesystem::remove_all(dir);
  return r;
}

nlohmann::json ParseJson(const RunResult& r) {
  auto j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << "stdout is not one JSON document:\n" << r.out << r.err;
  return j;
}

void ExpectBenchWorks(const std::string& provider, const std::string& opened_core,
                      std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"bench", "--provider", provider, "--size", "64k", "--batch",
                                   "4",     "--duration", "0.5",    "-o",     "json"};
  args.insert(args.end(), extra.begin(), extra.end());
  RunResult r = RunFabricctl(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["provider"].get<std::string>().substr(0, opened_core.size()), opened_core);
  EXPECT_EQ(j["provider_core"], opened_core);
  EXPECT_EQ(j["provider_requested"], provider);
  EXPECT_GT(j["write_gbytes_per_s"].get<double>(), 0);
  EXPECT_GT(j["read_gbytes_per_s"].get<double>(), 0);
  EXPECT_GT(j["write"]["ops"].get<uint64_t>(), 0u);
  EXPECT_GT(j["read"]["ops"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["size_bytes"], 65536);
  // The provider line comes first (stderr in json mode), progress follows.
  EXPECT_THAT(r.err.substr(0, r.err.find('\n')),
              HasSubstr("provider: " + j["provider"].get<std::string>()));
}

TEST(FabricctlBenchTest, TcpLoopback) { ExpectBenchWorks("tcp", "tcp"); }

TEST(FabricctlBenchTest, ShmLoopback) { ExpectBenchWorks("shm", "shm"); }

TEST(FabricctlBenchTest, TcpTwoEndpoints) { ExpectBenchWorks("tcp", "tcp", {"--threads", "2"}); }

TEST(FabricctlBenchTest, TextOutputStartsWithTheProvider) {
  RunResult r = RunFabricctl({"bench", "--provider", "shm", "--size", "4k", "--duration", "0.3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("provider: shm (requested shm)", 0), 0u) << r.out;
  EXPECT_THAT(r.out, HasSubstr("write "));
  EXPECT_THAT(r.out, HasSubstr("read "));
}

TEST(FabricctlBenchTest, RefusesWhenTheOpenedProviderDiffers) {
  // libfabric answers a request for the utility provider "ofi_rxm" with
  // "tcp;ofi_rxm": the core provider is tcp, not what was asked for.
  RunResult r =
      RunFabricctl({"bench", "--provider", "ofi_rxm", "--size", "4k", "--duration", "0.3"});
  EXPECT_EQ(r.exit_code, 8) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("refusing to report numbers"));
  EXPECT_THAT(r.out, HasSubstr("provider: "));  // what was opened is still shown
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("GB/s")));
}

TEST(FabricctlBenchTest, MissingProviderExitsSix) {
  RunResult r = RunFabricctl({"bench", "--provider", "efa", "--duration", "0.3", "-o", "json"});
  EXPECT_EQ(r.exit_code, 6) << r.err;
  EXPECT_THAT(r.err, HasSubstr("provider 'efa'"));
  EXPECT_EQ(r.out, "");
}

TEST(FabricctlBenchTest, ListenAndConnectAsTwoProcesses) {
  // Find a free port, then run a server and a client as separate processes.
  pid_t server = -1;
  std::string port = std::to_string(20000 + getpid() % 20000);
  char tmpl[] = "/tmp/fctl-srv-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string err = std::string(tmpl) + "/err";
  server = fork();
  if (server == 0) {
    int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(e, 2);
    std::string bin = FABRICCTL_BINARY;
    execl(bin.c_str(), bin.c_str(), "bench", "--listen", ("127.0.0.1:" + port).c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  RunResult c = RunFabricctl({"bench", "--connect", "127.0.0.1:" + port, "--provider", "tcp",
                              "--size", "16k", "--duration", "0.3", "-o", "json"});
  int status = 0;
  waitpid(server, &status, 0);
  std::string server_err = Slurp(err);
  std::filesystem::remove_all(tmpl);
  ASSERT_EQ(c.exit_code, 0) << c.err << "\nserver:\n" << server_err;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << server_err;
  EXPECT_THAT(server_err, HasSubstr("client done"));
  EXPECT_EQ(ParseJson(c)["peer_domain"], "lo");
}

// ---- check on temp dev roots.

class FabricctlCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fctl-chk-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    chmod(root_.c_str(), 0755);  // nobody must traverse it
    std::filesystem::create_directories(root_ + "/dev/infiniband");
    std::filesystem::create_directories(root_ + "/sys/class/infiniband_verbs/uverbs0");
    std::ofstream(root_ + "/sys/class/infiniband_verbs/uverbs0/ibdev") << "rdmap79s0\n";
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void Node(const std::string& name, mode_t mode) {
    std::string p = root_ + "/dev/infiniband/" + name;
    std::ofstream(p) << "";
    chmod(p.c_str(), mode);
  }
  std::vector<std::string> Check(std::vector<std::string> extra) {
    std::vector<std::string> a = {"check",        "--dev-root", root_ + "/dev", "--sysfs-root",
                                  root_ + "/sys", "-o",         "json"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  std::string root_;
};

TEST_F(FabricctlCheckTest, OkWhenNodesOpenAndLimitsSuffice) {
  Node("uverbs0", 0666);
  Node("issm0", 0600);
  RunResult r = RunFabricctl(Check({"--min-memlock", "1k", "--provider", "tcp"}));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto j = ParseJson(r);
  EXPECT_EQ(j["verdict"], "ok");
  ASSERT_EQ(j["devices"].size(), 2u);
  EXPECT_EQ(j["devices"][0]["name"], "infiniband/issm0");
  EXPECT_EQ(j["devices"][0]["open"], "skipped");
  EXPECT_EQ(j["devices"][1]["path"], root_ + "/dev/infiniband/uverbs0");
  EXPECT_EQ(j["devices"][1]["open"], "ok");
  EXPECT_EQ(j["devices"][1]["ibdev"], "rdmap79s0");
  EXPECT_EQ(j["memlock"]["min_bytes"], 1024);
  EXPECT_FALSE(j["providers"].empty());
}

TEST_F(FabricctlCheckTest, NoDevices) {
  RunResult r = RunFabricctl(Check({}));
  EXPECT_EQ(r.exit_code, 5) << r.out;
  EXPECT_EQ(ParseJson(r)["verdict"], "no-devices");
}

// A real EACCES from open(): mode 0000 opened by an unprivileged process (the
// binary runs as nobody when the test runs as root).
TEST_F(FabricctlCheckTest, NotGrantedWithRealEacces) {
  Node("uverbs0", 0666);
  Node("uverbs1", 0000);
  RunOptions unprivileged;
  unprivileged.as_nobody = true;
  // nobody must reach the binary too, and the build tree may lie where it
  // cannot (a clone in /root, mode 0700 on Debian): run a copy from root_.
  unprivileged.binary = root_ + "/fabricctl";
  std::error_code ec;
  std::filesystem::copy_file(FABRICCTL_BINARY, unprivileged.binary, ec);
  if (ec || chmod(unprivileged.binary.c_str(), 0755) != 0) {
    GTEST_SKIP() << "cannot copy fabricctl into " << root_ << " for nobody: " << ec.message();
  }
  // The same for LeakSanitizer's suppressions file (a sanitizer build under
  // tools/test.sh): an unreadable one aborts the binary at start.
  const char* lsan = getenv("LSAN_OPTIONS");
  std::string lsan_options = lsan ? lsan : "";
  if (auto at = lsan_options.find("suppressions="); at != std::string::npos) {
    at += strlen("suppressions=");
    const size_t end = std::min(lsan_options.find(':', at), lsan_options.size());
    const std::string copy = root_ + "/lsan.supp";
    std::filesystem::copy_file(lsan_options.substr(at, end - at), copy, ec);
    ASSERT_FALSE(ec) << "cannot copy the LSan suppressions for nobody: " << ec.message();
    ASSERT_EQ(chmod(copy.c_str(), 0644), 0);
    unprivileged.lsan_options = lsan_options.replace(at, end - at, copy);
  }
  RunResult r = RunFabricctl(Check({"--provider", "efa"}), unprivileged);
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  auto j = ParseJson(r);
  EXPECT_EQ(j["verdict"], "not-granted");
  EXPECT_EQ(j["devices"][1]["errno"], EACCES);
  EXPECT_EQ(j["devices"][1]["error"], "EACCES (Permission denied)");
  // Precedence: the missing provider is reported too, but after not-granted.
  EXPECT_EQ(j["findings"][1]["verdict"], "provider-missing");
}

TEST_F(FabricctlCheckTest, ProviderMissing) {
  Node("uverbs0", 0666);
  RunResult r = RunFabricctl(Check({"--provider", "efa", "--min-memlock", "1k"}));
  EXPECT_EQ(r.exit_code, 6) << r.out;
  EXPECT_EQ(ParseJson(r)["verdict"], "provider-missing");
}

// --wait: an init container's check retries until the node appears...
TEST_F(FabricctlCheckTest, WaitRetriesUntilTheFabricIsThere) {
  const auto start = std::chrono::steady_clock::now();
  std::thread grant([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    Node("uverbs0", 0666);
  });
  RunResult r = RunFabricctl(Check({"--wait", "20s", "--min-memlock", "1k"}));
  grant.join();
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(ParseJson(r)["verdict"], "ok");
  EXPECT_THAT(r.err, HasSubstr("fabricctl check: no-devices: "));
  EXPECT_THAT(r.err, HasSubstr("retrying"));
  EXPECT_GE(secs, 1.4);
  EXPECT_LT(secs, 15);
}

// ...and gives up once D has passed, with the last attempt's verdict.
TEST_F(FabricctlCheckTest, WaitGivesUpAfterTheDeadline) {
  const auto start = std::chrono::steady_clock::now();
  RunResult r = RunFabricctl(Check({"--wait", "1500ms"}));
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 5) << r.out << r.err;
  EXPECT_EQ(ParseJson(r)["verdict"], "no-devices");
  EXPECT_GE(secs, 1.5);
  EXPECT_LT(secs, 10);
}

TEST_F(FabricctlCheckTest, MemlockTooLow) {
  Node("uverbs0", 0666);
  RunOptions low;
  low.memlock = 1 << 20;
  low.drop_ipc_lock = true;
  RunResult r = RunFabricctl(Check({"--min-memlock", "64m"}), low);
  EXPECT_EQ(r.exit_code, 7) << r.out << r.err;
  auto j = ParseJson(r);
  EXPECT_EQ(j["verdict"], "memlock-too-low");
  EXPECT_EQ(j["memlock"]["soft_bytes"], 1 << 20);
  EXPECT_EQ(j["memlock"]["cap_ipc_lock"], false);
}

std::string Tree(const std::string& name) {
  const char* testdata = std::getenv("FABRIC_TESTDATA");
  return std::string(testdata ? testdata : FABRICCTL_TESTDATA) + "/nodes/" + name;
}

TEST(FabricctlDevicesTest, JsonOverTheP6SampleTree) {
  RunResult r =
      RunFabricctl({"devices", "-o", "json", "--sysfs-root", Tree("p6-b200.48xlarge") + "/sys",
                    "--dev-root", Tree("p6-b200.48xlarge") + "/dev"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = ParseJson(r);
  ASSERT_EQ(j["devices"].size(), 10u);
  for (const auto& d : j["devices"]) {
    EXPECT_TRUE(d["kind"] == "efa" || d["kind"] == "rdma");
    EXPECT_TRUE(d.contains("name") && d.contains("pci") && d.contains("numa_node") &&
                d.contains("ports") && d.contains("netdev") && d.contains("pools"));
  }
}

TEST(FabricctlDevicesTest, TextTableAndBadConfig) {
  RunResult r = RunFabricctl(
      {"devices", "--sysfs-root", Tree("rxe") + "/sys", "--dev-root", Tree("rxe") + "/dev"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("rxe0"));
  EXPECT_THAT(r.out, HasSubstr("eth0"));
  RunResult bad = RunFabricctl(
      {"devices", "--sysfs-root", Tree("rxe") + "/sys", "--config", "/nonexistent/fabric.yaml"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("nonexistent"));
}

// libibverbs and libefa are loaded at run time (agent/verbs): the binary
// starts on a host or in an image without rdma-core.
TEST(FabricctlCliTest, LinksNeitherLibibverbsNorLibefa) {
  FILE* p = popen(("readelf -d " + std::string(FABRICCTL_BINARY) + " 2>&1").c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  ASSERT_EQ(pclose(p), 0) << out;
  EXPECT_THAT(out, HasSubstr("(NEEDED)"));
  EXPECT_THAT(out, Not(HasSubstr("libibverbs")));
  EXPECT_THAT(out, Not(HasSubstr("libefa")));
  EXPECT_THAT(out, Not(HasSubstr("libfabric")));
}

TEST(FabricctlCliTest, HelpAndUsageErrors) {
  RunResult help = RunFabricctl({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("Exit codes:"));
  RunResult bad = RunFabricctl({"bench", "--size", "huge"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("bad size"));
}

}  // namespace
