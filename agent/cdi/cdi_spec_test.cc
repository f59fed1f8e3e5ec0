#include "agent/cdi/cdi_spec.h"

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/status_matchers.h"

namespace fabric::cdi {
namespace {

using ::testing::HasSubstr;

DeviceNode Uverbs(int n) {
  DeviceNode node;
  node.path = "/dev/infiniband/uverbs" + std::to_string(n);
  node.major = 231;
  node.minor = 192 + n;
  return node;
}

CdiSpecInput EfaInput() {
  CdiSpecInput in;
  in.kind = "vpc.amazonaws.com/efa";
  in.devices.push_back({"rdmap79s0", {Uverbs(0)}, {"FABRIC_DEVICES=rdmap79s0"}});
  in.devices.push_back({"rdmap80s0", {Uverbs(1)}, {"FABRIC_DEVICES=rdmap80s0"}});
  return in;
}

TEST(KindForResourceTest, ReplacesDotsInClassOnly) {
  EXPECT_EQ(KindForResource("device.gpustack.ai/rdma.shared"), "device.gpustack.ai/rdma_shared");
  EXPECT_EQ(KindForResource("vpc.amazonaws.com/efa"), "vpc.amazonaws.com/efa");
  EXPECT_EQ(KindForResource("example.com/a b+c"), "example.com/a_b_c");
  EXPECT_EQ(KindForResource("rdma"), "fabric.local/rdma");
  for (const char* r : {"device.gpustack.ai/rdma.shared", "vpc.amazonaws.com/efa", "rdma"}) {
    EXPECT_OK(ValidateKind(KindForResource(r))) << r;
  }
}

TEST(QualifiedNameTest, Joins) {
  EXPECT_EQ(QualifiedName("example.com/rdma", "0000:3b:00.1"), "example.com/rdma=0000:3b:00.1");
}

TEST(ValidateKindTest, AcceptsAndRejects) {
  EXPECT_OK(ValidateKind("vpc.amazonaws.com/efa"));
  EXPECT_OK(ValidateKind("example.com/rdma_shared-2"));
  EXPECT_OK(ValidateKind("example.com/class.with.dots"));  // valid, but needs 0.6.0
  for (const char* bad :
       {"", "example.com", "/efa", "example.com/", "1example.com/efa", "example.com/_efa",
        "example.com/efa_", "example.com/ef@a", "example.com/e", "x/efa"}) {
    absl::Status s = ValidateKind(bad);
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
    EXPECT_THAT(std::string(s.message()), HasSubstr(bad)) << bad;
  }
  EXPECT_THAT(ValidateKind("example.com/" + std::string(64, 'a')),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ValidateDeviceNameTest, ParserRules) {
  for (const char* ok : {"rdmap79s0", "0000:3b:00.1", "a", "uverbs_0-x.y:z"}) {
    EXPECT_OK(ValidateDeviceName(ok)) << ok;
  }
  for (const char* bad : {"", "-a", "a-", "a b", "a/b", "a=b", "uverbs0:"}) {
    absl::Status s = ValidateDeviceName(bad);
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
    EXPECT_THAT(std::string(s.message()), HasSubstr("\"" + std::string(bad) + "\""));
  }
}

TEST(MinimumVersionTest, LowestThatLoads) {
  CdiSpecInput in = EfaInput();
  EXPECT_EQ(MinimumVersion(in), "0.3.0");

  in.devices[0].nodes[0].host_path = in.devices[0].nodes[0].path;  // same path: omitted
  EXPECT_EQ(MinimumVersion(in), "0.3.0");

  in.devices[0].nodes[0].host_path = "/host/dev/infiniband/uverbs0";
  EXPECT_EQ(MinimumVersion(in), "0.5.0");

  in = EfaInput();
  in.devices[0].name = "0000:3b:00.1";  // leading digit
  EXPECT_EQ(MinimumVersion(in), "0.5.0");

  in = EfaInput();
  DeviceNode cm{"/dev/infiniband/rdma_cm", "/elsewhere/rdma_cm", 10, 58};
  in.common_nodes.push_back(cm);
  EXPECT_EQ(MinimumVersion(in), "0.5.0");

  in = EfaInput();
  in.kind = "example.com/rdma.shared";
  EXPECT_EQ(MinimumVersion(in), "0.6.0");
}

// Every key the CDI v0.5.x specs-go structs know; loading is strict, so any
// other key would make containerd 1.7.0 reject the whole file.
void ExpectOnlyKnownKeys(const nlohmann::json& j, const std::set<std::string>& known,
                         const std::string& where) {
  ASSERT_TRUE(j.is_object()) << where;
  for (const auto& [key, value] : j.items()) {
    EXPECT_TRUE(known.count(key)) << "unknown key " << key << " in " << where;
  }
}

void CheckEdits(const nlohmann::json& edits, const std::string& where) {
  ExpectOnlyKnownKeys(edits, {"env", "deviceNodes", "hooks", "mounts"}, where);
  for (const auto& n : edits.value("deviceNodes", nlohmann::json::array())) {
    ExpectOnlyKnownKeys(
        n, {"path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid"},
        where + ".deviceNodes");
  }
  for (const auto& h : edits.value("hooks", nlohmann::json::array())) {
    ExpectOnlyKnownKeys(h, {"hookName", "path", "args", "env", "timeout"}, where + ".hooks");
  }
}

TEST(RenderSpecTest, RendersDevicesCommonNodesAndHook) {
  CdiSpecInput in = EfaInput();
  in.common_nodes.push_back({"/dev/infiniband/rdma_cm", "", 10, 58});
  in.memlock_hook = MemlockHook("/opt/fabric/bin/fabric-memlock-hook", "unlimited");

  absl::StatusOr<std::string> text = RenderSpec(in);
  ASSERT_OK(text);
  nlohmann::json j = nlohmann::json::parse(*text);

  ExpectOnlyKnownKeys(j, {"cdiVersion", "kind", "devices", "containerEdits"}, "spec");
  EXPECT_EQ(j["cdiVersion"], "0.3.0");
  EXPECT_EQ(j["kind"], "vpc.amazonaws.com/efa");
  ASSERT_EQ(j["devices"].size(), 2u);
  const auto& d0 = j["devices"][0];
  ExpectOnlyKnownKeys(d0, {"name", "containerEdits"}, "device");
  CheckEdits(d0["containerEdits"], "device");
  EXPECT_EQ(d0["name"], "rdmap79s0");
  EXPECT_EQ(d0["containerEdits"]["env"], nlohmann::json({"FABRIC_DEVICES=rdmap79s0"}));
  const auto& node = d0["containerEdits"]["deviceNodes"][0];
  EXPECT_EQ(node["path"], "/dev/infiniband/uverbs0");
  EXPECT_FALSE(node.contains("hostPath"));
  EXPECT_EQ(node["type"], "c");
  EXPECT_EQ(node["major"], 231);
  EXPECT_EQ(node["minor"], 192);
  EXPECT_EQ(node["fileMode"], 0666);
  EXPECT_EQ(node["permissions"], "rw");
  EXPECT_EQ(j["devices"][1]["containerEdits"]["deviceNodes"][0]["minor"], 193);

  const auto& common = j["containerEdits"];
  CheckEdits(common, "spec.containerEdits");
  EXPECT_FALSE(common.contains("env"));
  EXPECT_EQ(common["deviceNodes"][0]["path"], "/dev/infiniband/rdma_cm");
  EXPECT_EQ(common["deviceNodes"][0]["minor"], 58);
  ASSERT_EQ(common["hooks"].size(), 1u);
  EXPECT_EQ(common["hooks"][0]["hookName"], "createRuntime");
  EXPECT_EQ(common["hooks"][0]["path"], "/opt/fabric/bin/fabric-memlock-hook");
  EXPECT_EQ(common["hooks"][0]["args"],
            nlohmann::json({"fabric-memlock-hook", "--memlock=unlimited"}));
}

TEST(RenderSpecTest, NoSpecLevelEditsWithoutCommonNodesOrHook) {
  absl::StatusOr<std::string> text = RenderSpec(EfaInput());
  ASSERT_OK(text);
  EXPECT_FALSE(nlohmann::json::parse(*text).contains("containerEdits"));
}

TEST(RenderSpecTest, HostPathEmittedWhenDifferentAndVersionRaised) {
  CdiSpecInput in = EfaInput();
  in.devices[0].nodes[0].host_path = "/run/fabric/uverbs0";
  absl::StatusOr<std::string> text = RenderSpec(in);
  ASSERT_OK(text);
  nlohmann::json j = nlohmann::json::parse(*text);
  EXPECT_EQ(j["cdiVersion"], "0.5.0");
  EXPECT_EQ(j["devices"][0]["containerEdits"]["deviceNodes"][0]["hostPath"], "/run/fabric/uverbs0");
}

TEST(RenderSpecTest, RejectsBadInputNamingIt) {
  struct Case {
    std::string what;
    std::function<void(CdiSpecInput*)> mutate;
    std::string expect_in_message;
  };
  std::vector<Case> cases = {
      {"bad kind", [](CdiSpecInput* in) { in->kind = "example.com/bad kind"; }, "bad kind"},
      {"bad name", [](CdiSpecInput* in) { in->devices[0].name = "uverbs0/"; }, "uverbs0/"},
      {"duplicate", [](CdiSpecInput* in) { in->devices[1].name = "rdmap79s0"; }, "duplicate"},
      {"no devices", [](CdiSpecInput* in) { in->devices.clear(); }, "at least one device"},
      {"empty device",
       [](CdiSpecInput* in) {
         in->devices[0].nodes.clear();
         in->devices[0].env.clear();
       },
       "rdmap79s0"},
      {"env", [](CdiSpecInput* in) { in->devices[0].env = {"NOEQUALS"}; }, "NOEQUALS"},
      {"env key", [](CdiSpecInput* in) { in->devices[0].env = {"=v"}; }, "=v"},
      {"perms", [](CdiSpecInput* in) { in->devices[0].nodes[0].permissions = "rx"; }, "rx"},
      {"relative node", [](CdiSpecInput* in) { in->devices[0].nodes[0].path = "dev/x"; }, "dev/x"},
      {"hook path", [](CdiSpecInput* in) { in->memlock_hook = MemlockHook("hook", "1Gi"); },
       "must be absolute"},
      {"hook name",
       [](CdiSpecInput* in) {
         in->memlock_hook = MemlockHook("/bin/hook", "1Gi");
         in->memlock_hook->hook_name = "onStart";
       },
       "onStart"},
  };
  for (const Case& c : cases) {
    CdiSpecInput in = EfaInput();
    c.mutate(&in);
    absl::StatusOr<std::string> text = RenderSpec(in);
    EXPECT_THAT(text, StatusIs(absl::StatusCode::kInvalidArgument)) << c.what;
    EXPECT_THAT(std::string(text.status().message()), HasSubstr(c.expect_in_message)) << c.what;
  }
}

TEST(ParseSpecTest, RoundTrips) {
  CdiSpecInput in = EfaInput();
  in.devices[1].nodes[0].host_path = "/host/uverbs1";
  in.common_nodes.push_back({"/dev/infiniband/rdma_cm", "", 10, 58, "rwm"});
  in.memlock_hook = MemlockHook("/opt/hook", "64Mi");
  absl::StatusOr<std::string> text = RenderSpec(in);
  ASSERT_OK(text);
  absl::StatusOr<CdiSpecInput> back = ParseSpec(*text);
  ASSERT_OK(back);
  absl::StatusOr<std::string> again = RenderSpec(*back);
  ASSERT_OK(again);
  EXPECT_EQ(*again, *text);
  EXPECT_EQ(back->devices[1].nodes[0].host_path, "/host/uverbs1");
  EXPECT_EQ(back->common_nodes[0].permissions, "rwm");
}

TEST(ParseSpecTest, RejectsGarbage) {
  EXPECT_THAT(ParseSpec("not json"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseSpec(R"({"kind":"a/b","devices":[{"name":1}]})"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(SpecFileNameTest, VendorDashClass) {
  EXPECT_EQ(SpecFileName("vpc.amazonaws.com/efa"), "vpc.amazonaws.com-efa.json");
}

}  // namespace
}  // namespace fabric::cdi
