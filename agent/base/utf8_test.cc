#include "agent/base/utf8.h"

#include <gtest/gtest.h>

namespace fabric {
namespace {

TEST(Utf8Test, AcceptsWellFormedText) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("rdmap79s0"));
  EXPECT_TRUE(IsValidUtf8("n\xC3\xA9ud"));       // é
  EXPECT_TRUE(IsValidUtf8("\xE2\x82\xAC"));      // €
  EXPECT_TRUE(IsValidUtf8("\xF0\x9F\x98\x80"));  // U+1F600
  EXPECT_TRUE(IsValidUtf8("\xF4\x8F\xBF\xBF"));  // U+10FFFF
}

TEST(Utf8Test, RejectsIllFormedText) {
  EXPECT_FALSE(IsValidUtf8("\xFF"));
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xE0\x80\xAF"));      // overlong
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));      // surrogate D800
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xE2\x82"));          // truncated
  EXPECT_FALSE(IsValidUtf8("abc\x80"));           // lone continuation
}

TEST(Utf8Test, SanitizeReplacesOnlyBadBytes) {
  EXPECT_EQ(SanitizeUtf8("node-1"), "node-1");
  EXPECT_EQ(SanitizeUtf8("a\xFF"
                         "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(SanitizeUtf8("\xE2\x82"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_TRUE(IsValidUtf8(SanitizeUtf8("\xC0\xAF\xED\xA0\x80\xF4\x90\x80\x80")));
}

TEST(Utf8Test, ExternalNamesAreCheckedAndQuotedSafely) {
  EXPECT_TRUE(CheckExternalName("node name", "ip-10-0-0-1", 64).ok());
  absl::Status bad = CheckExternalName("node name", "n\xFF", 64);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("node name \"n\\xff\" is not valid UTF-8"), std::string::npos)
      << bad.message();
  EXPECT_TRUE(IsValidUtf8(bad.message()));
  EXPECT_FALSE(CheckExternalName("device", "a\nb", 64).ok());
  EXPECT_FALSE(CheckExternalName("device", "a\x7F", 64).ok());
  EXPECT_FALSE(CheckExternalName("device", "a\xC2\x85", 64).ok());  // NEL, a C1 control
  EXPECT_TRUE(CheckExternalName("device", "caf\xC3\xA9", 64).ok());
  EXPECT_FALSE(CheckExternalName("device", std::string(65, 'a'), 64).ok());
}

}  // namespace
}  // namespace fabric
