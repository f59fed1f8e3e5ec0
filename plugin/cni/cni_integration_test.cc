// The REAL fabric-cni binary, invoked the way container runtimes do (libcni via
// the Go `cni-invoke` helper), chained after the reference `bridge` plugin in
// network namespaces created here, against the agent's CNI service running in
// this process with a fake kubelet PodResources server and a fake RDMA netlink.
// Needs root (ip netns, bridge); skips with the reason otherwise.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "agent/base/file_util.h"
#include "agent/base/host_paths.h"
#include "agent/cni_service/cni_agent_server.h"
#include "agent/cni_service/cni_service.h"
#include "agent/podresources/podresources_client.h"
#include "test/fakes/fake_podresources_server.h"
#include "test/fakes/fake_rdma_netlink.h"
#include "test/testing/status_matchers.h"

namespace fabric::cni {
namespace {

using cni_service::DeviceResolver;
using cni_service::GrantedDevice;
using netns::NetnsMode;
using ::testing::HasSubstr;
using Json = nlohmann::json;

struct CmdResult {
  int exit_code = -1;
  std::string out;
};

// Runs a shell command; stdout captured, stderr appended to `log`.
CmdResult Sh(const std::string& cmd, const std::string& log) {
  CmdResult r;
  std::FILE* p = ::popen((cmd + " 2>>" + log).c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class MapResolver : public DeviceResolver {
 public:
  std::optional<GrantedDevice> Resolve(const std::string& resource,
                                       const std::string& id) const override {
    auto it = devices_.find({resource, id});
    if (it == devices_.end()) return std::nullopt;
    return it->second;
  }
  void Add(GrantedDevice d) { devices_[{d.resource, d.device_id}] = d; }

 private:
  std::map<std::pair<std::string, std::string>, GrantedDevice> devices_;
};

class CniIntegrationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* bin = std::getenv("FABRIC_BINARY_DIR");
    std::string build = bin ? bin : ".";
    plugin_ = build + "/plugin/cni/fabric-cni";
    invoker_ = build + "/plugin/cni/cni-invoke";
  }

  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root: creates network namespaces (ip netns add)";
    if (!PathExists(plugin_)) GTEST_SKIP() << "fabric-cni not built at " << plugin_;
    if (!PathExists(invoker_)) {
      GTEST_SKIP() << "cni-invoke not built (needs golang-go + golang-github-appc-cni-dev)";
    }
    if (!PathExists("/usr/lib/cni/bridge")) {
      GTEST_SKIP() << "reference plugins missing (apt-get install containernetworking-plugins)";
    }
    char tmpl[] = "/tmp/fcniXXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    log_ = dir_ + "/stderr.log";
    ASSERT_EQ(::mkdir((dir_ + "/bin").c_str(), 0755), 0);
    ASSERT_EQ(::symlink(plugin_.c_str(), (dir_ + "/bin/fabric-cni").c_str()), 0);
    cni_path_ = dir_ + "/bin:/usr/lib/cni";
    tag_ = std::to_string(::getpid() % 100000);

    // The kubelet side.
    pods_.SetPods({
        {"ns", "pod-a", {{"main", {{"fabric.io/rdma", "0000:01:00.0", {0, 1}}}}}},
        {"ns", "pod-b", {{"main", {{"fabric.io/rdma", "0000:01:00.1", {0}}}}}},
        {"ns", "pod-efa", {{"main", {{"fabric.io/efa", "efa0", {0}}}}}},
        {"ns", "plain", {{"main", {}}}},
    });
    pods_.EnableGet(true);
    ASSERT_OK(pods_.Start(dir_ + "/kubelet.sock"));
    podresources::PodResourcesClientOptions opts;
    opts.socket_path = dir_ + "/kubelet.sock";
    pr_client_ = std::make_unique<podresources::PodResourcesClient>(opts);

    // The device side.
    for (const char* d : {"mlx5_0", "mlx5_1", "efa0"}) rdma_.AddDevice(d);
    rdma_.RefuseMoves("efa0");
    rdma_.SetMode(NetnsMode::kExclusive);
    resolver_.Add({"fabric.io/rdma", "0000:01:00.0", "mlx5_0", true, false});
    resolver_.Add({"fabric.io/rdma", "0000:01:00.1", "mlx5_1", true, false});
    resolver_.Add({"fabric.io/efa", "efa0", "efa0", true, true});

    paths_.state_dir = dir_ + "/state";
    service_ =
        std::make_unique<cni_service::CniService>(paths_, pr_client_.get(), &resolver_, &rdma_);
    agent_socket_ = dir_ + "/run/agent.sock";
    StartAgent();
  }

