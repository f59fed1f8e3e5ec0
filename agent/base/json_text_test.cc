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

// The streaming writer writes what DumpJson writes of the same document.
TEST(JsonWriterTest, WritesWhatDumpJsonWrites) {
  const std::string tricky = std::string("q\"b\\s/\b\f\n\r\t") + '\x01' + '\x1f' +
                             "\x7f caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80";
  nlohmann::ordered_json want = {
      {"s", tricky},
      {"n", 18446744073709551615ULL},
      {"d", 60.0},
      {"f", 12.345},
      {"tiny", 1e-7},
      {"b", false},
      {"z", nullptr},
      {"a", nlohmann::ordered_json::array({1, "x", nlohmann::ordered_json::object()})},
      {"empty", nlohmann::ordered_json::array()},
      {"o", {{"k", true}}}};
  std::string got;
  JsonWriter w(&got);
  w.BeginObject().Key("s").String(tricky).Key("n").Uint(18446744073709551615ULL);
  w.Key("d").Double(60.0).Key("f").Double(12.345).Key("tiny").Double(1e-7);
  w.Key("b").Bool(false).Key("z").StringOrNull("");
  w.Key("a").BeginArray().Uint(1).String("x").BeginObject().EndObject().EndArray();
  w.Key("empty").BeginArray().EndArray();
  w.Key("o").BeginObject().Key("k").Bool(true).EndObject();
  w.EndObject();
  EXPECT_EQ(got, DumpJson(want));
}

// Ill-formed UTF-8 never reaches the text: each bad byte is U+FFFD.
TEST(JsonWriterTest, IllFormedUtf8BecomesReplacementCharacters) {
  for (const std::string bad : {std::string("\xff"), std::string("\xC0\xAF"),  // overlong '/'
                                std::string("\xED\xA0\x80"),                   // a surrogate
                                std::string("\xF4\x90\x80\x80"),               // past U+10FFFF
                                std::string("\xE2\x82")}) {                    // truncated
    std::string got;
    JsonWriter(&got).String("a" + bad + "b");
    std::string want = "\"a";
    for (size_t i = 0; i < bad.size(); ++i) want += "\xEF\xBF\xBD";
    EXPECT_EQ(got, want + "b\"");
    EXPECT_NO_THROW((void)nlohmann::json::parse(got));
  }
}

}  // namespace
}  // namespace fabric
