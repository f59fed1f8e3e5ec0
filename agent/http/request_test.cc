#include "agent/http/request.h"

#include "gtest/gtest.h"

namespace fabric {
namespace {

TEST(ParseRequestHeadTest, GetAndHeadAreRoutedByPathWithoutQuery) {
  HttpRequestHead r = ParseRequestHead("GET /metrics?x=1 HTTP/1.1\r\nHost: a");
  EXPECT_EQ(r.status, 0);
  EXPECT_FALSE(r.head_only);
  EXPECT_EQ(r.path, "/metrics");
  r = ParseRequestHead("HEAD /healthz HTTP/1.0");
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(r.head_only);
  EXPECT_EQ(r.path, "/healthz");
  EXPECT_EQ(r.query, "");
}

TEST(ParseRequestHeadTest, QueryIsKeptApart) {
  HttpRequestHead r = ParseRequestHead("GET /v1/pods/ml/member-0?window=60s&x=y?z HTTP/1.1");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.path, "/v1/pods/ml/member-0");
  EXPECT_EQ(r.query, "window=60s&x=y?z");
  r = ParseRequestHead("GET /v1/pods? HTTP/1.1");
  EXPECT_EQ(r.path, "/v1/pods");
  EXPECT_EQ(r.query, "");
}

TEST(ParseRequestHeadTest, OtherMethodsAre405) {
  HttpRequestHead r = ParseRequestHead("POST /metrics HTTP/1.1");
  EXPECT_EQ(r.status, 405);
  EXPECT_FALSE(r.head_only);
}

TEST(ParseRequestHeadTest, AnythingElseIs400) {
  for (const char* head : {"", "GET /metrics", "GET /metrics HTTP/2", "GET  /a b HTTP/1.1",
                           "\r\nGET /metrics HTTP/1.1", "GET /metrics HTTP/1.1 x"}) {
    EXPECT_EQ(ParseRequestHead(head).status, 400) << head;
  }
}

TEST(ParseRequestHeadTest, ReadsTheBearerTokenOnly) {
  HttpRequestHead r = ParseRequestHead(
      "GET /v1/pods HTTP/1.1\r\nHost: x\r\nauthorization:   Bearer  abc.def-1  \r\nX: y");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.bearer_token, "abc.def-1");
  EXPECT_EQ(ParseRequestHead("GET / HTTP/1.1\r\nAuthorization: Basic dTpw").bearer_token, "");
  EXPECT_EQ(ParseRequestHead("GET / HTTP/1.1\r\nAuthorization: Bearer").bearer_token, "");
  EXPECT_EQ(ParseRequestHead("GET / HTTP/1.1\r\nX-Authorization: Bearer t").bearer_token, "");
  EXPECT_EQ(ParseRequestHead("GET / HTTP/1.1").bearer_token, "");
}

}  // namespace
}  // namespace fabric