  void TearDown() override {
    if (dir_.empty()) return;
    server_.reset();
    pods_.Stop();
    for (const auto& ns : netns_) Sh("ip netns del " + ns, "/dev/null");
    Sh("ip link del fcbr" + tag_, "/dev/null");
    if (HasFailure()) {
      auto log = ReadFile(log_);
      if (log.ok()) std::fprintf(stderr, "---- plugin stderr ----\n%s\n", log->c_str());
    }
    std::system(("rm -rf " + dir_).c_str());
  }

  void StartAgent() {
    server_ = std::make_unique<cni_service::CniAgentServer>(service_.get());
    ASSERT_OK(server_->Start(agent_socket_));
  }

  std::string NewNetns(const std::string& name) {
    std::string ns = "fcni-" + tag_ + "-" + name;
    EXPECT_EQ(Sh("ip netns add " + ns, log_).exit_code, 0);
    netns_.push_back(ns);
    return "/run/netns/" + ns;
  }

  std::string Write(const std::string& name, const std::string& text) {
    std::string p = dir_ + "/" + name;
    std::ofstream(p) << text;
    return p;
  }

  // A conflist: reference bridge (+host-local IPAM) then fabric-cni.
  std::string ChainConf(const std::string& version) {
    Json bridge = {
        {"type", "bridge"},
        {"bridge", "fcbr" + tag_},
        {"isGateway", true},
        {"ipam",
         {{"type", "host-local"}, {"subnet", "10.231.0.0/24"}, {"dataDir", dir_ + "/ipam"}}}};
    Json fabric = {{"type", "fabric-cni"}, {"agentSocket", agent_socket_}};
    Json list = {{"cniVersion", version},
                 {"name", "fabric-net-" + version},
                 {"plugins", Json::array({bridge, fabric})}};
    return Write("chain-" + version + ".conflist", list.dump(2));
  }

  static std::string PodArgs(const std::string& pod) {
    return "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=" + pod +
           ";K8S_POD_INFRA_CONTAINER_ID=x;K8S_POD_UID=uid-" + pod;
  }

  CmdResult Chain(const std::string& cmd, const std::string& conf, const std::string& netns,
                  const std::string& cid, const std::string& pod) {
    return Sh(invoker_ + " chain -cmd " + cmd + " -conf " + conf + " -netns " + netns + " -cid " +
                  cid + " -args '" + PodArgs(pod) + "' -cache " + dir_ + "/cache -path " +
                  cni_path_,
              log_);
  }

  CmdResult Raw(const std::string& cmd, const std::string& stdin_file,
                const std::string& extra = "") {
    return Sh(invoker_ + " raw -plugin fabric-cni -cmd " + cmd + " -conf " + stdin_file +
                  " -path " + cni_path_ + " " + extra,
              log_);
  }

  static int ErrorCode(const CmdResult& r) {
    auto j = Json::parse(r.out, nullptr, false);
    if (j.is_discarded() || !j.contains("code")) return -1;
    return j["code"].get<int>();
  }

