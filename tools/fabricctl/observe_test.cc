#include "tools/fabricctl/observe.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <mutex>
#include <set>

#include "agent/metrics/http_server.h"
#include "agent/podsapi/tls_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/fake_apiserver_process.h"
#include "test/testing/test_dirs.h"

namespace fabric::fabricctl {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

nlohmann::json Container(const std::string& name, const std::string& verdict, bool fallback = false,
                         bool granted = true) {
  return {{"name", name},
          {"verdict", verdict},
          {"attribution", verdict == "efa" ? "exclusive" : "none"},
          {"fabric_bytes", verdict == "efa" ? nlohmann::json(1288490188) : nlohmann::json(0)},
          {"other_bytes", 9542041},
          {"devices", nlohmann::json::array()},
          {"evidence", {"no fabric resources owned by any process of the Pod"}},
          {"fabric_packets", nullptr},
          {"fallback", fallback},
          {"reason", verdict == "unknown" ? nlohmann::json("the kubelet view is incomplete: x")
                                          : nlohmann::json(nullptr)},
          {"granted", granted},
          {"host_network", false},
          {"container_ids", nlohmann::json::array()},
          {"last_non_idle", verdict == "idle" ? nlohmann::json{{"verdict", "efa"},
                                                               {"at", "2026-12-02T00:40:00.000Z"}}
                                              : nlohmann::json(nullptr)}};
}

// Ordered like the agent's documents.
nlohmann::ordered_json Pod(const std::string& ns, const std::string& pod,
                           std::vector<nlohmann::json> containers) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& c : containers) list.push_back(nlohmann::ordered_json::parse(c.dump()));
  return {{"apiVersion", "fabric.gpustack.ai/v1"},
          {"kind", "PodTransport"},
          {"namespace", ns},
          {"pod", pod},
          {"window_seconds", 60.0},
          {"containers", list}};
}

TEST(ObserveExitCodes, OnePerVerdictAndExpectation) {
  EXPECT_EQ(ContainerExitCode(Container("e", "efa"), ""), 0);
  EXPECT_EQ(ContainerExitCode(Container("e", "efa"), "efa"), 0);
  EXPECT_EQ(ContainerExitCode(Container("e", "efa"), "rdma"), 23);
  EXPECT_EQ(ContainerExitCode(Container("e", "rdma"), "efa"), 23);
  EXPECT_EQ(ContainerExitCode(Container("e", "tcp", true), ""), 20);
  // tcp without a grant: a fallback only when a fabric is expected.
  EXPECT_EQ(ContainerExitCode(Container("e", "tcp", false, false), ""), 0);
  EXPECT_EQ(ContainerExitCode(Container("e", "tcp", false, false), "efa"), 20);
  EXPECT_EQ(ContainerExitCode(Container("e", "idle"), ""), 21);
  EXPECT_EQ(ContainerExitCode(Container("e", "unknown"), ""), 22);
  EXPECT_EQ(ContainerExitCode(Container("e", "something-new"), ""), 22);
  EXPECT_EQ(WorseObserveCode(0, 21), 21);
  EXPECT_EQ(WorseObserveCode(21, 22), 22);
  EXPECT_EQ(WorseObserveCode(23, 22), 23);
  EXPECT_EQ(WorseObserveCode(23, 20), 20);
  EXPECT_EQ(WorseObserveCode(20, 0), 20);
  // Distinct from the doctor's and every other command's codes.
  for (int c :
       {kExitObserveFallback, kExitObserveIdle, kExitObserveUnknown, kExitObserveMismatch}) {
    for (int other : {0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13}) EXPECT_NE(c, other);
  }
}

