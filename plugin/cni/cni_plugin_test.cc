#include "plugin/cni/cni_plugin.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace fabric::cni {
namespace {

using ::testing::HasSubstr;

class FakeAgentClient : public AgentClient {
 public:
  absl::StatusOr<agentpb::CniResponse> Add(const agentpb::CniRequest& req) override {
    *last = req;
    return Result();
  }
  absl::StatusOr<agentpb::CniResponse> Del(const agentpb::CniRequest& req) override {
    *last = req;
    return Result();
  }
  absl::StatusOr<agentpb::CniResponse> Check(const agentpb::CniRequest& req) override {
    *last = req;
    return Result();
  }
  absl::StatusOr<agentpb::GcResponse> Gc(const agentpb::GcRequest& req) override {
    *last_gc = req;
    if (!error.ok()) return error;
    return agentpb::GcResponse();
  }
  absl::StatusOr<agentpb::StatusResponse> Status() override {
    if (!error.ok()) return error;
    agentpb::StatusResponse r;
    r.set_ready(ready);
    r.set_message(ready ? "ok" : "not ready");
    return r;
  }
  bool last_failure_unreachable() const override { return unreachable; }

  absl::StatusOr<agentpb::CniResponse> Result() {
    if (!error.ok()) return error;
    agentpb::CniResponse r;
    r.add_warnings("EFA device efa0 not moved");
    return r;
  }

