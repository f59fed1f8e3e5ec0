#include "agent/base/prometheus_text.h"

#include <gtest/gtest.h>

#include "agent/base/utf8.h"

namespace fabric {
namespace {

TEST(PrometheusLabelValueTest, TheFormatsThreeEscapes) {
  EXPECT_EQ(PrometheusLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(PrometheusLabelValue("mlx5_0"), "mlx5_0");
  EXPECT_EQ(PrometheusLabelValue(""), "");
  EXPECT_EQ(PrometheusLabelValue("caf\xC3\xA9"), "caf\xC3\xA9");
}

TEST(PrometheusLabelValueTest, AnyBytesBecomeValidUtf8WithoutControls) {
  EXPECT_EQ(PrometheusLabelValue("eth\xff"), "eth\xEF\xBF\xBD");
  EXPECT_EQ(PrometheusLabelValue(std::string("a\0b\rc\x7f", 6)),
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD"
            "c\xEF\xBF\xBD");
  EXPECT_EQ(PrometheusLabelValue("x\xC2\x85y"), "x\xEF\xBF\xBDy");  // C1 NEL
  // Every single byte and every byte pair: valid UTF-8, no raw control, no
  // raw newline, and no quote or backslash that is not escaped.
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; b += 17) {
      const std::string in = {static_cast<char>(a), static_cast<char>(b), '"'};
      const std::string out = PrometheusLabelValue(in);
      ASSERT_TRUE(IsValidUtf8(out)) << a << " " << b;
      for (size_t i = 0; i < out.size(); ++i) {
        const auto c = static_cast<unsigned char>(out[i]);
        ASSERT_FALSE(c < 0x20 || c == 0x7f) << a << " " << b;
        if (c == '\\') {
          ASSERT_LT(i + 1, out.size());
          ASSERT_TRUE(out[i + 1] == '\\' || out[i + 1] == '"' || out[i + 1] == 'n');
          ++i;
        } else {
          ASSERT_NE(c, '"') << a << " " << b;
        }
      }
    }
  }
}

}  // namespace
}  // namespace fabric
