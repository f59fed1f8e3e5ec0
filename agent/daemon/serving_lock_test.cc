#include "agent/daemon/serving_lock.h"

#include <sys/wait.h>
#include <unistd.h>

#include "agent/base/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/test_dirs.h"

namespace fabric {
namespace {

using ::testing::HasSubstr;
using TempDir = ::fabric::testing::TempDir;

TEST(ServingLockTest, SecondHolderIsRefusedAndNamesTheFirst) {
  TempDir dir;
  absl::StatusOr<ServingLock> first = ServingLock::TryAcquire(dir.path(), "device-plugin");
  ASSERT_TRUE(first.ok()) << first.status();
  // flock locks belong to the open file description: another process is
  // needed to see the conflict, as two agents on one node would.
  const pid_t child = fork();
  if (child == 0) {
    absl::StatusOr<ServingLock> second = ServingLock::TryAcquire(dir.path(), "dra");
    const bool refused = absl::IsUnavailable(second.status()) &&
                         second.status().message().find(std::to_string(getppid()) +
                                                        " device-plugin") != std::string::npos;
    _exit(refused ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(ServingLockTest, FreedWhenTheHolderGoes) {
  TempDir dir;
  const std::string path = dir.path() + "/" + ServingLock::kFileName;
  {
    absl::StatusOr<ServingLock> first = ServingLock::TryAcquire(dir.path(), "dra");
    ASSERT_TRUE(first.ok());
    EXPECT_TRUE(ReadFile(path).ok());
  }
  // Uninstalling leaves nothing behind in the kubelet's folder.
  EXPECT_FALSE(ReadFile(path).ok());
  const pid_t child = fork();
  if (child == 0) _exit(ServingLock::TryAcquire(dir.path(), "device-plugin").ok() ? 0 : 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  auto note = ReadFile(path);  // the child _exit()ed: no destructor removed it
  ASSERT_TRUE(note.ok());
  EXPECT_THAT(*note, HasSubstr(" device-plugin"));
}

}  // namespace
}  // namespace fabric