  static inline std::string plugin_, invoker_;
  std::string dir_, log_, cni_path_, tag_, agent_socket_;
  std::vector<std::string> netns_;
  podresources::FakePodResourcesServer pods_;
  std::unique_ptr<podresources::PodResourcesClient> pr_client_;
  netns::FakeRdmaNetlink rdma_;
  MapResolver resolver_;
  HostPaths paths_;
  std::unique_ptr<cni_service::CniService> service_;
  std::unique_ptr<cni_service::CniAgentServer> server_;
};

TEST_F(CniIntegrationTest, VersionThroughLibcni) {
  auto r = Sh(invoker_ + " version -plugin fabric-cni -path " + cni_path_, log_);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto versions = Json::parse(r.out)["supportedVersions"];
  for (const char* v : {"0.4.0", "1.0.0", "1.1.0"}) {
    EXPECT_NE(std::find(versions.begin(), versions.end(), v), versions.end()) << v;
  }
}

class ChainedVersionTest : public CniIntegrationTest,
                           public ::testing::WithParamInterface<std::string> {};

TEST_P(ChainedVersionTest, AddCheckDelAfterBridge) {
  const std::string version = GetParam();
  std::string conf = ChainConf(version);
  std::string netns = NewNetns("a" + std::to_string(version[0] - '0'));
  const std::string cid = "ctr-a-" + tag_;

  auto add = Chain("ADD", conf, netns, cid, "pod-a");
  ASSERT_EQ(add.exit_code, 0) << add.out;
  auto result = Json::parse(add.out);  // stdout is exactly one JSON document
  EXPECT_EQ(result["cniVersion"], version);
  // The bridge plugin's result came through untouched.
  ASSERT_TRUE(result.contains("ips"));
  EXPECT_THAT(result["ips"][0]["address"].get<std::string>(), HasSubstr("10.231.0."));
  bool has_eth0 = false;
  for (const auto& i : result["interfaces"]) has_eth0 = has_eth0 || i["name"] == "eth0";
  EXPECT_TRUE(has_eth0);
  EXPECT_EQ(Sh("ip -n " + netns.substr(11) + " link show eth0", log_).exit_code, 0);
  // The agent moved the Pod's exclusive RDMA device into the Pod netns.
  EXPECT_EQ(rdma_.Location("mlx5_0"), netns);
  EXPECT_EQ(rdma_.Location("mlx5_1"), "");

  auto check = Chain("CHECK", conf, netns, cid, "pod-a");
  EXPECT_EQ(check.exit_code, 0) << check.out;

  // Someone moves the device out behind our back: CHECK says so (code 100).
  ASSERT_OK(rdma_.MoveDevice("mlx5_0", netns, ""));
  auto bad = Chain("CHECK", conf, netns, cid, "pod-a");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_EQ(ErrorCode(bad), 100) << bad.out;
  EXPECT_THAT(bad.out, HasSubstr("mlx5_0"));
  ASSERT_OK(rdma_.MoveDevice("mlx5_0", "", netns));

  auto del = Chain("DEL", conf, netns, cid, "pod-a");
  EXPECT_EQ(del.exit_code, 0) << del.out;
  EXPECT_EQ(rdma_.Location("mlx5_0"), "");
  auto again = Chain("DEL", conf, netns, cid, "pod-a");  // DEL is idempotent
  EXPECT_EQ(again.exit_code, 0) << again.out;
  auto records = service_->Attachments();
  ASSERT_OK(records.status());
  EXPECT_TRUE(records->empty());
}

TEST_P(ChainedVersionTest, PodWithoutFabricDevicesPassesThrough) {
  const std::string version = GetParam();
  std::string conf = ChainConf(version);
  std::string netns = NewNetns("p" + std::to_string(version[0] - '0'));
  auto add = Chain("ADD", conf, netns, "ctr-plain-" + tag_, "plain");
  ASSERT_EQ(add.exit_code, 0) << add.out;
  EXPECT_TRUE(Json::parse(add.out).contains("ips"));
  EXPECT_TRUE(rdma_.moves().empty());
  EXPECT_TRUE(service_->Attachments()->empty());
  EXPECT_EQ(Chain("DEL", conf, netns, "ctr-plain-" + tag_, "plain").exit_code, 0);
}

INSTANTIATE_TEST_SUITE_P(CniVersions, ChainedVersionTest, ::testing::Values("0.4.0", "1.0.0"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '.', '_');
                           return "v" + n;
                         });

