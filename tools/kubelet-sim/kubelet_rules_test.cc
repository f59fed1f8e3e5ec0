#include "tools/kubelet-sim/kubelet_rules.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fabric::sim {
namespace {

TEST(IsExtendedResourceNameTest, AcceptsDomainQualifiedNames) {
  for (const std::string& name :
       std::vector<std::string>{"example.com/rdma", "vpc.amazonaws.com/efa", "a.b/My_Name.1",
                                "rdma/hca_shared_devices_a", "x/" + std::string(63, 'n')}) {
    EXPECT_TRUE(IsExtendedResourceName(name)) << name;
  }
}

TEST(IsExtendedResourceNameTest, RejectsWhatTheKubeletRejects) {
  for (const std::string& name : std::vector<std::string>{
           "rdma",                       // no '/': a native resource name
           "kubernetes.io/rdma",         // default namespace
           "foo.kubernetes.io/rdma",     // substring check, not prefix
           "requests.example.com/rdma",  // quota prefix
           "Example.com/rdma",           // prefix must be a lowercase DNS subdomain
           "example..com/rdma",          // empty DNS label
           "-example.com/rdma",          // label must start alphanumeric
           "example.com/",               // empty name part
           "example.com/-rdma",          // name must start alphanumeric
           "example.com/rdma_",          // ... and end alphanumeric
           "example.com/rd ma",          // invalid character
           "a/b/c",                      // more than one '/'
           "x/" + std::string(64, 'n'),  // name part longer than 63
           "/rdma",                      // empty prefix
       }) {
    EXPECT_FALSE(IsExtendedResourceName(name)) << name;
  }
}

TEST(IsExtendedResourceNameTest, PrefixLengthCountsTheRequestsPrefix) {
  // "requests." (9 chars) + prefix must stay within 253 characters.
  std::string prefix_244 = std::string(60, 'a') + "." + std::string(60, 'b') + "." +
                           std::string(60, 'c') + "." + std::string(61, 'd');
  ASSERT_EQ(prefix_244.size(), 244u);
  EXPECT_TRUE(IsExtendedResourceName(prefix_244 + "/x"));
  EXPECT_FALSE(IsExtendedResourceName(prefix_244 + "e/x"));
}

TEST(GoFormatTest, QuoteMatchesStrconvQuote) {
  EXPECT_EQ(GoQuote("v1alpha"), "\"v1alpha\"");
  EXPECT_EQ(GoQuote("a\"b\\c\n\x01"), "\"a\\\"b\\\\c\\n\\x01\"");
  EXPECT_EQ(GoQuoteList({"v1beta1"}), "[\"v1beta1\"]");
  EXPECT_EQ(GoQuoteList({"a", "b"}), "[\"a\" \"b\"]");
  EXPECT_EQ(GoList({"v1alpha1", "v1beta1"}), "[v1alpha1 v1beta1]");
  EXPECT_EQ(GoList({}), "[]");
}

TEST(GoPathTest, JoinCleansLikeFilepathJoin) {
  EXPECT_EQ(GoJoinPath("/var/lib/kubelet/device-plugins/", "efa.sock"),
            "/var/lib/kubelet/device-plugins/efa.sock");
  EXPECT_EQ(GoJoinPath("/d/", "/tmp/efa.sock"), "/d/tmp/efa.sock");
  EXPECT_EQ(GoJoinPath("/d/", "../x.sock"), "/x.sock");
  EXPECT_EQ(GoJoinPath("/d/", "a/./b//c.sock"), "/d/a/b/c.sock");
  EXPECT_EQ(GoJoinPath("/d/", ""), "/d");
  EXPECT_EQ(GoCleanPath("/../.."), "/");
  EXPECT_EQ(GoCleanPath("a/../../b"), "../b");
  EXPECT_EQ(GoCleanPath(""), ".");
}

TEST(GoGrpcErrorTest, FormatsLikeGrpcGo) {
  EXPECT_EQ(GoGrpcError(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "nope")),
            "rpc error: code = Unimplemented desc = nope");
  EXPECT_EQ(GoGrpcCodeName(grpc::StatusCode::CANCELLED), "Canceled");
}

}  // namespace
}  // namespace fabric::sim
