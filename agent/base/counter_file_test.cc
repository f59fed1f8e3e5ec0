#include "agent/base/counter_file.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "agent/base/file_util.h"
#include "gtest/gtest.h"
#include "test/testing/status_matchers.h"
#include "test/testing/test_dirs.h"

namespace fabric {
namespace {

using ::fabric::IsOkAndHolds;

// Descriptors this process has open whose target is under `dir`.
int OpenUnder(const std::string& dir) {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (dirent* e = readdir(d)) {
    char target[4096];
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    ssize_t len = readlink(link.c_str(), target, sizeof(target) - 1);
    if (len <= 0) continue;
    target[len] = '\0';
    if (std::string(target).rfind(dir, 0) == 0) ++n;
  }
  closedir(d);
  return n;
}

class CounterFileTest : public ::testing::Test {
 protected:
  // In place, as sysfs changes a value (same inode).
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name, std::ios::trunc) << text;
  }
  testing::TempDir tmp_{"cf"};
  const std::string dir_ = tmp_.path();
};

TEST_F(CounterFileTest, ReadsThroughOneKeptDescriptor) {
  Write("cmds_err", "3\n");
  CounterFile f(dir_ + "/cmds_err");
  EXPECT_EQ(OpenUnder(dir_), 0);  // opened on the first read, not before
  EXPECT_THAT(f.Read(), IsOkAndHolds(3u));
  EXPECT_TRUE(f.is_open());
  Write("cmds_err", "18446744073709551615\n");
  EXPECT_THAT(f.Read(), IsOkAndHolds(18446744073709551615u));
  EXPECT_EQ(OpenUnder(dir_), 1);  // still the one descriptor
  CounterFile moved = std::move(f);
  EXPECT_EQ(OpenUnder(dir_), 1);
  EXPECT_THAT(moved.Read(), IsOkAndHolds(18446744073709551615u));
  { CounterFile gone = std::move(moved); }
  EXPECT_EQ(OpenUnder(dir_), 0);  // closed with its owner
}

TEST_F(CounterFileTest, MissingFileIsNotFoundAndGarbageIsNamed) {
  CounterFile missing(dir_ + "/nope");
  EXPECT_EQ(missing.Read().status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(missing.is_open());
  Write("bad", "-1\n");
  CounterFile bad(dir_ + "/bad");
  absl::Status s = bad.Read().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(dir_ + "/bad: not a counter: '-1\\n'"), std::string::npos) << s;
  Write("bad", "7");  // recovers in place, no newline needed
  EXPECT_THAT(bad.Read(), IsOkAndHolds(7u));
}

// Found by test/fuzz/sysfs_fuzzer: a file whose first 64 bytes were a number
// and whitespace read as that number through CounterFile (one pread of 64
// bytes), while ReadU64 and ParseCounterText, which see it all, refused it.
TEST_F(CounterFileTest, ContentLongerThanACounterIsRefusedByEveryReader) {
  const std::string text = "4\n" + std::string(70, '\v') + "junk\n";
  Write("long", text);
  CounterFile f(dir_ + "/long");
  EXPECT_EQ(f.Read().status().code(), absl::StatusCode::kInvalidArgument);
  uint64_t v = 0;
  EXPECT_FALSE(ParseCounterText(text, &v));
  EXPECT_EQ(ReadU64(dir_ + "/long").status().code(), absl::StatusCode::kInvalidArgument);
  Write("long", "4" + std::string(70, ' ') + "\n");  // only whitespace: still over-long
  EXPECT_EQ(f.Read().status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ParseCounterText("4" + std::string(70, ' ') + "\n", &v));
  EXPECT_EQ(ReadU64(dir_ + "/long").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CounterFileTest, FailedReadClosesAndTheNextReadReopensThePath) {
  // open(2) of a directory succeeds and pread fails (EISDIR): the stand-in for
  // a sysfs attribute whose device went away (ENODEV on read).
  const std::string path = dir_ + "/c";
  ASSERT_EQ(mkdir(path.c_str(), 0755), 0);
  CounterFile f(path);
  EXPECT_EQ(f.Read().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(f.is_open());
  EXPECT_EQ(OpenUnder(dir_), 0);
  ASSERT_EQ(rmdir(path.c_str()), 0);
  Write("c", "5\n");  // re-created at the same path
  EXPECT_THAT(f.Read(), IsOkAndHolds(5u));
  EXPECT_TRUE(f.is_open());
}

TEST(ParseCounterTextTest, AcceptsSysfsCountersOnly) {
  uint64_t v = 0;
  EXPECT_TRUE(ParseCounterText("42\n", &v));
  EXPECT_EQ(v, 42u);
  EXPECT_TRUE(ParseCounterText(" 0 ", &v));
  EXPECT_EQ(v, 0u);
  EXPECT_FALSE(ParseCounterText("", &v));
  EXPECT_FALSE(ParseCounterText("-3\n", &v));
  EXPECT_FALSE(ParseCounterText("N/A\n", &v));
  EXPECT_FALSE(ParseCounterText("18446744073709551616\n", &v));  // 2^64
}

}  // namespace
}  // namespace fabric
