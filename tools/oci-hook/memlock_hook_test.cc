#include "tools/oci-hook/memlock_hook.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fabric::memlock_hook {
namespace {

using ::testing::HasSubstr;

TEST(ParseMemlockTest, AcceptsUnitsAndUnlimited) {
  struct {
    const char* in;
    rlim_t want;
  } cases[] = {
      {"unlimited", RLIM_INFINITY},
      {"infinity", RLIM_INFINITY},
      {"-1", RLIM_INFINITY},
      {"0", 0},
      {"65536", 65536},
      {"64Ki", 65536},
      {"16Mi", 16ull << 20},
      {"2Gi", 2ull << 30},
      {"1Ti", 1ull << 40},
  };
  for (const auto& c : cases) {
    HookResult<rlim_t> r = ParseMemlock(c.in);
    ASSERT_TRUE(r.ok()) << c.in << ": " << r.error;
    EXPECT_EQ(*r.value, c.want) << c.in;
  }
}

TEST(ParseMemlockTest, RejectsGarbageAndOverflow) {
  for (const char* bad : {"", "Mi", "12K", "12kb", "1.5Gi", "-2", " 1", "1 ",
                          "99999999999999999999", "16777216Ti", "18446744073709551615"}) {
    HookResult<rlim_t> r = ParseMemlock(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_FALSE(r.error.empty()) << bad;
  }
  EXPECT_THAT(ParseMemlock("12K").error, HasSubstr("Ki, Mi, Gi or Ti"));
}

TEST(ParseArgsTest, DefaultsAndFlags) {
  HookResult<Options> r = ParseArgs({});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value->memlock, RLIM_INFINITY);
  EXPECT_FALSE(r.value->best_effort);

  r = ParseArgs({"--memlock=8Gi", "--best-effort"});
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.value->memlock, 8ull << 30);
  EXPECT_TRUE(r.value->best_effort);

  r = ParseArgs({"--memlock=lots"});
  EXPECT_FALSE(r.ok());
  EXPECT_THAT(r.error, HasSubstr("lots"));
  r = ParseArgs({"--memlock", "1Gi"});  // only the '=' form
  EXPECT_FALSE(r.ok());
  EXPECT_THAT(r.error, HasSubstr("unknown argument \"--memlock\""));
}

TEST(ParseStateTest, ReadsOciState) {
  HookResult<ContainerState> r =
      ParseState(R"({"ociVersion":"1.0.2","id":"abc","status":"creating","pid":4242,)"
                 R"("bundle":"/run/containerd/x","annotations":{"k":"v"}})");
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.value->id, "abc");
  EXPECT_EQ(r.value->status, "creating");
  EXPECT_EQ(r.value->pid, 4242);
}

TEST(ParseStateTest, RejectsMissingOrBadPid) {
  EXPECT_THAT(ParseState("").error, HasSubstr("not a JSON object"));
  EXPECT_THAT(ParseState("[1]").error, HasSubstr("not a JSON object"));
  EXPECT_THAT(ParseState(R"({"id":"a","status":"stopped"})").error,
              HasSubstr("no integer \"pid\""));
  EXPECT_THAT(ParseState(R"({"id":"a","pid":"12"})").error, HasSubstr("no integer \"pid\""));
  EXPECT_THAT(ParseState(R"({"id":"a","pid":0})").error, HasSubstr("invalid pid 0"));
  EXPECT_THAT(ParseState(R"({"id":"a","pid":-5})").error, HasSubstr("invalid pid -5"));
  EXPECT_THAT(ParseState(R"({"id":"a","pid":99999999999})").error, HasSubstr("invalid pid"));
}

TEST(FormatLimitTest, Readable) {
  EXPECT_EQ(FormatLimit(RLIM_INFINITY), "unlimited");
  EXPECT_EQ(FormatLimit(65536), "64Ki");
  EXPECT_EQ(FormatLimit(8ull << 30), "8Gi");
  EXPECT_EQ(FormatLimit(1000), "1000");
  EXPECT_EQ(FormatLimit(0), "0");
}

