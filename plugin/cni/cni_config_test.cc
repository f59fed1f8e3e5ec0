#include "plugin/cni/cni_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace fabric::cni {
namespace {

using ::testing::HasSubstr;

EnvLookup AddEnv() {
  return {{"CNI_COMMAND", "ADD"},
          {"CNI_CONTAINERID", "abc123"},
          {"CNI_NETNS", "/var/run/netns/x"},
          {"CNI_IFNAME", "eth0"},
          {"CNI_PATH", "/opt/cni/bin"},
          {"CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=pod-a;K8S_POD_UID=u-1"}};
}

constexpr char kPrev[] =
    R"({"cniVersion":"1.0.0","interfaces":[{"name":"eth0","mac":"aa:bb:cc:dd:ee:ff","sandbox":"/var/run/netns/x"}],"ips":[{"address":"10.1.0.5/24","gateway":"10.1.0.1","interface":0}],"routes":[{"dst":"0.0.0.0/0"}],"dns":{}})";

std::string Config(const std::string& version, const std::string& extra = "") {
  return R"({"cniVersion":")" + version + R"(","name":"fabric-net","type":"fabric-cni")" + extra +
         "}";
}

int CodeOf(const std::variant<Invocation, CniError>& r) {
  auto* e = std::get_if<CniError>(&r);
  return e ? e->code : 0;
}

TEST(CniConfigTest, ParsesAddWithPrevResultAndArgs) {
  auto r = ParseInvocation(
      AddEnv(),
      Config("1.0.0", std::string(R"(,"agentSocket":"/tmp/a.sock","prevResult":)") + kPrev));
  ASSERT_EQ(CodeOf(r), 0) << std::get<CniError>(r).msg;
  const auto& inv = std::get<Invocation>(r);
  EXPECT_EQ(inv.command, Command::kAdd);
  EXPECT_EQ(inv.container_id, "abc123");
  EXPECT_EQ(inv.network_name, "fabric-net");
  EXPECT_EQ(inv.agent_socket, "/tmp/a.sock");
  EXPECT_EQ(inv.Arg("K8S_POD_NAMESPACE"), "ns");
  EXPECT_EQ(inv.Arg("K8S_POD_NAME"), "pod-a");
  EXPECT_EQ(inv.Arg("K8S_POD_UID"), "u-1");
  // prevResult goes out byte for byte as it came in (compact input).
  EXPECT_EQ(AddResultJson(inv), kPrev);
}

TEST(CniConfigTest, DefaultsAgentSocketAndFirstInChainResult) {
  auto r = ParseInvocation(AddEnv(), Config("0.4.0"));
  ASSERT_EQ(CodeOf(r), 0);
  const auto& inv = std::get<Invocation>(r);
  EXPECT_EQ(inv.agent_socket, kDefaultAgentSocket);
  EXPECT_EQ(AddResultJson(inv), R"({"cniVersion":"0.4.0"})");
}

TEST(CniConfigTest, ErrorCodes) {
  EXPECT_EQ(CodeOf(ParseInvocation({}, Config("1.0.0"))), kErrInvalidEnvironment);
  EnvLookup bad_cmd = AddEnv();
  bad_cmd["CNI_COMMAND"] = "FROB";
  EXPECT_EQ(CodeOf(ParseInvocation(bad_cmd, Config("1.0.0"))), kErrInvalidEnvironment);
  EXPECT_EQ(CodeOf(ParseInvocation(AddEnv(), "{not json")), kErrDecodingFailure);
  EXPECT_EQ(CodeOf(ParseInvocation(AddEnv(), "[]")), kErrDecodingFailure);
  EXPECT_EQ(CodeOf(ParseInvocation(AddEnv(), R"({"name":"x"})")), kErrInvalidNetworkConfig);
  EXPECT_EQ(CodeOf(ParseInvocation(AddEnv(), Config("2.0.0"))), kErrIncompatibleVersion);
  EXPECT_EQ(CodeOf(ParseInvocation(AddEnv(), Config("0.2.0"))), kErrIncompatibleVersion);
  EXPECT_EQ(CodeOf(ParseInvocation(AddEnv(), R"({"cniVersion":"1.0.0"})")),
            kErrInvalidNetworkConfig);
  EXPECT_EQ(CodeOf(ParseInvocation(AddEnv(), Config("1.0.0", R"(,"agentSocket":5)"))),
            kErrInvalidNetworkConfig);
  EXPECT_EQ(CodeOf(ParseInvocation(AddEnv(), Config("1.0.0", R"(,"prevResult":"x")"))),
            kErrInvalidNetworkConfig);
  EXPECT_EQ(CodeOf(ParseInvocation(AddEnv(), Config("1.0.0", R"(,"timeoutSeconds":-1)"))),
            kErrInvalidNetworkConfig);
  EnvLookup no_netns = AddEnv();
  no_netns.erase("CNI_NETNS");
  auto r = ParseInvocation(no_netns, Config("1.0.0"));
  ASSERT_EQ(CodeOf(r), kErrInvalidEnvironment);
  EXPECT_THAT(std::get<CniError>(r).msg, HasSubstr("CNI_NETNS"));
  EnvLookup bad_id = AddEnv();
  bad_id["CNI_CONTAINERID"] = "-bad/id";
  EXPECT_EQ(CodeOf(ParseInvocation(bad_id, Config("1.0.0"))), kErrInvalidEnvironment);
  EnvLookup bad_if = AddEnv();
  bad_if["CNI_IFNAME"] = "much-too-long-ifname";
  EXPECT_EQ(CodeOf(ParseInvocation(bad_if, Config("1.0.0"))), kErrInvalidEnvironment);
  EnvLookup bad_args = AddEnv();
  bad_args["CNI_ARGS"] = "K8S_POD_NAME";
  EXPECT_EQ(CodeOf(ParseInvocation(bad_args, Config("1.0.0"))), kErrInvalidEnvironment);
}

TEST(CniConfigTest, DelNeedsNoNetns) {
  EnvLookup env = AddEnv();
  env["CNI_COMMAND"] = "DEL";
  env.erase("CNI_NETNS");
  EXPECT_EQ(CodeOf(ParseInvocation(env, Config("0.4.0"))), 0);
}

TEST(CniConfigTest, VersionGatesCommands) {
  EnvLookup env = AddEnv();
  env["CNI_COMMAND"] = "CHECK";
  EXPECT_EQ(CodeOf(ParseInvocation(env, Config("0.3.1"))), kErrIncompatibleVersion);
  EXPECT_EQ(CodeOf(ParseInvocation(env, Config("0.4.0"))), 0);
  EnvLookup status = {{"CNI_COMMAND", "STATUS"}};
  EXPECT_EQ(CodeOf(ParseInvocation(status, Config("1.0.0"))), kErrIncompatibleVersion);
  EXPECT_EQ(CodeOf(ParseInvocation(status, Config("1.1.0"))), 0);
}

TEST(CniConfigTest, GcValidAttachments) {
  EnvLookup env = {{"CNI_COMMAND", "GC"}, {"CNI_PATH", "/opt/cni/bin"}};
  auto r = ParseInvocation(
      env,
      Config("1.1.0", R"(,"cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"}])"));
  ASSERT_EQ(CodeOf(r), 0);
  const auto& inv = std::get<Invocation>(r);
  ASSERT_EQ(inv.valid_attachments.size(), 1u);
  EXPECT_EQ(inv.valid_attachments[0].container_id, "c1");
  EXPECT_EQ(CodeOf(ParseInvocation(
                env, Config("1.1.0", R"(,"cni.dev/valid-attachments":[{"ifname":1}])"))),
            kErrInvalidNetworkConfig);
}

TEST(CniConfigTest, VersionReplyAndErrorJson) {
  auto r = ParseInvocation({{"CNI_COMMAND", "VERSION"}}, R"({"cniVersion":"0.4.0"})");
  ASSERT_EQ(CodeOf(r), 0);
  auto v = nlohmann::json::parse(VersionJson());
  EXPECT_EQ(v["cniVersion"], "1.1.0");
  EXPECT_EQ(v["supportedVersions"].size(), 5u);
  auto e = nlohmann::json::parse(ErrorJson({11, "agent down", "start it"}, "1.0.0"));
  EXPECT_EQ(e["code"], 11);
  EXPECT_EQ(e["msg"], "agent down");
  EXPECT_EQ(e["details"], "start it");
  EXPECT_EQ(e["cniVersion"], "1.0.0");
}

TEST(CniConfigTest, CompareVersions) {
  EXPECT_EQ(CompareVersions("1.0.0", "0.4.0"), 1);
  EXPECT_EQ(CompareVersions("0.10.0", "0.4.0"), 1);
  EXPECT_EQ(CompareVersions("1.1.0", "1.1.0"), 0);
  EXPECT_EQ(CompareVersions("1.1", "1.1.0"), std::nullopt);
  EXPECT_EQ(CompareVersions("1.a.0", "1.1.0"), std::nullopt);
}

}  // namespace
}  // namespace fabric::cni
