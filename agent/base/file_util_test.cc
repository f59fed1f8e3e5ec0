#include "agent/base/file_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "gtest/gtest.h"
#include "test/testing/status_matchers.h"

namespace fabric {
namespace {

class FileUtilTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fabric-fileutil-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  void Write(const std::string& name, const std::string& content) {
    std::ofstream(dir_ + "/" + name) << content;
  }
  std::string dir_;
};

TEST_F(FileUtilTest, ReadsSysfsFormats) {
  Write("numa", "-1\n");
  Write("vendor", "0x1d0f\n");
  Write("dev", "231:192\n");
  Write("counter", "18446744073709551615\n");
  EXPECT_THAT(ReadInt(dir_ + "/numa"), IsOkAndHolds(-1));
  EXPECT_THAT(ReadHex(dir_ + "/vendor"), IsOkAndHolds(0x1d0fu));
  EXPECT_THAT(ReadDevNumbers(dir_ + "/dev"), IsOkAndHolds(std::make_pair(231u, 192u)));
  EXPECT_THAT(ReadU64(dir_ + "/counter"), IsOkAndHolds(18446744073709551615ull));
}

TEST_F(FileUtilTest, MalformedValuesNameTheFile) {
  Write("dev", "231-192\n");
  Write("vendor", "amazon\n");
  auto dev = ReadDevNumbers(dir_ + "/dev");
  EXPECT_THAT(dev, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_NE(dev.status().message().find(dir_ + "/dev"), std::string::npos);
  EXPECT_THAT(ReadHex(dir_ + "/vendor"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ReadU64(dir_ + "/missing"), StatusIs(absl::StatusCode::kNotFound));
}

TEST(QuoteContentTest, ShortIsQuotedWholeLongIsCutEscapedAlways) {
  EXPECT_EQ(QuoteContent("garbage"), "'garbage'");
  EXPECT_EQ(QuoteContent("a\nb"), "'a\\nb'");
  EXPECT_EQ(QuoteContent(std::string(64, 'x')), "'" + std::string(64, 'x') + "'");
  EXPECT_EQ(QuoteContent(std::string(65536, 'x')),
            "'" + std::string(64, 'x') + "...' (65536 bytes)");
}

TEST_F(FileUtilTest, ListDirSortsNaturally) {
  for (const char* n : {"uverbs10", "uverbs2", "uverbs1"}) Write(n, "");
  EXPECT_THAT(ListDir(dir_),
              IsOkAndHolds(std::vector<std::string>{"uverbs1", "uverbs2", "uverbs10"}));
}

TEST_F(FileUtilTest, WriteFileAtomicReplaces) {
  ASSERT_OK(WriteFileAtomic(dir_ + "/f", "one"));
  ASSERT_OK(WriteFileAtomic(dir_ + "/f", "two"));
  EXPECT_THAT(ReadFile(dir_ + "/f"), IsOkAndHolds(std::string("two")));
  EXPECT_THAT(ListDir(dir_), IsOkAndHolds(std::vector<std::string>{"f"}));
}

TEST(BasenameTest, Works) {
  EXPECT_EQ(Basename("/sys/devices/pci0000:00/0000:10:1b.0"), "0000:10:1b.0");
  EXPECT_EQ(Basename("a/b/"), "b");
}

TEST_F(FileUtilTest, MkdirAllCreatesParentsWithTheModeAndKeepsExistingOnes) {
  ASSERT_OK(MkdirAll(dir_ + "/a", 0755));
  ASSERT_OK(MkdirAll(dir_ + "/a/b/c", 0700));
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/a").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);  // existing: untouched
  ASSERT_EQ(::stat((dir_ + "/a/b/c").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_OK(MkdirAll(dir_ + "/a/b/c", 0700));  // idempotent
  Write("file", "x");
  EXPECT_FALSE(MkdirAll(dir_ + "/file", 0700).ok());
  EXPECT_FALSE(MkdirAll(dir_ + "/file/sub", 0700).ok());
}

}  // namespace
}  // namespace fabric
