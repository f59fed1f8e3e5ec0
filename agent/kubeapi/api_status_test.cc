#include "agent/kubeapi/api_status.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/status_matchers.h"

namespace fabric::kubeapi {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string StatusBody(int code, const std::string& reason, const std::string& message) {
  return nlohmann::json{
      {"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", nlohmann::json::object()},
      {"status", "Failure"}, {"message", message}, {"reason", reason},
      {"code", code}}
      .dump();
}

TEST(StatusFromApiResponse, MapsEachCodeOnce) {
  struct Case {
    long code;
    std::string reason;
    absl::StatusCode want;
  };
  const Case cases[] = {
      {400, "BadRequest", absl::StatusCode::kInvalidArgument},
      {401, "Unauthorized", absl::StatusCode::kUnauthenticated},
      {403, "Forbidden", absl::StatusCode::kPermissionDenied},
      {404, "NotFound", absl::StatusCode::kNotFound},
      {409, "Conflict", absl::StatusCode::kAborted},
      {409, "AlreadyExists", absl::StatusCode::kAlreadyExists},
      {410, "Expired", absl::StatusCode::kOutOfRange},
      {410, "Gone", absl::StatusCode::kOutOfRange},
      {422, "Invalid", absl::StatusCode::kInvalidArgument},
      {422, "Forbidden", absl::StatusCode::kPermissionDenied},
      {429, "TooManyRequests", absl::StatusCode::kResourceExhausted},
      {500, "InternalError", absl::StatusCode::kUnavailable},
      {503, "ServiceUnavailable", absl::StatusCode::kUnavailable},
      {504, "Timeout", absl::StatusCode::kUnavailable},
      {302, "", absl::StatusCode::kUnknown},
  };
  for (const Case& c : cases) {
    absl::Status st = StatusFromApiResponse(c.code, StatusBody(c.code, c.reason, "m"), "get x");
    EXPECT_EQ(st.code(), c.want) << c.code << " " << c.reason << ": " << st;
  }
}

TEST(StatusFromApiResponse, NamesObjectAndQuotesServer) {
  absl::Status st = StatusFromApiResponse(
      409,
      StatusBody(409, "Conflict",
                 "Operation cannot be fulfilled on resourceslices.resource.k8s.io \"a\": the "
                 "object has been modified"),
      DescribeRequest("update", "/apis/resource.k8s.io/v1/resourceslices/node-a-0"));
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kAborted));
  EXPECT_THAT(st.message(), HasSubstr("update resourceslices node-a-0"));
  EXPECT_THAT(st.message(), HasSubstr("HTTP 409 Conflict"));
  EXPECT_THAT(st.message(), HasSubstr("the object has been modified"));
}

TEST(StatusFromApiResponse, GoneSaysResourceVersionTooOld) {
  absl::Status st = StatusFromApiResponse(
      410, StatusBody(410, "Expired", "too old resource version: 5 (9)"), "watch resourceslices");
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(st.message(), HasSubstr("resourceVersion too old"));
  EXPECT_THAT(st.message(), HasSubstr("too old resource version: 5 (9)"));
}

