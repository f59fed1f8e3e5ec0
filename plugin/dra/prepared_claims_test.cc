#include "plugin/dra/prepared_claims.h"

#include <sys/stat.h>

#include <fstream>

#include "agent/base/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/status_matchers.h"
#include "test/testing/test_dirs.h"

namespace fabric::dra {
namespace {

using ::testing::HasSubstr;

PreparedClaim Sample() {
  return PreparedClaim{"team-a",
                       "efa-pair",
                       {{{"efa"}, "node-1", "rdmap79s0", {"x/y=1"}},
                        {{"efa", "other"}, "node-1", "rdmap80s0", {"x/y=2"}}}};
}

TEST(PreparedClaimsTest, MissingFileIsEmpty) {
  testing::TempDir dir("dra-ck");
  PreparedClaims claims(dir.path() + "/state");
  EXPECT_OK(claims.Load());
  EXPECT_EQ(claims.size(), 0u);
}

TEST(PreparedClaimsTest, PutPersistsAndReloads) {
  testing::TempDir dir("dra-ck");
  {
    PreparedClaims claims(dir.path() + "/state");
    ASSERT_OK(claims.Load());
    ASSERT_OK(claims.Put("uid-1", Sample()));
    ASSERT_OK(claims.Put("uid-2", PreparedClaim{"ns", "n", {}}));
  }
  struct stat st;
  ASSERT_EQ(::stat((dir.path() + "/state/prepared-claims.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  PreparedClaims again(dir.path() + "/state");
  ASSERT_OK(again.Load());
  ASSERT_EQ(again.size(), 2u);
  ASSERT_NE(again.Find("uid-1"), nullptr);
  EXPECT_EQ(*again.Find("uid-1"), Sample());
  ASSERT_OK(again.Remove("uid-1"));
  ASSERT_OK(again.Remove("never-there"));
  PreparedClaims third(dir.path() + "/state");
  ASSERT_OK(third.Load());
  EXPECT_EQ(third.Find("uid-1"), nullptr);
  EXPECT_NE(third.Find("uid-2"), nullptr);
}

TEST(PreparedClaimsTest, WriteFailureChangesNothing) {
  testing::TempDir dir("dra-ck");
  // The state "directory" is a file: every save fails.
  std::ofstream(dir.path() + "/blocker") << "x";
  PreparedClaims claims(dir.path() + "/blocker");
  EXPECT_FALSE(claims.Put("uid-1", Sample()).ok());
  EXPECT_EQ(claims.Find("uid-1"), nullptr);
}

TEST(PreparedClaimsTest, CorruptFileIsNamedMovedAsideAndStartsEmpty) {
  testing::TempDir dir("dra-ck");
  const std::string file = dir.path() + "/prepared-claims.json";
  for (const std::string& bad :
       {std::string("{\"version\":1,\"claims\":{\"u\":{\"namespace\":\"a\""),  // truncated
        std::string("[1,2]"), std::string("{\"version\":2,\"claims\":{}}"),
        std::string("{\"version\":1,\"claims\":{\"u\":{\"namespace\":7,\"name\":\"n\","
                    "\"devices\":[]}}}"),
        std::string("{\"version\":1,\"claims\":{\"u\":{\"namespace\":\"a\",\"name\":\"n\","
                    "\"devices\":[{\"pool\":\"p\",\"device\":\"d\\u0001\"}]}}}"),
        std::string("{\"version\":1,\"claims\":{\"\":{\"namespace\":\"a\",\"name\":\"n\","
                    "\"devices\":[]}}}"),
        std::string("\xff\xfe garbage")}) {
    std::ofstream(file, std::ios::trunc) << bad;
    PreparedClaims claims(dir.path());
    absl::Status s = claims.Load();
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_THAT(std::string(s.message()), HasSubstr(file)) << bad;
    EXPECT_EQ(claims.size(), 0u);
    EXPECT_FALSE(PathExists(file)) << "the corrupt file must be moved aside";
    EXPECT_TRUE(PathExists(file + ".corrupt"));
    // And the next save works.
    EXPECT_OK(claims.Put("uid-1", Sample()));
    ::unlink(file.c_str());
  }
}

TEST(PreparedClaimsTest, SerializeParseRoundTrip) {
  std::map<std::string, PreparedClaim> in = {{"a", Sample()}, {"b", PreparedClaim{"x", "y", {}}}};
  auto out = ParsePreparedClaims(SerializePreparedClaims(in), "mem");
  ASSERT_OK(out.status());
  EXPECT_EQ(*out, in);
}

}  // namespace
}  // namespace fabric::dra
