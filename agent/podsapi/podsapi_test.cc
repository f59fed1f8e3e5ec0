// /v1/pods over TLS against tools/fake-apiserver's TokenReview and
// SubjectAccessReview: 401/403/200 as JSON, the caches (counted in the fake's
// request log), the API server failing, certificate checks on the client,
// and a certificate replaced on disk.
#include <signal.h>

#include <atomic>
#include <fstream>

#include "absl/strings/match.h"
#include "agent/http/get.h"
#include "agent/kubeapi/http_kube_client.h"
#include "agent/podsapi/pods_route.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/fake_apiserver_process.h"
#include "test/testing/test_dirs.h"

namespace fabric::podsapi {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

class PodsApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);  // as the agent does
    if (!testing::FakeApiServerAvailable()) GTEST_SKIP() << "python3 or openssl is missing";
    d_ = dir_.path();
    ASSERT_TRUE(testing::MakeCertificate(d_, "server"));
    ASSERT_TRUE(testing::MakeCertificate(d_, "agent"));
    ASSERT_TRUE(testing::MakeCertificate(d_, "other"));
    std::ofstream(d_ + "/tokens.json") << json{
        {"tokens",
         {{"agent",
           {{"user", "system:serviceaccount:fabric:agent"},
            {"role", "agent"},
            {"nodeName", "node-a"}}},
          // Pods' projected tokens for the agent's audience.
          {"reader",
           {{"user", "system:serviceaccount:ml:member"},
            {"role", "none"},
            {"audiences", {kDefaultPodsTokenAudience}},
            {"allow", {{{"resource", "pods"}, {"verbs", {"get"}}, {"namespaces", {"ml"}}}}}}},
          {"lister",
           {{"user", "system:serviceaccount:ops:operator"},
            {"role", "none"},
            {"audiences", {kDefaultPodsTokenAudience}},
            {"allow", {{{"resource", "pods"}, {"verbs", {"list", "get"}}}}}}},
          {"nobody",
           {{"user", "system:serviceaccount:ml:other"},
            {"role", "none"},
            {"audiences", {kDefaultPodsTokenAudience}}}},
          // A Pod's default token: the API server's audience only.
          {"default-sa",
           {{"user", "system:serviceaccount:ml:member"},
            {"role", "none"},
            {"allow", {{{"resource", "pods"}, {"verbs", {"get"}}, {"namespaces", {"ml"}}}}}}},
          // An authenticator that ignores the review's audiences.
          {"deaf",
           {{"user", "system:serviceaccount:ml:member"},
            {"role", "none"},
            {"statusAudiences", {"https://kubernetes.default.svc"}},
            {"allow", {{{"resource", "pods"}, {"verbs", {"get"}}, {"namespaces", {"ml"}}}}}}}}}};
    api_ = std::make_unique<testing::FakeApiServer>(d_, std::vector<std::string>{});
    ASSERT_TRUE(api_->Start());
    std::ofstream(d_ + "/agent-token") << "agent";
    kubeapi::KubeConfig c;
    c.server = api_->url();
    c.ca_file = d_ + "/server.crt";
    c.token_file = d_ + "/agent-token";
    auto client = kubeapi::HttpKubeClient::Create(c);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
    AuthorizerOptions ao;
    ao.now = [this] { return absl::FromUnixSeconds(now_s_.load()); };
    authorizer_ = std::make_unique<PodsAuthorizer>(client_.get(), ao);
    TlsServerOptions to;
    to.address = "127.0.0.1:0";
    to.cert_file = d_ + "/agent.crt";
    to.key_file = d_ + "/agent.key";
    to.reload_check = absl::ZeroDuration();
    server_ = std::make_unique<TlsServer>(to, [this](const TlsRequest& r) {
      return ServeAuthorized(r, *authorizer_, [](const std::string& path, const std::string& q) {
        return HttpAnswer{200, "application/json", "{\"path\":\"" + path + "?" + q + "\"}\n"};
      });
    });
    ASSERT_TRUE(server_->Start().ok());
  }

  absl::StatusOr<HttpResponse> Get(const std::string& path, const std::string& token,
                                   const std::string& ca = "agent") {
    HttpsOptions o;
    o.ca_file = d_ + "/" + ca + ".crt";
    o.bearer_token = token;
    return HttpsGet("https://127.0.0.1:" + std::to_string(server_->port()), path, o);
  }
  int Reviews(const std::string& kind) {
    int n = 0;
    for (const json& r : api_->Log()) n += absl::StrContains(r["path"].get<std::string>(), kind);
    return n;
  }
  static std::string Error(const HttpResponse& r) {
    return json::parse(r.body, nullptr, false).value("error", "");
  }

  testing::TempDir dir_{"papi"};
  std::string d_;
  // Read by the server's workers: atomic (TSan does not see the socket's ordering).
  std::atomic<int64_t> now_s_{1000};
  std::unique_ptr<testing::FakeApiServer> api_;
  std::unique_ptr<kubeapi::KubeClient> client_;
  std::unique_ptr<PodsAuthorizer> authorizer_;
  std::unique_ptr<TlsServer> server_;
};

