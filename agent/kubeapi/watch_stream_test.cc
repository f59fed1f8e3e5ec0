#include "agent/kubeapi/watch_stream.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/status_matchers.h"

namespace fabric::kubeapi {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Collector {
  std::vector<std::string> lines;
  WatchLineHandler handler() {
    return [this](absl::string_view l) {
      lines.emplace_back(l);
      return true;
    };
  }
};

TEST(WatchLineSplitter, SplitsAcrossChunks) {
  WatchLineSplitter s(100);
  Collector c;
  auto h = c.handler();
  ASSERT_OK(s.Feed("{\"a\"", h));
  ASSERT_OK(s.Feed(":1}\n{\"b\":2}\r\n\n{\"c\"", h));
  EXPECT_EQ(s.pending_bytes(), 4u);
  ASSERT_OK(s.Feed(":3}\n", h));
  EXPECT_THAT(c.lines, ElementsAre("{\"a\":1}", "{\"b\":2}", "{\"c\":3}"));
  EXPECT_EQ(s.pending_bytes(), 0u);
}

TEST(WatchLineSplitter, BoundsLineLength) {
  WatchLineSplitter s(10);
  Collector c;
  auto h = c.handler();
  ASSERT_OK(s.Feed("0123456789\n", h));    // exactly the bound
  ASSERT_OK(s.Feed("0123456789\r\n", h));  // the \r is not counted
  ASSERT_OK(s.Feed("01234", h));
  absl::Status st = s.Feed("567890123", h);
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(st.message(), HasSubstr("longer than 10 bytes"));
  EXPECT_EQ(s.pending_bytes(), 0u);  // the buffer was freed
  // It stays failed: the stream's framing is lost.
  EXPECT_THAT(s.Feed("x\n", h), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(c.lines.size(), 2u);
}

TEST(WatchLineSplitter, HugeLineInOneChunk) {
  WatchLineSplitter s(16 << 20);
  Collector c;
  std::string huge((16 << 20) + 5, 'x');
  huge += "\n";
  EXPECT_THAT(s.Feed(huge, c.handler()), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_TRUE(c.lines.empty());
}

TEST(WatchLineSplitter, HandlerStops) {
  WatchLineSplitter s(100);
  int n = 0;
  ASSERT_OK(s.Feed("a\nb\nc\n", [&](absl::string_view) { return ++n < 2; }));
  EXPECT_EQ(n, 2);
  EXPECT_TRUE(s.stopped());
}

TEST(ParseWatchEvent, Valid) {
  auto ev = ParseWatchEvent(
      R"({"type":"ADDED","object":{"kind":"ResourceSlice","metadata":{"name":"a","resourceVersion":"12"}}})");
  ASSERT_OK(ev);
  EXPECT_EQ(ev->type, WatchEvent::Type::kAdded);
  EXPECT_EQ(ev->resource_version, "12");
  EXPECT_EQ(ev->object["metadata"]["name"], "a");
  ev = ParseWatchEvent(R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"99"}}})");
  ASSERT_OK(ev);
  EXPECT_EQ(ev->type, WatchEvent::Type::kBookmark);
  ev = ParseWatchEvent(R"({"type":"ERROR","object":{"kind":"Status","code":410}})");
  ASSERT_OK(ev);
  EXPECT_EQ(ev->type, WatchEvent::Type::kError);
  EXPECT_EQ(ev->object["code"], 410);
}

TEST(ParseWatchEvent, HostileInput) {
  const std::string cases[] = {
      "not json",
      "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"\xff\xfe\",\"resourceVersion\":"
      "\"1\"}}}",
      "[1,2,3]",
      "{\"type\":\"ADDED\"}",
      "{\"type\":\"ADDED\",\"object\":[]}",
      "{\"type\":\"ADDED\",\"object\":{}}",
      "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"resourceVersion\":12}}}",
      "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"resourceVersion\":\"\"}}}",
      "{\"type\":\"EXPLODED\",\"object\":{\"metadata\":{\"resourceVersion\":\"1\"}}}",
      "{\"type\":7,\"object\":{}}",
      std::string("{\"type\":\"ADDED\"\0,\"object\":{}}", 30),
      "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"resourceVersion\":\"1\"}}} trailing",
      std::string(1 << 20, '['),  // deep nesting must not overflow the stack
  };
  for (const std::string& line : cases) {
    auto ev = ParseWatchEvent(line);
    EXPECT_THAT(ev, StatusIs(absl::StatusCode::kInvalidArgument)) << line.substr(0, 60);
    if (!ev.ok()) {
      EXPECT_LT(ev.status().message().size(), 600u);
      EXPECT_EQ(ev.status().message().find('\xff'), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace fabric::kubeapi
