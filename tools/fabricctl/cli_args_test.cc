#include "tools/fabricctl/cli_args.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/base/host_paths.h"
#include "test/testing/status_matchers.h"

namespace fabric::fabricctl {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<Command> Parse(std::vector<std::string> args) { return ParseCommandLine(args); }

TEST(ParseByteSizeTest, AcceptsPlainAndSuffixedBinarySizes) {
  EXPECT_THAT(ParseByteSize("4096"), IsOkAndHolds(4096u));
  EXPECT_THAT(ParseByteSize("4k"), IsOkAndHolds(4096u));
  EXPECT_THAT(ParseByteSize("4K"), IsOkAndHolds(4096u));
  EXPECT_THAT(ParseByteSize("4KiB"), IsOkAndHolds(4096u));
  EXPECT_THAT(ParseByteSize("1m"), IsOkAndHolds(1048576u));
  EXPECT_THAT(ParseByteSize("1MB"), IsOkAndHolds(1048576u));
  EXPECT_THAT(ParseByteSize("2g"), IsOkAndHolds(2ull << 30));
  EXPECT_THAT(ParseByteSize("7b"), IsOkAndHolds(7u));
  EXPECT_THAT(ParseByteSize(" 64m "), IsOkAndHolds(64ull << 20));
}

TEST(ParseByteSizeTest, RejectsGarbage) {
  for (const char* bad : {"", "k", "4x", "-1", "1.5m", "m4", "4 k k", "99999999999999999g"}) {
    EXPECT_THAT(ParseByteSize(bad), StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
}

TEST(ParseSecondsTest, AcceptsSecondsAndMilliseconds) {
  EXPECT_THAT(ParseSeconds("5"), IsOkAndHolds(5.0));
  EXPECT_THAT(ParseSeconds("2.5s"), IsOkAndHolds(2.5));
  EXPECT_THAT(ParseSeconds("500ms"), IsOkAndHolds(0.5));
  for (const char* bad : {"0", "-1", "abc", "nan", "inf", "", "s", "5m"}) {
    EXPECT_THAT(ParseSeconds(bad), StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
}

TEST(FormatBytesTest, ExactMultiplesHaveNoDecimals) {
  EXPECT_EQ(FormatBytes(3), "3 B");
  EXPECT_EQ(FormatBytes(4096), "4 KiB");
  EXPECT_EQ(FormatBytes(1 << 20), "1 MiB");
  EXPECT_EQ(FormatBytes(64ull << 20), "64 MiB");
  EXPECT_EQ(FormatBytes(1536ull << 20), "1.5 GiB");
  EXPECT_EQ(FormatBytes(1500), "1.5 KiB");
}

TEST(ParseHostPortTest, Forms) {
  EXPECT_THAT(ParseHostPort("10.0.0.1:7000", false), IsOkAndHolds(HostPort{"10.0.0.1", 7000}));
  EXPECT_THAT(ParseHostPort("[fe80::1]:9", false), IsOkAndHolds(HostPort{"fe80::1", 9}));
  EXPECT_THAT(ParseHostPort("node-a:1", false), IsOkAndHolds(HostPort{"node-a", 1}));
  EXPECT_THAT(ParseHostPort(":7000", true), IsOkAndHolds(HostPort{"", 7000}));
  EXPECT_THAT(ParseHostPort("7000", true), IsOkAndHolds(HostPort{"", 7000}));
  for (const char* bad : {"7000", ":7000", "host:", "host:0", "host:65536", "fe80::1:80",
                          "[fe80::1]", "[fe80::1]80", "host:x"}) {
    EXPECT_THAT(ParseHostPort(bad, false), StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
}

TEST(ParseCommandLineTest, CheckDefaultsComeFromHostPaths) {
  auto cmd = Parse({"check"});
  ASSERT_THAT(cmd, IsOk());
  EXPECT_EQ(cmd->kind, Command::Kind::kCheck);
  EXPECT_EQ(cmd->check.dev_root, HostPaths::Defaults().dev_root);
  EXPECT_EQ(cmd->check.sysfs_root, HostPaths::Defaults().sysfs_root);
  EXPECT_EQ(cmd->check.mr_size, 64ull << 20);
  EXPECT_DOUBLE_EQ(cmd->check.wait_s, 0);
  EXPECT_FALSE(cmd->check.provider.has_value());
  EXPECT_EQ(cmd->check.format, OutputFormat::kText);
}

TEST(ParseCommandLineTest, CheckFlagsBothSpellings) {
  auto cmd = Parse({"check", "--dev-root", "/tmp/d", "--sysfs-root=/tmp/s", "--provider=efa",
                    "--min-memlock", "1g", "-o", "json"});
  ASSERT_THAT(cmd, IsOk());
  EXPECT_EQ(cmd->check.dev_root, "/tmp/d");
  EXPECT_EQ(cmd->check.sysfs_root, "/tmp/s");
  EXPECT_EQ(cmd->check.provider, "efa");
  EXPECT_EQ(cmd->check.mr_size, 1ull << 30);
  EXPECT_EQ(cmd->check.format, OutputFormat::kJson);
  EXPECT_EQ(Parse({"check", "-ojson"})->check.format, OutputFormat::kJson);
  EXPECT_EQ(Parse({"check", "--output=text"})->check.format, OutputFormat::kText);
  EXPECT_EQ(Parse({"check", "--mr-size", "4m"})->check.mr_size, 4ull << 20);
}

TEST(ParseCommandLineTest, CheckWaitAndMrSize) {
  EXPECT_DOUBLE_EQ(Parse({"check", "--wait", "30s"})->check.wait_s, 30);
  EXPECT_DOUBLE_EQ(Parse({"check", "--wait=2m"})->check.wait_s, 120);
  EXPECT_DOUBLE_EQ(Parse({"check", "--wait", "1m30s"})->check.wait_s, 90);
  EXPECT_DOUBLE_EQ(Parse({"check", "--wait", "45"})->check.wait_s, 45);
  EXPECT_DOUBLE_EQ(Parse({"check", "--wait", "500ms"})->check.wait_s, 0.5);
  for (const char* bad : {"", "soon", "-5s", "0", "0m", "2h", "1m-3s"}) {
    auto r = Parse({"check", "--wait", bad});
    EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
  EXPECT_THAT(Parse({"check", "--wait", "soon"}).status().message(), HasSubstr("--wait"));
  EXPECT_THAT(Parse({"check", "--mr-size", "512"}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Parse({"check", "--mr-size", "1t"}), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ParseCommandLineTest, BenchDefaultsAreLoopbackTcpOneMiB) {
  auto cmd = Parse({"bench"});
  ASSERT_THAT(cmd, IsOk());
  const BenchOptions& b = cmd->bench;
  EXPECT_EQ(b.role, BenchOptions::Role::kLoopback);
  EXPECT_EQ(b.provider, "tcp");
  EXPECT_EQ(b.size, 1u << 20);
  EXPECT_EQ(b.batch, 16u);
  EXPECT_EQ(b.threads, 1u);
  EXPECT_DOUBLE_EQ(b.duration_s, 5);
  EXPECT_TRUE(b.progress);
}

TEST(ParseCommandLineTest, BenchAllFlags) {
  auto cmd = Parse({"bench", "--connect", "10.1.2.3:9000", "--provider", "efa", "--domain",
                    "rdmap79s0-rdm", "--size", "4k", "--batch=64", "--threads", "4", "--duration",
                    "500ms", "--quiet", "-o", "json"});
  ASSERT_THAT(cmd, IsOk());
  const BenchOptions& b = cmd->bench;
  EXPECT_EQ(b.role, BenchOptions::Role::kConnect);
  EXPECT_EQ(b.peer, (HostPort{"10.1.2.3", 9000}));
  EXPECT_EQ(b.provider, "efa");
  EXPECT_EQ(b.domain, "rdmap79s0-rdm");
  EXPECT_EQ(b.size, 4096u);
  EXPECT_EQ(b.batch, 64u);
  EXPECT_EQ(b.threads, 4u);
  EXPECT_DOUBLE_EQ(b.duration_s, 0.5);
  EXPECT_FALSE(b.progress);
  EXPECT_EQ(b.format, OutputFormat::kJson);
}

TEST(ParseCommandLineTest, ListenValueIsOptional) {
  auto bare = Parse({"bench", "--listen", "--size", "4k"});
  ASSERT_THAT(bare, IsOk());
  EXPECT_EQ(bare->bench.role, BenchOptions::Role::kListen);
  EXPECT_EQ(bare->bench.peer, (HostPort{"", kDefaultBenchPort}));
  EXPECT_EQ(bare->bench.size, 4096u);
  EXPECT_EQ(Parse({"bench", "--listen", "7000"})->bench.peer, (HostPort{"", 7000}));
  EXPECT_EQ(Parse({"bench", "--listen=10.0.0.5:7001"})->bench.peer, (HostPort{"10.0.0.5", 7001}));
}

TEST(ParseCommandLineTest, Misuse) {
  struct Case {
    std::vector<std::string> args;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {{}, "missing command"},
           {{"frobnicate"}, "unknown command"},
           {{"check", "--bogus"}, "unknown argument"},
           {{"check", "--dev-root"}, "needs a value"},
           {{"check", "-o", "yaml"}, "expected json or text"},
           {{"check", "--min-memlock", "lots"}, "bad size"},
           {{"bench", "--connect"}, "needs a value"},
           {{"bench", "--connect", "7000"}, "expected ADDR:PORT"},
           {{"bench", "--listen", "--connect", "a:1"}, "exclude each other"},
           {{"bench", "--batch", "0"}, "1..4096"},
           {{"bench", "--threads", "x"}, "1..256"},
           {{"bench", "--size", "0"}, "must be > 0"},
           {{"bench", "--size", "1024g"}, "at most 16 GiB"},
           {{"bench", "--duration", "0"}, "bad duration"},
           {{"bench", "--provider="}, "empty name"},
           {{"devices", "--provider", "efa"}, "unknown argument"},
       }) {
    auto cmd = Parse(c.args);
    EXPECT_THAT(cmd, StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(std::string(cmd.status().message()), HasSubstr(c.message));
  }
}

TEST(ParseCommandLineTest, HelpAnywhere) {
  EXPECT_EQ(Parse({"--help"})->kind, Command::Kind::kHelp);
  EXPECT_EQ(Parse({"help"})->kind, Command::Kind::kHelp);
  EXPECT_EQ(Parse({"bench", "--size", "4k", "-h"})->kind, Command::Kind::kHelp);
}

TEST(ParseCommandLineTest, DevicesFlags) {
  auto cmd = Parse(
      {"devices", "--sysfs-root", "/s", "--dev-root=/d", "--config", "/c.yaml", "-o", "json"});
  ASSERT_THAT(cmd, IsOk());
  EXPECT_EQ(cmd->kind, Command::Kind::kDevices);
  EXPECT_EQ(cmd->devices.sysfs_root, "/s");
  EXPECT_EQ(cmd->devices.dev_root, "/d");
  EXPECT_EQ(cmd->devices.config_path, "/c.yaml");
  EXPECT_EQ(cmd->devices.format, OutputFormat::kJson);
}

TEST(UsageTextTest, DocumentsEveryExitCodeAndVerdict) {
  std::string u = UsageText();
  for (const char* s :
       {"0  ok", "1  runtime error", "2  usage error", "3  check: not-granted",
        "4  check: open-failed", "5  check: no-devices", "6  check/bench: provider-missing",
        "7  check: memlock-too-low", "8  bench:", "tcp;ofi_rxm"}) {
    EXPECT_THAT(u, HasSubstr(s));
  }
}

}  // namespace
}  // namespace fabric::fabricctl