TEST_F(CniIntegrationTest, PrevResultIsPassedThroughByteForByte) {
  const std::string prev =
      R"({"cniVersion":"1.0.0","interfaces":[{"name":"eth0","mac":"0a:58:0a:f4:00:05","sandbox":"/x"}],"ips":[{"address":"10.244.0.5/24","gateway":"10.244.0.1","interface":0}],"routes":[{"dst":"0.0.0.0/0"}],"dns":{"nameservers":["10.96.0.10"]}})";
  std::string netns = NewNetns("prev");
  std::string in =
      Write("prev.json", R"({"cniVersion":"1.0.0","name":"n","type":"fabric-cni","agentSocket":")" +
                             agent_socket_ + R"(","prevResult":)" + prev + "}");
  auto r = Raw("ADD", in, "-netns " + netns + " -cid c-prev -args '" + PodArgs("plain") + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out, prev);
}

TEST_F(CniIntegrationTest, OursAloneOn110WithStatusAndGc) {
  std::string netns = NewNetns("v11");
  const std::string conf =
      R"({"cniVersion":"1.1.0","name":"fabric-only","type":"fabric-cni","agentSocket":")" +
      agent_socket_ + "\"}";
  std::string in = Write("v11.json", conf);
  auto status = Raw("STATUS", in);
  EXPECT_EQ(status.exit_code, 0) << status.out;
  EXPECT_EQ(status.out, "");

  auto add = Raw("ADD", in, "-netns " + netns + " -cid c-v11 -args '" + PodArgs("pod-b") + "'");
  ASSERT_EQ(add.exit_code, 0) << add.out;
  EXPECT_EQ(Json::parse(add.out)["cniVersion"], "1.1.0");
  EXPECT_EQ(rdma_.Location("mlx5_1"), netns);

  // GC keeping c-v11 changes nothing; GC without it releases the device.
  Json gc = Json::parse(conf);
  gc["cni.dev/valid-attachments"] = Json::array({{{"containerID", "c-v11"}, {"ifname", "eth0"}}});
  auto keep = Raw("GC", Write("gc1.json", gc.dump()));
  EXPECT_EQ(keep.exit_code, 0) << keep.out;
  EXPECT_EQ(rdma_.Location("mlx5_1"), netns);
  gc["cni.dev/valid-attachments"] = Json::array();
  auto release = Raw("GC", Write("gc2.json", gc.dump()));
  EXPECT_EQ(release.exit_code, 0) << release.out;
  EXPECT_EQ(release.out, "");
  EXPECT_EQ(rdma_.Location("mlx5_1"), "");
  EXPECT_TRUE(service_->Attachments()->empty());
}

TEST_F(CniIntegrationTest, EfaIsReportedNotMovedAndAddSucceeds) {
  std::string netns = NewNetns("efa");
  std::string in =
      Write("efa.json", R"({"cniVersion":"1.1.0","name":"n","type":"fabric-cni","agentSocket":")" +
                            agent_socket_ + "\"}");
  auto add = Raw("ADD", in, "-netns " + netns + " -cid c-efa -args '" + PodArgs("pod-efa") + "'");
  ASSERT_EQ(add.exit_code, 0) << add.out;
  EXPECT_EQ(rdma_.Location("efa0"), "");
  auto log = ReadFile(log_);
  ASSERT_OK(log.status());
  EXPECT_THAT(*log, HasSubstr("efa0"));  // the plugin's stderr warning
  EXPECT_THAT(*log, HasSubstr("not moved"));
  auto records = service_->Attachments();
  ASSERT_OK(records.status());
  ASSERT_EQ(records->size(), 1u);
  EXPECT_EQ((*records)[0].devices[0].action, cni_service::DeviceAction::kNotMovedEfa);
}