TEST_F(PodsApiTest, TokenAndAccessAreReviewedAndAnsweredAsJson) {
  auto none = Get("/v1/pods/ml/m0", "");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->status, 401);
  EXPECT_THAT(Error(*none), HasSubstr("no bearer token"));
  auto bad = Get("/v1/pods/ml/m0", "stolen-or-expired");
  EXPECT_EQ(bad->status, 401);
  EXPECT_THAT(Error(*bad), HasSubstr("the token is not valid"));

  auto own = Get("/v1/pods/ml/m0?window=2m", "reader");
  EXPECT_EQ(own->status, 200);
  EXPECT_EQ(own->body, "{\"path\":\"/v1/pods/ml/m0?window=2m\"}\n");
  auto other_ns = Get("/v1/pods/kube-system/x", "reader");
  EXPECT_EQ(other_ns->status, 403);
  EXPECT_THAT(Error(*other_ns),
              HasSubstr("user \"system:serviceaccount:ml:member\" may not get pods in namespace "
                        "\"kube-system\""));
  EXPECT_EQ(Get("/v1/pods", "reader")->status, 403);  // list needs list at the cluster scope
  EXPECT_EQ(Get("/v1/pods", "lister")->status, 200);
  EXPECT_EQ(Get("/v1/pods/ml/m0", "nobody")->status, 403);
  EXPECT_EQ(Get("/metrics", "lister")->status, 404);  // this port serves /v1/pods only
}

TEST_F(PodsApiTest, DecisionsAreCachedWithinTheirTtls) {
  ASSERT_EQ(Get("/v1/pods/ml/m0", "reader")->status, 200);
  ASSERT_EQ(Get("/v1/pods/ml/m0", "stolen")->status, 401);
  EXPECT_EQ(Reviews("tokenreviews"), 2);
  EXPECT_EQ(Reviews("subjectaccessreviews"), 1);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(Get("/v1/pods/ml/m0", "reader")->status, 200);
    EXPECT_EQ(Get("/v1/pods/ml/m0", "stolen")->status, 401);
  }
  EXPECT_EQ(Reviews("tokenreviews"), 2);
  EXPECT_EQ(Reviews("subjectaccessreviews"), 1);
  now_s_ += 31;  // the unauthenticated answer expired, the rest did not
  EXPECT_EQ(Get("/v1/pods/ml/m0", "reader")->status, 200);
  EXPECT_EQ(Get("/v1/pods/ml/m0", "stolen")->status, 401);
  EXPECT_EQ(Reviews("tokenreviews"), 3);
  now_s_ += 5 * 60;
  EXPECT_EQ(Get("/v1/pods/ml/m0", "reader")->status, 200);
  EXPECT_EQ(Reviews("tokenreviews"), 4);
  EXPECT_EQ(Reviews("subjectaccessreviews"), 2);
}

TEST_F(PodsApiTest, ACacheIsBounded) {
  AuthorizerOptions ao;
  ao.max_entries = 3;
  PodsAuthorizer small(client_.get(), ao);
  for (const char* t : {"a", "b", "c", "d", "e", "reader"}) small.Check(t, {"get", "ml", "m0"});
  EXPECT_EQ(small.cached_tokens(), 3u);
}

TEST_F(PodsApiTest, AnApiServerThatFailsIs503AndNotCached) {
  api_->Control("POST", "/fake/fail?path=tokenreviews&code=503&count=1");
  auto r = Get("/v1/pods/ml/m0", "reader");
  EXPECT_EQ(r->status, 503);
  EXPECT_THAT(Error(*r), HasSubstr("cannot check the token"));
  EXPECT_EQ(Get("/v1/pods/ml/m0", "reader")->status, 200);
}