TEST(TargetLimitsTest, NeverLowers) {
  struct rlimit cur = {65536, 1 << 20};
  struct rlimit t = TargetLimits(cur, RLIM_INFINITY);
  EXPECT_EQ(t.rlim_cur, RLIM_INFINITY);
  EXPECT_EQ(t.rlim_max, RLIM_INFINITY);
  t = TargetLimits(cur, 1 << 20);
  EXPECT_EQ(t.rlim_cur, rlim_t{1 << 20});
  EXPECT_EQ(t.rlim_max, rlim_t{1 << 20});
  t = TargetLimits(cur, 4096);  // below both: unchanged
  EXPECT_EQ(t.rlim_cur, cur.rlim_cur);
  EXPECT_EQ(t.rlim_max, cur.rlim_max);
  struct rlimit unlimited = {RLIM_INFINITY, RLIM_INFINITY};
  t = TargetLimits(unlimited, 1 << 30);
  EXPECT_EQ(t.rlim_cur, RLIM_INFINITY);
}

// A child process standing in for the container's init process.
class ChildProcess {
 public:
  explicit ChildProcess(struct rlimit memlock) {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setrlimit(RLIMIT_MEMLOCK, &memlock);  // lowering needs no privilege
      ::pause();
      ::_exit(0);
    }
    // Wait until the child applied its limits.
    for (int i = 0; i < 500; ++i) {
      struct rlimit now;
      if (::prlimit(pid_, RLIMIT_MEMLOCK, nullptr, &now) == 0 && now.rlim_max == memlock.rlim_max &&
          now.rlim_cur == memlock.rlim_cur)
        break;
      ::usleep(2000);
    }
  }
  ~ChildProcess() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }
  struct rlimit Limits() const {
    struct rlimit r = {0, 0};
    ::prlimit(pid_, RLIMIT_MEMLOCK, nullptr, &r);
    return r;
  }

 private:
  pid_t pid_;
};

TEST(RaiseMemlockTest, RaisesSoftUpToHardWithoutPrivilege) {
  struct rlimit mine;
  ASSERT_EQ(::getrlimit(RLIMIT_MEMLOCK, &mine), 0);
  if (mine.rlim_max < 65536) GTEST_SKIP() << "hard RLIMIT_MEMLOCK below 64Ki here";
  ChildProcess child({4096, mine.rlim_max});
  Options opts;
  opts.memlock = mine.rlim_max;
  HookResult<std::string> r = RaiseMemlock(child.pid(), opts);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_THAT(*r.value, HasSubstr("raised from 4Ki:"));
  EXPECT_EQ(child.Limits().rlim_cur, mine.rlim_max);

  r = RaiseMemlock(child.pid(), opts);  // second run: nothing to do
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_THAT(*r.value, HasSubstr("already"));
}

TEST(RaiseMemlockTest, HardLimitNeedsCapSysResource) {
  ChildProcess child({4096, 65536});
  Options opts;  // unlimited
  HookResult<std::string> r = RaiseMemlock(child.pid(), opts);
  if (HaveCapSysResource()) {
    ASSERT_TRUE(r.ok()) << r.error;
    EXPECT_EQ(child.Limits().rlim_max, RLIM_INFINITY);
    return;
  }
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error, HasSubstr("needs CAP_SYS_RESOURCE"));
  EXPECT_THAT(r.error, HasSubstr("pid " + std::to_string(child.pid())));
  EXPECT_EQ(child.Limits().rlim_cur, rlim_t{4096});  // untouched

  opts.best_effort = true;
  r = RaiseMemlock(child.pid(), opts);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_THAT(*r.value, HasSubstr("best effort: soft limit now 64Ki"));
  EXPECT_EQ(child.Limits().rlim_cur, rlim_t{65536});
}

TEST(RaiseMemlockTest, GonePidIsAnError) {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  HookResult<std::string> r = RaiseMemlock(pid, Options{});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error, HasSubstr("No such process"));
}

}  // namespace
}  // namespace fabric::memlock_hook
