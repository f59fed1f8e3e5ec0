// Runs runc-memlock-test.sh (real runc, a busybox bundle, our hook as a
// createRuntime hook) and maps its PASS/FAIL/SKIP lines onto gtest.
#include <sys/wait.h>

#include <cstdio>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace {

struct ScriptRun {
  int exit_code = -1;
  std::string output;
};

ScriptRun RunScript(const std::string& cases) {
  ScriptRun run;
  std::string cmd = std::string("'") + FABRIC_RUNC_MEMLOCK_SCRIPT + "' '" + FABRIC_MEMLOCK_HOOK +
                    "' " + cases + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return run;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) run.output.append(buf, n);
  int status = ::pclose(p);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

// Checks one case: fails on FAIL, skips (with the script's reason) on SKIP.
void ExpectCase(const std::string& name) {
  ScriptRun run = RunScript(name);
  std::istringstream lines(run.output);
  std::string line;
  bool passed = false;
  while (std::getline(lines, line)) {
    if (line.rfind("SKIP " + name, 0) == 0) GTEST_SKIP() << line;
    if (line.rfind("FAIL " + name, 0) == 0) ADD_FAILURE() << line;
    if (line.rfind("PASS " + name, 0) == 0) passed = true;
  }
  EXPECT_TRUE(passed) << run.output;
  EXPECT_EQ(run.exit_code, 0) << run.output;
}

TEST(RuncMemlockTest, ContainerWithoutHookKeepsInheritedLimit) { ExpectCase("no-hook"); }

// Needs CAP_SYS_RESOURCE (skips on hosts whose root lacks it; runs in the VM).
TEST(RuncMemlockTest, HookRaisesToUnlimited) { ExpectCase("unlimited"); }

TEST(RuncMemlockTest, HookRaisesSoftLimitWithoutPrivilege) { ExpectCase("soft-raise"); }

TEST(RuncMemlockTest, HookErrorFailsTheContainer) { ExpectCase("bad-arg-fatal"); }

// Only meaningful without CAP_SYS_RESOURCE (skips where the runtime has it).
TEST(RuncMemlockTest, MissingCapabilityIsAClearError) { ExpectCase("no-cap-fatal"); }

}  // namespace