TEST_F(CniIntegrationTest, AgentDownErrorPaths) {
  std::string netns = NewNetns("down");
  std::string v11 = Write(
      "down11.json", R"({"cniVersion":"1.1.0","name":"n","type":"fabric-cni","agentSocket":")" +
                         agent_socket_ + "\"}");
  server_.reset();  // the agent stops
  auto add = Raw("ADD", v11, "-netns " + netns + " -cid c-down -args '" + PodArgs("pod-a") + "'");
  EXPECT_EQ(add.exit_code, 1);
  EXPECT_EQ(ErrorCode(add), 11) << add.out;
  EXPECT_THAT(add.out, HasSubstr("agentSocket"));
  auto del = Raw("DEL", v11, "-netns " + netns + " -cid c-down -args '" + PodArgs("pod-a") + "'");
  EXPECT_EQ(del.exit_code, 0) << del.out;
  auto status = Raw("STATUS", v11);
  EXPECT_EQ(status.exit_code, 1);
  EXPECT_EQ(ErrorCode(status), 50) << status.out;

  // Through libcni too: a chained ADD fails with "try again later".
  auto chain = Chain("ADD", ChainConf("1.0.0"), netns, "c-down2", "pod-a");
  EXPECT_EQ(chain.exit_code, 1);
  EXPECT_EQ(ErrorCode(chain), 11) << chain.out;
  Chain("DEL", ChainConf("1.0.0"), netns, "c-down2", "pod-a");
}

TEST_F(CniIntegrationTest, KubeletDownIsTryAgainLaterFromTheAgent) {
  std::string netns = NewNetns("kub");
  std::string in =
      Write("kub.json", R"({"cniVersion":"1.1.0","name":"n","type":"fabric-cni","agentSocket":")" +
                            agent_socket_ + "\"}");
  pods_.Stop();  // the kubelet's PodResources socket goes away; the agent is up
  auto add = Raw("ADD", in, "-netns " + netns + " -cid c-kub -args '" + PodArgs("pod-a") + "'");
  EXPECT_EQ(add.exit_code, 1);
  EXPECT_EQ(ErrorCode(add), 11) << add.out;
  EXPECT_THAT(add.out, HasSubstr("PodResources"));
  EXPECT_THAT(add.out, ::testing::Not(HasSubstr("agent unreachable")));
  EXPECT_EQ(Raw("STATUS", in).exit_code, 0);
}

TEST_F(CniIntegrationTest, MalformedInputErrors) {
  std::string netns = NewNetns("bad");
  auto garbage = Raw("ADD", Write("bad.json", "{\"cniVersion\": \"1.0.0\", "),
                     "-netns " + netns + " -cid c-bad");
  EXPECT_EQ(ErrorCode(garbage), 6) << garbage.out;
  auto version =
      Raw("ADD", Write("v2.json", R"({"cniVersion":"2.0.0","name":"n","type":"fabric-cni"})"),
          "-netns " + netns + " -cid c-bad");
  EXPECT_EQ(ErrorCode(version), 1) << version.out;
  auto no_netns =
      Raw("ADD", Write("ok.json", R"({"cniVersion":"1.0.0","name":"n","type":"fabric-cni"})"),
          "-cid c-bad");
  EXPECT_EQ(ErrorCode(no_netns), 4) << no_netns.out;
  auto bad_key = Raw(
      "ADD",
      Write("k.json", R"({"cniVersion":"1.0.0","name":"n","type":"fabric-cni","agentSocket":7})"),
      "-netns " + netns + " -cid c-bad");
  EXPECT_EQ(ErrorCode(bad_key), 7) << bad_key.out;
  auto gc_old =
      Raw("GC", Write("gc0.json", R"({"cniVersion":"1.0.0","name":"n","type":"fabric-cni"})"));
  EXPECT_EQ(ErrorCode(gc_old), 1) << gc_old.out;
}

}  // namespace
}  // namespace fabric::cni