TEST(StatusFromApiResponse, HostileBodiesAreSanitized) {
  // A Status whose message carries control bytes and a terminal escape.
  std::string evil = "bad\n\x1b[31mred\x7f";
  absl::Status st = StatusFromApiResponse(500, StatusBody(500, "InternalError", evil), "get x");
  EXPECT_THAT(st.message(), Not(HasSubstr("\n")));
  EXPECT_THAT(st.message(), Not(HasSubstr("\x1b")));
  EXPECT_THAT(st.message(), HasSubstr("bad\\x0a\\x1b[31mred\\x7f"));
  // Not JSON, invalid UTF-8, huge: quoted escaped and bounded.
  std::string junk(100000, 'A');
  junk[3] = '\xff';
  st = StatusFromApiResponse(502, junk, "get x");
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(st.message(), HasSubstr("AAA\\xffAAA"));
  EXPECT_LT(st.message().size(), 400u);
  // A Status with a huge message is bounded too.
  st = StatusFromApiResponse(403, StatusBody(403, "Forbidden", std::string(100000, 'm')), "get x");
  EXPECT_LT(st.message().size(), 700u);
  // A JSON body that is not a Status, an empty body.
  EXPECT_THAT(StatusFromApiResponse(404, "{\"kind\":\"Pod\"}", "get x"),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(StatusFromApiResponse(404, "", "get x").message(), HasSubstr("HTTP 404"));
}

TEST(SanitizeServerText, InvalidUtf8AndC1) {
  EXPECT_EQ(SanitizeServerText("a\xc3\x28z"), "a\xef\xbf\xbd(z");
  EXPECT_EQ(SanitizeServerText("x\xc2\x85y"), "x\\u0085y");
  EXPECT_EQ(SanitizeServerText("h\xc3\xa9llo"), "h\xc3\xa9llo");
  EXPECT_EQ(SanitizeServerText("abcdef", 3), "abc...");
}

TEST(StatusFromApiStatusObject, WatchErrorEvent) {
  nlohmann::json status = {{"kind", "Status"},
                           {"code", 410},
                           {"reason", "Expired"},
                           {"message", "too old resource version: 1 (2)"}};
  EXPECT_THAT(StatusFromApiStatusObject(status, "watch x"),
              StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(StatusFromApiStatusObject(nlohmann::json::array(), "watch x"),
              StatusIs(absl::StatusCode::kUnknown));
  EXPECT_THAT(StatusFromApiStatusObject({{"code", "x"}}, "watch x"),
              StatusIs(absl::StatusCode::kUnknown));
}

TEST(ResourcePaths, BuildAndCheck) {
  EXPECT_THAT(ObjectPath("/apis/resource.k8s.io/v1", "resourceclaims", "default", "claim-1"),
              IsOkAndHolds(std::string(
                  "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/claim-1")));
  EXPECT_THAT(
      ObjectPath("/apis/resource.k8s.io/v1", "resourceclaims", "ns", "c", "status"),
      IsOkAndHolds(std::string("/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c/status")));
  EXPECT_THAT(CollectionPath("/apis/resource.k8s.io/v1", "resourceslices"),
              IsOkAndHolds(std::string("/apis/resource.k8s.io/v1/resourceslices")));
  for (const char* bad : {"a/b", "a?watch=1", "A", "", "..", "a%2f", "a b", "a\nb"}) {
    EXPECT_THAT(ObjectPath("/apis/resource.k8s.io/v1", "resourceslices", "", bad),
                StatusIs(absl::StatusCode::kInvalidArgument))
        << bad;
  }
  EXPECT_THAT(ObjectPath("/apis/resource.k8s.io/v1", "resourceslices", "", std::string(254, 'a')),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_OK(CheckResourcePath("/api/v1/namespaces/x/pods/y"));
  EXPECT_THAT(CheckResourcePath("/healthz"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(CheckResourcePath("/apis/resource.k8s.io/v1/resourceslices//x"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(DescribeRequest, NamesTheObject) {
  EXPECT_EQ(DescribeRequest("get", "/apis/resource.k8s.io/v1/namespaces/ns1/resourceclaims/c1"),
            "get resourceclaims ns1/c1");
  EXPECT_EQ(
      DescribeRequest("update", "/apis/resource.k8s.io/v1/namespaces/ns1/resourceclaims/c1/status"),
      "update resourceclaims ns1/c1 (status)");
  EXPECT_EQ(DescribeRequest("list", "/apis/resource.k8s.io/v1/resourceslices"),
            "list resourceslices");
  EXPECT_EQ(DescribeRequest("list", "/api/v1/namespaces/n/pods"), "list pods in namespace n");
  EXPECT_EQ(DescribeRequest("get", "/x?\n"), "get \"/x?\\x0a\"");
}

}  // namespace
}  // namespace fabric::kubeapi
