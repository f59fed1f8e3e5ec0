#include "agent/http/response.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/status_matchers.h"

namespace fabric {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(WriteResponseHeadTest, SaysLengthCloseAndWhatTheStatusRequires) {
  const std::string ok = WriteResponseHead(200, "application/json", 12);
  EXPECT_EQ(ok,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\n"
            "Connection: close\r\n\r\n");
  EXPECT_THAT(WriteResponseHead(401, "application/json", 0),
              HasSubstr("\r\nWWW-Authenticate: Bearer\r\n"));
  EXPECT_THAT(WriteResponseHead(405, "text/plain", 0), HasSubstr("\r\nAllow: GET, HEAD\r\n"));
  EXPECT_THAT(WriteResponseHead(503, "text/plain", 0), Not(HasSubstr("WWW-Authenticate")));
}

TEST(WriteRequestHeadTest, HostLengthAndHeaders) {
  EXPECT_EQ(WriteRequestHead("PATCH", "/api/v1/x?y=1", "10.0.0.1:6443",
                             {{"Content-Type", "application/merge-patch+json"}}, 2),
            "PATCH /api/v1/x?y=1 HTTP/1.1\r\nHost: 10.0.0.1:6443\r\nContent-Length: 2\r\n"
            "Content-Type: application/merge-patch+json\r\n\r\n");
  EXPECT_EQ(WriteRequestHead("GET", "/", "h:1", {}, -1), "GET / HTTP/1.1\r\nHost: h:1\r\n\r\n");
}

TEST(ParseResponseHeadTest, StatusAndFraming) {
  auto h = ParseResponseHead("HTTP/1.1 201 Created\r\nContent-Length: 42\r\nX: y");
  ASSERT_OK(h);
  EXPECT_EQ(h->status, 201);
  EXPECT_EQ(h->content_length, 42);
  EXPECT_FALSE(h->chunked);
  EXPECT_FALSE(h->close);
  h = ParseResponseHead(
      "HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\nConnection: keep-alive, Close");
  ASSERT_OK(h);
  EXPECT_TRUE(h->chunked);
  EXPECT_TRUE(h->close);
  EXPECT_EQ(h->content_length, -1);
  h = ParseResponseHead("HTTP/1.0 200");  // no reason, and 1.0 closes
  ASSERT_OK(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_TRUE(h->close);
  // Both: chunked wins, and the connection is not reused.
  h = ParseResponseHead("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked");
  ASSERT_OK(h);
  EXPECT_TRUE(h->chunked);
  EXPECT_TRUE(h->close);
}

TEST(ParseResponseHeadTest, AnythingElseIsDataLossNamingIt) {
  for (const char* head :
       {"", "HTTP/1.1", "HTTP/2 200 OK", "HTTP/1.1 2000 OK", "HTTP/1.1 +20 OK", "HTTP/1.1 099 x",
        "SSH-2.0-OpenSSH", "HTTP/1.1 200 OK\r\nContent-Length: -1",
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2",
        "HTTP/1.1 200 OK\r\nContent-Length: +3", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip"}) {
    auto h = ParseResponseHead(head);
    EXPECT_THAT(h, StatusIs(absl::StatusCode::kDataLoss)) << head;
  }
  EXPECT_THAT(ParseResponseHead("\xff\xfe garbage").status().message(), Not(HasSubstr("\xff")));
}

TEST(ResponseHasNoBodyTest, HeadAnd1xx204And304) {
  EXPECT_TRUE(ResponseHasNoBody("HEAD", 200));
  EXPECT_TRUE(ResponseHasNoBody("GET", 204));
  EXPECT_TRUE(ResponseHasNoBody("GET", 304));
  EXPECT_TRUE(ResponseHasNoBody("GET", 101));
  EXPECT_FALSE(ResponseHasNoBody("GET", 200));
  EXPECT_FALSE(ResponseHasNoBody("POST", 404));
}

// Feeds `wire` in pieces of `step` bytes; the decoded body, or the error.
absl::StatusOr<std::string> Decode(const std::string& wire, size_t step, size_t* rest = nullptr) {
  ChunkedDecoder d;
  std::string out;
  size_t at = 0;
  while (at < wire.size() && !d.done()) {
    const std::string piece = wire.substr(at, step);
    auto used = d.Feed(piece, &out);
    if (!used.ok()) return used.status();
    at += *used;
    if (*used < piece.size()) break;
  }
  if (!d.done()) return absl::UnavailableError("not done");
  if (rest != nullptr) *rest = wire.size() - at;
  return out;
}

TEST(ChunkedDecoderTest, AnySplitGivesTheSameBody) {
  const std::string wire =
      "5\r\nhello\r\n1;ext=1\r\n \r\nA\r\n0123456789\r\n0\r\nTrailer: x\r\n\r\nNEXT";
  for (size_t step : {1u, 2u, 3u, 7u, 100u}) {
    size_t rest = 0;
    auto body = Decode(wire, step, &rest);
    ASSERT_OK(body) << step;
    EXPECT_EQ(*body, "hello 0123456789") << step;
    EXPECT_EQ(rest, 4u) << step;  // "NEXT" is not the body's
  }
  EXPECT_EQ(*Decode("0\r\n\r\n", 1), "");
  EXPECT_EQ(*Decode("3\nabc\n0\n\n", 2), "abc");  // bare LF, as lenient clients take it
}

TEST(ChunkedDecoderTest, BadFramingIsDataLoss) {
  for (const char* wire : {"x\r\n", "5\r\nhelloXY\r\n0\r\n\r\n", "-1\r\n", "11111111111111111\r\n",
                           "\r\n", "4000000000000001\r\n"}) {
    EXPECT_THAT(Decode(wire, 3), StatusIs(absl::StatusCode::kDataLoss)) << wire;
  }
  EXPECT_THAT(Decode(std::string(5000, '1'), 64), StatusIs(absl::StatusCode::kDataLoss));
  // Failed stays failed.
  ChunkedDecoder d;
  std::string out;
  EXPECT_FALSE(d.Feed("zz\r\n", &out).ok());
  EXPECT_FALSE(d.Feed("0\r\n\r\n", &out).ok());
}

TEST(PercentEncodeTest, KeepsOnlyUnreserved) {
  EXPECT_EQ(PercentEncode("app=fabric,tier!=x"), "app%3Dfabric%2Ctier%21%3Dx");
  EXPECT_EQ(PercentEncode("spec.nodeName=node-a_1~"), "spec.nodeName%3Dnode-a_1~");
  EXPECT_EQ(PercentEncode("a b/\xff"), "a%20b%2F%FF");
}

}  // namespace
}  // namespace fabric