TEST(ObserveArgs, FlagsAndEnvironment) {
  auto c = ParseCommandLine({"observe", "--pod", "ml/member-0", "--agent", "10.0.0.5:9435",
                             "--window", "2m", "--expect", "efa", "-o", "json"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->kind, Command::Kind::kObserve);
  EXPECT_EQ(c->observe.pod_namespace, "ml");
  EXPECT_EQ(c->observe.pod_name, "member-0");
  EXPECT_EQ(c->observe.agent, "http://10.0.0.5:9435");
  EXPECT_EQ(c->observe.window, "2m");
  EXPECT_EQ(c->observe.expect, "efa");
  EXPECT_EQ(c->observe.format, OutputFormat::kJson);
  for (std::vector<std::string> bad : {std::vector<std::string>{"observe", "--pod", "member-0"},
                                       {"observe", "--pod", "a/b/c"},
                                       {"observe", "--pod", "/b"},
                                       {"observe", "--expect", "tcp"},
                                       {"observe", "--window", "60s&x=1"},
                                       {"observe", "--window", ""},
                                       {"observe", "--bogus"}}) {
    EXPECT_FALSE(ParseCommandLine(bad).ok()) << bad[1] << " " << (bad.size() > 2 ? bad[2] : "");
  }

  static std::map<std::string, std::string> env;
  auto getenv = [](const char* n) -> const char* {
    auto it = env.find(n);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  // Inside a Pod: the downward API gives the node's IP and the Pod's names.
  env = {{"HOST_IP", "10.1.2.3"}, {"POD_NAMESPACE", "ml"}, {"POD_NAME", "member-1"}};
  ObserveOptions o = ParseCommandLine({"observe"})->observe;
  ApplyObserveEnvironment(o, getenv);
  EXPECT_EQ(o.agent, "http://10.1.2.3:9435");
  EXPECT_EQ(o.pod_namespace, "ml");
  EXPECT_EQ(o.pod_name, "member-1");
  env = {{"HOST_IP", "fd00::7"}};
  o = ParseCommandLine({"observe"})->observe;
  ApplyObserveEnvironment(o, getenv);
  EXPECT_EQ(o.agent, "http://[fd00::7]:9435");
  EXPECT_TRUE(o.pod_name.empty()) << "POD_NAME without POD_NAMESPACE is not a Pod";
  // Flags win over the environment.
  env = {{"HOST_IP", "10.1.2.3"}, {"POD_NAMESPACE", "ml"}, {"POD_NAME", "member-1"}};
  o = ParseCommandLine({"observe", "--agent", "127.0.0.1:1", "--pod", "x/y"})->observe;
  ApplyObserveEnvironment(o, getenv);
  EXPECT_EQ(o.agent, "http://127.0.0.1:1");
  EXPECT_EQ(o.pod_name, "y");
  // With the agent's CA in the Pod: TLS to the node's agent.
  env = {{"HOST_IP", "10.1.2.3"},
         {"FABRIC_AGENT_CA_FILE", "/etc/fabric-agent-ca/ca.crt"},
         {"FABRIC_AGENT_SERVER_NAME", "fabric-agent.fabric-system"}};
  o = ParseCommandLine({"observe"})->observe;
  ApplyObserveEnvironment(o, getenv);
  EXPECT_EQ(o.agent, "https://10.1.2.3:9437");
  EXPECT_EQ(o.ca_file, "/etc/fabric-agent-ca/ca.crt");
  EXPECT_EQ(o.server_name, "fabric-agent.fabric-system");
  o = ParseCommandLine({"observe", "--ca-file", "a.crt", "--server-name", "n", "--token-file", "t",
                        "--insecure-skip-tls-verify"})
          ->observe;
  EXPECT_EQ(o.ca_file, "a.crt");
  EXPECT_EQ(o.server_name, "n");
  EXPECT_EQ(o.token_file, "t");
  EXPECT_TRUE(o.insecure);
  // A node shell: the local agent.
  env.clear();
  o = ParseCommandLine({"observe"})->observe;
  ApplyObserveEnvironment(o, getenv);
  EXPECT_EQ(o.agent, "http://127.0.0.1:9435");
}

TEST(ObserveArgs, UsageDocumentsTheExitCodes) {
  const std::string u = UsageText();
  for (const char* s : {"fabricctl observe", "20 observe: tcp", "21 observe: idle",
                        "22 observe: unknown", "23 observe: a fabric other than --expect"}) {
    EXPECT_THAT(u, HasSubstr(s));
  }
}

// The agent's TLS listener (agent/podsapi) whose handler accepts one token:
// fabricctl sends the Pod's ServiceAccount token over https, checks the
// agent's certificate, and says what a 401 means.
TEST(ObserveTls, SendsTheServiceAccountTokenAndChecksTheCertificate) {
  if (!fabric::testing::FakeApiServerAvailable()) GTEST_SKIP() << "openssl is missing";
  fabric::testing::TempDir dir("obs");
  const std::string d = dir.path();
  ASSERT_TRUE(fabric::testing::MakeCertificate(d, "agent"));
  ASSERT_TRUE(fabric::testing::MakeCertificate(d, "other"));
  std::ofstream(d + "/sa-token") << "t0k\n";
  podsapi::TlsServerOptions to;
  to.address = "127.0.0.1:0";
  to.cert_file = d + "/agent.crt";
  to.key_file = d + "/agent.key";
  podsapi::TlsServer server(to, [](const podsapi::TlsRequest& r) {
    if (r.bearer_token != "t0k") return HttpAnswer{401, "application/json", "{\"error\":\"no\"}"};
    return HttpAnswer{200, "application/json",
                      Pod("ml", "m0", {Container("engine", "rdma")}).dump()};
  });
  ASSERT_TRUE(server.Start().ok());
  ObserveOptions o;
  o.agent = "https://127.0.0.1:" + std::to_string(server.port());
  o.pod_namespace = "ml";
  o.pod_name = "m0";
  o.ca_file = d + "/agent.crt";
  o.default_token_file = d + "/sa-token";
  std::string out, err;
  EXPECT_EQ(RunObserve(o, &out, &err), kExitOk) << err;
  EXPECT_THAT(out, HasSubstr("rdma"));
  // A projected token for the agent's audience comes before the Pod's
  // ServiceAccount token.
  std::ofstream(d + "/projected") << "t0k\n";
  std::ofstream(d + "/api-audience") << "for-the-api-server\n";
  o.projected_token_file = d + "/projected";
  o.default_token_file = d + "/api-audience";
  out.clear();
  EXPECT_EQ(RunObserve(o, &out, &err), kExitOk) << err;
  o.projected_token_file = d + "/no-projected";
  o.default_token_file = d + "/none";  // not in a Pod: no token
  out.clear();
  err.clear();
  EXPECT_EQ(RunObserve(o, &out, &err), kExitError);
  EXPECT_THAT(err, HasSubstr("HTTP 401"));
  EXPECT_THAT(err, HasSubstr("the token must be valid"));
  o.token_file = d + "/sa-token";
  err.clear();
  EXPECT_EQ(RunObserve(o, &out, &err), kExitOk) << err;
  o.ca_file = d + "/other.crt";  // not the agent's CA
  err.clear();
  EXPECT_EQ(RunObserve(o, &out, &err), kExitError);
  EXPECT_THAT(err, HasSubstr("does not verify"));
  EXPECT_THAT(err, HasSubstr("other.crt"));
}

// The agent's own HTTP server with canned /v1/pods answers.
class FakeAgent : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpHandlers h;
    h.metrics = [] { return std::string(); };
    h.not_ready_reason = [] { return std::string(); };
    h.node_json = [] { return std::string("{}"); };
    h.pods = [this](const std::string& path, const std::string& query) {
      std::lock_guard<std::mutex> lock(mu_);
      asked_.insert(path + "?" + query);
      if (query == "window=5s") {
        return HttpAnswer{400, "application/json",
                          "{\"error\":\"window '5s': out of range 15s..10m\"}"};
      }
      if (no_sample_) return HttpAnswer{503, "application/json", "{\"error\":\"no sample yet\"}"};
      auto it = pods_.find(path);
      if (it == pods_.end()) {
        return HttpAnswer{404, "application/json", "{\"error\":\"no Pod " + path + "\"}"};
      }
      return HttpAnswer{200, "application/json", it->second.dump()};
    };
    server_ = std::make_unique<HttpServer>(h, absl::ZeroDuration());
    ASSERT_TRUE(server_->Start("127.0.0.1:0").ok());
    base_.agent = "http://127.0.0.1:" + std::to_string(server_->port());
    base_.agent_given = true;

    nlohmann::ordered_json efa = Pod("ml", "member-0", {Container("engine", "efa")});
    nlohmann::ordered_json fell = Pod("ml", "member-1", {Container("engine", "tcp", true)});
    nlohmann::ordered_json idle = Pod("ml", "member-2", {Container("engine", "idle")});
    pods_["/v1/pods/ml/member-0"] = efa;
    pods_["/v1/pods/ml/member-1"] = fell;
    pods_["/v1/pods/ml/member-2"] = idle;
    pods_["/v1/pods"] = {{"apiVersion", "fabric.gpustack.ai/v1"},
                         {"kind", "PodTransportList"},
                         {"items", {efa, fell, idle}}};
  }
  void TearDown() override { server_->Stop(); }

  ObserveOptions Opts(const std::string& pod = "") {
    ObserveOptions o = base_;
    if (!pod.empty()) {
      o.pod_namespace = pod.substr(0, pod.find('/'));
      o.pod_name = pod.substr(pod.find('/') + 1);
    }
    return o;
  }

  std::unique_ptr<HttpServer> server_;
  ObserveOptions base_;
  std::mutex mu_;
  std::map<std::string, nlohmann::ordered_json> pods_;
  std::set<std::string> asked_;
  bool no_sample_ = false;
};