// Issue 32 item 3: a 503 says what failed, never where the agent's secrets
// are: not the API server's URL, not the CA file, not the agent's
// ServiceAccount (the API server's 403 names it). The log has the details.
TEST_F(PodsApiTest, FailureBodiesNameNoUrlCaFileOrServiceAccount) {
  auto body_of = [&](kubeapi::KubeClient* client) {
    PodsAuthorizer authorizer(client, AuthorizerOptions{});
    const AuthDecision d = authorizer.Check("reader", {"get", "ml", "m0"});
    EXPECT_EQ(d.status, 503) << d.error;
    return d.error;
  };
  auto client_with = [&](const std::string& token, const std::string& ca) {
    std::ofstream(d_ + "/t-" + token) << token;
    kubeapi::KubeConfig c;
    c.server = api_->url();
    c.ca_file = d_ + "/" + ca;
    c.token_file = d_ + "/t-" + token;
    c.request_timeout = absl::Seconds(5);
    return *kubeapi::HttpKubeClient::Create(c);
  };
  const std::string hidden[] = {api_->url(), "127.0.0.1:" + std::to_string(api_->port()),
                                d_,          "server.crt",
                                "other.crt", "system:serviceaccount"};
  // The agent's own token may not create TokenReviews: the API server's 403
  // names the agent's ServiceAccount.
  const std::string forbidden = body_of(client_with("default-sa", "server.crt").get());
  EXPECT_THAT(forbidden, HasSubstr("cannot check the token"));
  // The API server's certificate does not verify against the CA file.
  const std::string wrong_ca = body_of(client_with("agent", "other.crt").get());
  // The API server is gone.
  auto gone_client = client_with("agent", "server.crt");
  api_->Kill(SIGKILL);
  const std::string gone = body_of(gone_client.get());
  for (const std::string& body : {forbidden, wrong_ca, gone}) {
    for (const std::string& h : hidden) EXPECT_THAT(body, Not(HasSubstr(h))) << body;
  }
}

// Issue 32 item 4: the TokenReview asks for the agent's own audience, a
// review whose status.audiences lacks it is refused, and a token for the API
// server's audience passes only when that is explicitly allowed.
TEST_F(PodsApiTest, TokensAreReviewedForTheAgentsOwnAudience) {
  ASSERT_EQ(Get("/v1/pods/ml/m0", "reader")->status, 200);
  std::vector<json> reviews;
  for (const json& r : api_->Log()) {
    if (absl::StrContains(r["path"].get<std::string>(), "tokenreviews")) reviews.push_back(r);
  }
  ASSERT_EQ(reviews.size(), 1u);
  EXPECT_EQ(reviews[0]["audiences"], json::array({kDefaultPodsTokenAudience}));

  auto deaf = Get("/v1/pods/ml/m0", "deaf");
  EXPECT_EQ(deaf->status, 401);  // authenticated, but not for this audience
  auto api_token = Get("/v1/pods/ml/m0", "default-sa");
  EXPECT_EQ(api_token->status, 401);
  EXPECT_THAT(Error(*api_token), HasSubstr(kDefaultPodsTokenAudience));

  // The opt-in: a second review for the API server's own audience.
  AuthorizerOptions ao;
  ao.accept_apiserver_tokens = true;
  PodsAuthorizer lenient(client_.get(), ao);
  EXPECT_EQ(lenient.Check("default-sa", {"get", "ml", "m0"}).status, 200);
  EXPECT_EQ(lenient.token_reviews(), 2u);
  EXPECT_EQ(lenient.Check("reader", {"get", "ml", "m0"}).status, 200);
  EXPECT_EQ(lenient.token_reviews(), 3u);  // the agent's audience first, and enough
  EXPECT_EQ(lenient.Check("stolen", {"get", "ml", "m0"}).status, 401);
}

TEST_F(PodsApiTest, TheClientChecksTheCertificateAndItsName) {
  auto wrong_ca = Get("/v1/pods/ml/m0", "reader", "other");
  EXPECT_FALSE(wrong_ca.ok());
  EXPECT_EQ(wrong_ca.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(wrong_ca.status().message(), HasSubstr("does not verify as '127.0.0.1'"));
  HttpsOptions o;
  o.ca_file = d_ + "/agent.crt";
  o.server_name = "fabric-agent.example";
  auto wrong_name = HttpsGet("https://127.0.0.1:" + std::to_string(server_->port()), "/v1/pods", o);
  EXPECT_FALSE(wrong_name.ok());
  o.server_name = "localhost";  // in the certificate's names
  o.bearer_token = "lister";
  auto right = HttpsGet("https://127.0.0.1:" + std::to_string(server_->port()), "/v1/pods", o);
  ASSERT_TRUE(right.ok()) << right.status();
  EXPECT_EQ(right->status, 200);
}

TEST_F(PodsApiTest, AReplacedCertificateIsServedAndABadOneIgnored) {
  std::ofstream(d_ + "/agent.key") << "not a key";
  EXPECT_EQ(Get("/v1/pods/ml/m0", "reader")->status, 200);  // the old pair keeps serving
  ASSERT_TRUE(testing::MakeCertificate(d_, "agent"));       // a new pair, same files
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(Get("/v1/pods/ml/m0", "reader")->status, 200);
  EXPECT_GE(server_->reloads(), 1u);
  EXPECT_FALSE(Get("/v1/pods/ml/m0", "reader", "other").ok());
}

}  // namespace
}  // namespace fabric::podsapi
