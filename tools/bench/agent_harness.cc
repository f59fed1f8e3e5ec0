#include "tools/bench/agent_harness.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "agent/base/file_util.h"
#include "agent/config/config.h"

namespace fabric::bench {

AgentHarness::AgentHarness() : dir_("fbench") {}

AgentHarness::~AgentHarness() {
  if (agent_) agent_->Stop();
  agent_.reset();
  if (kubelet_) kubelet_->Stop();
}

absl::Status AgentHarness::Start(AgentOptions options) {
  kubelet_ = std::make_unique<sim::KubeletSim>(dir_.path());
  if (absl::Status s = kubelet_->Start(); !s.ok()) return s;
  options.paths.kubelet_root = dir_.path();
  options.registration = RegistrationMode::kKubelet;
  agent_ = std::make_unique<Agent>(options);
  if (absl::Status s = agent_->Start(); !s.ok()) return s;
  const bool ready = kubelet_->WaitFor(
      [&] {
        auto resources = kubelet_->Resources();
        if (resources.size() < static_cast<size_t>(kDefaultPools)) return false;
        for (const auto& r : resources) {
          if (kubelet_->ListAndWatchMessages(r) == 0) return false;
        }
        return true;
      },
      absl::Seconds(30));
  if (!ready) return absl::DeadlineExceededError("pools did not register within 30 s");
  return absl::OkStatus();
}

std::string AgentHarness::PoolSocket(const std::string& resource) const {
  PoolConfig p;
  p.name = resource;
  return absl::StrCat(dir_.path(), "/device-plugins/", p.SocketName());
}

std::string SampleNodeDir(const BenchOptions& o, const std::string& node) {
  const std::string generated = o.generated_nodes + "/" + node;
  if (!o.generated_nodes.empty() && IsDirectory(generated + "/sys")) return generated;
  return o.testdata + "/nodes/" + node;
}

AgentOptions SampleNodeOptions(const BenchOptions& bench, const std::string& node) {
  const std::string dir = SampleNodeDir(bench, node);
  AgentOptions o;
  o.paths.sysfs_root = dir + "/sys";
  o.paths.dev_root = dir + "/dev";
  return o;
}

std::shared_ptr<grpc::Channel> UnixChannel(const std::string& socket_path) {
  grpc::ChannelArguments args;
  // One connection per channel, not shared with other channels to the same
  // target: the floor and the agent each get their own.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel("unix:" + socket_path, grpc::InsecureChannelCredentials(), args);
}

std::unique_ptr<grpc::Server> ServeOnUnixSocket(grpc::Service* service,
                                                const std::string& socket_path) {
  unlink(socket_path.c_str());
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket_path, grpc::InsecureServerCredentials());
  builder.RegisterService(service);
  return builder.BuildAndStart();
}

}  // namespace fabric::bench