TEST_F(FakeAgent, OnePodPerVerdict) {
  std::string out, err;
  EXPECT_EQ(RunObserve(Opts("ml/member-0"), &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("ml/member-0"));
  EXPECT_THAT(out, HasSubstr("efa"));
  EXPECT_THAT(out, HasSubstr("1.2 GiB"));
  ObserveOptions expect_rdma = Opts("ml/member-0");
  expect_rdma.expect = "rdma";
  out.clear();
  EXPECT_EQ(RunObserve(expect_rdma, &out, &err), 23);
  out.clear();
  EXPECT_EQ(RunObserve(Opts("ml/member-1"), &out, &err), 20);
  EXPECT_THAT(out, HasSubstr("tcp (fallback)"));
  out.clear();
  EXPECT_EQ(RunObserve(Opts("ml/member-2"), &out, &err), 21);
  EXPECT_THAT(out, HasSubstr("last efa at 2026-12-02T00:40:00.000Z"));
}

TEST_F(FakeAgent, EveryPodGivesTheWorstCode) {
  std::string out, err;
  EXPECT_EQ(RunObserve(Opts(), &out, &err), 20);
  // One line per container, after the header.
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 4) << out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pods_["/v1/pods"]["items"] = {Pod("ml", "a", {Container("engine", "efa")}),
                                  Pod("ml", "b", {Container("engine", "idle")})};
  }
  out.clear();
  EXPECT_EQ(RunObserve(Opts(), &out, &err), 21);
  {
    std::lock_guard<std::mutex> lock(mu_);
    pods_["/v1/pods"]["items"] = nlohmann::json::array();
  }
  out.clear();
  EXPECT_EQ(RunObserve(Opts(), &out, &err), 0);
  EXPECT_THAT(out, HasSubstr("no Pod on this node"));
}

