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

}  // namespace
}  // namespace fabric