  absl::Status error;
  bool unreachable = false;
  bool ready = true;
  agentpb::CniRequest* last = nullptr;    // owned by the fixture: the plugin
  agentpb::GcRequest* last_gc = nullptr;  // destroys its client before returning
};

class CniPluginTest : public ::testing::Test {
 protected:
  PluginOutput Run(const std::string& command, const std::string& config) {
    EnvLookup env = {{"CNI_COMMAND", command},
                     {"CNI_CONTAINERID", "abc123"},
                     {"CNI_NETNS", "/var/run/netns/x"},
                     {"CNI_IFNAME", "eth0"},
                     {"CNI_ARGS", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=pod-a;K8S_POD_UID=u1"}};
    return RunPlugin(env, config, [this](const std::string& socket, std::chrono::milliseconds) {
      socket_seen_ = socket;
      auto c = std::make_unique<FakeAgentClient>();
      c->error = error_;
      c->unreachable = unreachable_;
      c->ready = ready_;
      c->last = &last_;
      c->last_gc = &last_gc_;
      client_made_ = true;
      return c;
    });
  }
  int Code(const PluginOutput& out) {
    return nlohmann::json::parse(out.stdout_data)["code"].get<int>();
  }

  absl::Status error_;
  bool unreachable_ = false;
  bool ready_ = true;
  std::string socket_seen_;
  bool client_made_ = false;
  agentpb::CniRequest last_;
  agentpb::GcRequest last_gc_;
};

constexpr char kPrevResult[] =
    R"({"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/var/run/netns/x"}],"ips":[{"address":"10.1.0.5/24","interface":0}]})";

std::string Conf(const std::string& version = "1.0.0") {
  return std::string(R"({"cniVersion":")") + version +
         R"(","name":"fabric-net","type":"fabric-cni","agentSocket":"/tmp/x.sock","prevResult":)" +
         kPrevResult + "}";
}

TEST_F(CniPluginTest, AddPassesPrevResultThroughAndForwardsPod) {
  auto out = Run("ADD", Conf());
  EXPECT_EQ(out.exit_code, 0);
  EXPECT_EQ(out.stdout_data, kPrevResult);
  EXPECT_EQ(socket_seen_, "/tmp/x.sock");
  EXPECT_EQ(last_.pod_namespace(), "ns");
  EXPECT_EQ(last_.pod_name(), "pod-a");
  EXPECT_EQ(last_.pod_uid(), "u1");
  EXPECT_EQ(last_.netns(), "/var/run/netns/x");
  EXPECT_EQ(last_.network_name(), "fabric-net");
}

TEST_F(CniPluginTest, AddWithAgentUnreachableIsTryAgainLater) {
  error_ = absl::UnavailableError("fabric agent unreachable: no socket at /tmp/x.sock");
  unreachable_ = true;
  auto out = Run("ADD", Conf());
  EXPECT_EQ(out.exit_code, 1);
  EXPECT_EQ(Code(out), kErrTryAgainLater);
  auto j = nlohmann::json::parse(out.stdout_data);
  EXPECT_THAT(j["details"].get<std::string>(), HasSubstr("agentSocket"));
}

TEST_F(CniPluginTest, AddMoveFailureIsDeviceError) {
  error_ = absl::FailedPreconditionError("cannot move RDMA device mlx5_0");
  auto out = Run("ADD", Conf());
  EXPECT_EQ(Code(out), kErrDeviceNetns);
  EXPECT_THAT(out.stdout_data, HasSubstr("mlx5_0"));
}

TEST_F(CniPluginTest, DelWithAgentUnreachableSucceedsSilently) {
  error_ = absl::UnavailableError("fabric agent unreachable");
  unreachable_ = true;
  auto out = Run("DEL", Conf());
  EXPECT_EQ(out.exit_code, 0);
  EXPECT_EQ(out.stdout_data, "");
}

TEST_F(CniPluginTest, DelAgentErrorIsReported) {
  error_ = absl::FailedPreconditionError("cannot move back");
  auto out = Run("DEL", Conf());
  EXPECT_EQ(out.exit_code, 1);
  EXPECT_EQ(Code(out), kErrDeviceNetns);
}

TEST_F(CniPluginTest, CheckAndGcPrintNothingOnSuccess) {
  auto check = Run("CHECK", Conf());
  EXPECT_EQ(check.exit_code, 0);
  EXPECT_EQ(check.stdout_data, "");
  auto gc = Run(
      "GC",
      R"({"cniVersion":"1.1.0","name":"fabric-net","type":"fabric-cni","cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"}]})");
  EXPECT_EQ(gc.exit_code, 0) << gc.stdout_data;
  EXPECT_EQ(gc.stdout_data, "");
  ASSERT_EQ(last_gc_.valid_attachments_size(), 1);
  EXPECT_EQ(last_gc_.network_name(), "fabric-net");
}

TEST_F(CniPluginTest, StatusReportsUnreachableAgentAs50) {
  const std::string conf = R"({"cniVersion":"1.1.0","name":"fabric-net","type":"fabric-cni"})";
  EXPECT_EQ(Run("STATUS", conf).exit_code, 0);
  error_ = absl::UnavailableError("fabric agent unreachable");
  unreachable_ = true;
  auto out = Run("STATUS", conf);
  EXPECT_EQ(out.exit_code, 1);
  EXPECT_EQ(Code(out), kErrPluginNotAvailable);
  EXPECT_EQ(socket_seen_, kDefaultAgentSocket);
}

TEST_F(CniPluginTest, MalformedStdinIsDecodeError) {
  auto out = Run("ADD", "{\"cniVersion\":");
  EXPECT_EQ(out.exit_code, 1);
  EXPECT_EQ(Code(out), kErrDecodingFailure);
  EXPECT_FALSE(client_made_);  // never reached the agent
}

TEST_F(CniPluginTest, UnsupportedVersionIsIncompatible) {
  auto out = Run("ADD", Conf("9.9.9"));
  EXPECT_EQ(Code(out), kErrIncompatibleVersion);
  EXPECT_THAT(out.stdout_data, HasSubstr("1.0.0"));
}

TEST_F(CniPluginTest, VersionNeedsNoAgent) {
  auto out = Run("VERSION", R"({"cniVersion":"1.0.0"})");
  EXPECT_EQ(out.exit_code, 0);
  EXPECT_FALSE(client_made_);
  EXPECT_THAT(out.stdout_data, HasSubstr("supportedVersions"));
}

}  // namespace
}  // namespace fabric::cni