TEST_F(FakeAgent, JsonIsTheAgentsDocumentAndTheWindowIsPassedOn) {
  ObserveOptions o = Opts("ml/member-0");
  o.format = OutputFormat::kJson;
  o.window = "2m";
  std::string out, err;
  EXPECT_EQ(RunObserve(o, &out, &err), 0);
  auto j = nlohmann::ordered_json::parse(out);
  std::vector<std::string> keys;
  for (auto& [k, v] : j.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"apiVersion", "kind", "namespace", "pod",
                                            "window_seconds", "containers"}));
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_TRUE(asked_.count("/v1/pods/ml/member-0?window=2m"));
}

TEST_F(FakeAgent, ErrorsAndTheirCodes) {
  std::string out, err;
  EXPECT_EQ(RunObserve(Opts("ml/nope"), &out, &err), 22);
  EXPECT_THAT(err, HasSubstr("no Pod /v1/pods/ml/nope"));
  ObserveOptions bad = Opts("ml/member-0");
  bad.window = "5s";
  err.clear();
  EXPECT_EQ(RunObserve(bad, &out, &err), 2);
  EXPECT_THAT(err, HasSubstr("window '5s': out of range"));
  {
    std::lock_guard<std::mutex> lock(mu_);
    no_sample_ = true;
  }
  err.clear();
  EXPECT_EQ(RunObserve(Opts("ml/member-0"), &out, &err), 22);
  EXPECT_THAT(err, HasSubstr("no sample yet"));
  // An agent without --observe: the server's plain 404.
  server_->Stop();
  HttpHandlers plain;
  plain.metrics = [] { return std::string(); };
  plain.not_ready_reason = [] { return std::string(); };
  plain.node_json = [] { return std::string("{}"); };
  HttpServer without(plain, absl::ZeroDuration());
  ASSERT_TRUE(without.Start("127.0.0.1:0").ok());
  ObserveOptions o = Opts("ml/member-0");
  o.agent = "http://127.0.0.1:" + std::to_string(without.port());
  err.clear();
  EXPECT_EQ(RunObserve(o, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr("without --observe"));
  without.Stop();
  // Nobody listening.
  err.clear();
  EXPECT_EQ(RunObserve(o, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr("cannot reach the agent"));
  EXPECT_THAT(out, Not(HasSubstr("efa")));
}

}  // namespace
}  // namespace fabric::fabricctl
