#include "agent/kubeapi/kube_config.h"

#include <unistd.h>

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/status_matchers.h"
#include "test/testing/test_dirs.h"

namespace fabric::kubeapi {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

void Write(const std::string& path, const std::string& content) {
  std::ofstream(path, std::ios::trunc) << content;
}

class KubeConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    paths_.token_file = dir_.path() + "/token";
    paths_.ca_file = dir_.path() + "/ca.crt";
    Write(paths_.token_file, "tok-1\n");
    Write(paths_.ca_file, "-----BEGIN CERTIFICATE-----\n");
    paths_.env = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"KUBERNETES_SERVICE_PORT", "443"}};
  }
  testing::TempDir dir_{"kcfg"};
  InClusterPaths paths_;
};

TEST_F(KubeConfigTest, InCluster) {
  auto c = InClusterConfig(paths_);
  ASSERT_OK(c);
  EXPECT_EQ(c->server, "https://10.96.0.1:443");
  EXPECT_EQ(c->token_file, paths_.token_file);
  EXPECT_EQ(c->ca_file, paths_.ca_file);
  EXPECT_FALSE(c->insecure_skip_tls_verify);
}

TEST_F(KubeConfigTest, InClusterIpv6IsBracketed) {
  paths_.env["KUBERNETES_SERVICE_HOST"] = "fd00::1";
  auto c = InClusterConfig(paths_);
  ASSERT_OK(c);
  EXPECT_EQ(c->server, "https://[fd00::1]:443");
}

TEST_F(KubeConfigTest, InClusterErrorsNameTheCause) {
  InClusterPaths p = paths_;
  p.env.erase("KUBERNETES_SERVICE_PORT");
  EXPECT_THAT(InClusterConfig(p).status().message(), HasSubstr("KUBERNETES_SERVICE_PORT"));
  p = paths_;
  p.env["KUBERNETES_SERVICE_HOST"] = "evil/host@x";
  EXPECT_THAT(InClusterConfig(p), StatusIs(absl::StatusCode::kInvalidArgument));
  p = paths_;
  p.env["KUBERNETES_SERVICE_PORT"] = "99999";
  EXPECT_THAT(InClusterConfig(p).status().message(), HasSubstr("KUBERNETES_SERVICE_PORT"));
  for (const char* bad_port : {"443 ", "+443", " 443", "44a", "0", "65536"}) {
    p = paths_;
    p.env["KUBERNETES_SERVICE_PORT"] = bad_port;
    EXPECT_THAT(InClusterConfig(p), StatusIs(absl::StatusCode::kInvalidArgument)) << bad_port;
  }
  p = paths_;
  p.token_file = dir_.path() + "/missing";
  EXPECT_THAT(InClusterConfig(p).status().message(), HasSubstr(p.token_file));
  p = paths_;
  p.ca_file = dir_.path() + "/missing-ca";
  EXPECT_THAT(InClusterConfig(p).status().message(), HasSubstr("missing-ca"));
}

TEST_F(KubeConfigTest, TokenFileChecks) {
  Write(paths_.token_file, "  \n");
  EXPECT_THAT(ReadTokenFile(paths_.token_file).status().message(), HasSubstr("empty"));
  Write(paths_.token_file, "abc\r\nInjected: header");
  auto st = ReadTokenFile(paths_.token_file).status();
  EXPECT_THAT(st, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(st.message(), Not(HasSubstr("Injected")));  // never quotes a credential
  Write(paths_.token_file, std::string(20000, 'a'));
  EXPECT_THAT(ReadTokenFile(paths_.token_file), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(KubeConfigTest, Explicit) {
  auto c = ExplicitConfig("https://api.example:6443/", paths_.token_file, paths_.ca_file, false);
  ASSERT_OK(c);
  EXPECT_EQ(c->server, "https://api.example:6443");
  ASSERT_OK(ExplicitConfig("https://[::1]:6443", "", "", false));
  ASSERT_OK(ExplicitConfig("https://api.example", "", "", false));
  EXPECT_THAT(ExplicitConfig("http://api.example", "", "", false),
              StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_OK(ExplicitConfig("http://127.0.0.1:8080", "", "", true));
  EXPECT_THAT(ExplicitConfig("https://a:b@api.example", "", "", false),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ExplicitConfig("https://api.example/path", "", "", false),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ExplicitConfig("https://api.example:0", "", "", false),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ExplicitConfig("https://api.example", dir_.path() + "/nope", "", false), Not(IsOk()));
}

TEST_F(KubeConfigTest, TokenRereadOnRotation) {
  TokenFile tf(paths_.token_file, absl::Hours(1));
  EXPECT_THAT(tf.Token(), IsOkAndHolds(std::string("tok-1")));
  // The kubelet's projected volume swaps the file: new inode.
  Write(paths_.token_file + ".new", "tok-2-longer\n");
  ASSERT_EQ(rename((paths_.token_file + ".new").c_str(), paths_.token_file.c_str()), 0);
  EXPECT_THAT(tf.Token(), IsOkAndHolds(std::string("tok-2-longer")));
  // A rotation that leaves the file missing for a moment keeps the last token.
  ASSERT_EQ(unlink(paths_.token_file.c_str()), 0);
  EXPECT_THAT(tf.Token(), IsOkAndHolds(std::string("tok-2-longer")));
  TokenFile fresh(paths_.token_file);
  EXPECT_THAT(fresh.Token(), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(KubeConfigTest, TokenRereadAfterMaxAgeEvenIfStatLooksSame) {
  TokenFile tf(paths_.token_file, absl::ZeroDuration());
  EXPECT_THAT(tf.Token(), IsOkAndHolds(std::string("tok-1")));
  Write(paths_.token_file, "tok-3\n");  // same size class, maybe same mtime tick
  EXPECT_THAT(tf.Token(), IsOkAndHolds(std::string("tok-3")));
}

}  // namespace
}  // namespace fabric::kubeapi
