#include "agent/base/json_text.h"

#include <gtest/gtest.h>

#include "agent/base/utf8.h"

namespace fabric {
namespace {

TEST(DumpJsonTest, InvalidUtf8IsReplacedNotThrown) {
  // A netdev renamed to raw bytes, and the same bytes as a key.
  const std::string bad = "eth\xff\xfe\xc0";
  nlohmann::json j = {{"name", bad}, {bad, {bad, "ok"}}};
  // The plain dump throws (type_error.316): what DumpJson exists to avoid.
  EXPECT_THROW((void)j.dump(), nlohmann::json::type_error);
  std::string text;
  ASSERT_NO_THROW(text = DumpJson(j));
  EXPECT_TRUE(IsValidUtf8(text)) << text;
  EXPECT_NE(text.find("eth\xEF\xBF\xBD"), std::string::npos) << text;
  // And it parses back.
  EXPECT_NO_THROW((void)nlohmann::json::parse(text));
  ASSERT_NO_THROW(text = DumpJson(j, 2));
  EXPECT_NE(text.find("\n  "), std::string::npos);
}

TEST(DumpJsonTest, ValidTextIsUnchanged) {
  nlohmann::json j = {{"name", "mlx5_0"}, {"note", "caf\xC3\xA9"}};
  EXPECT_EQ(DumpJson(j), j.dump());
  EXPECT_EQ(DumpJson(j, 1), j.dump(1));
  nlohmann::ordered_json o = {{"b", "\x80"}, {"a", 1}};
  EXPECT_EQ(DumpJson(o), "{\"b\":\"\xEF\xBF\xBD\",\"a\":1}");
}

TEST(StringAtTest, ReadsThroughObjectsWithoutTrustingTypes) {
  const auto j = nlohmann::json::parse(
      R"({"metadata": {"name": "c1", "uid": 7, "labels": []}, "spec": "x", "list": [1]})");
  EXPECT_EQ(StringAt(j, {"metadata", "name"}), "c1");
  EXPECT_EQ(StringAt(j, {"metadata", "uid"}), "");          // a number
  EXPECT_EQ(StringAt(j, {"metadata", "labels", "a"}), "");  // an array on the way
  EXPECT_EQ(StringAt(j, {"spec", "nodeName"}), "");         // a string on the way
  EXPECT_EQ(StringAt(j, {"missing", "name"}), "");
  EXPECT_EQ(StringAt(j, {"spec"}), "x");
  EXPECT_EQ(StringAt(nlohmann::json(nullptr), {"a"}), "");
  ASSERT_NE(MemberAt(j, {"list"}), nullptr);
  EXPECT_TRUE(MemberAt(j, {"list"})->is_array());
  EXPECT_EQ(MemberAt(j, {"list", "0"}), nullptr);
  EXPECT_EQ(MemberAt(j, {}), &j);
  const auto o = nlohmann::ordered_json::parse(R"({"dra": {"slices": {"last_error": "409"}}})");
  EXPECT_EQ(StringAt(o, {"dra", "slices", "last_error"}), "409");
}

}  // namespace
}  // namespace fabric
