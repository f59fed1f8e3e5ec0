// An in-process Agent served to an in-process kubelet simulator, as in
// test/integration/agent_integration_test.cc, plus the small gRPC pieces the
// cases share (a trivial "floor" service, a channel to a unix socket).
#ifndef FABRIC_TOOLS_BENCH_AGENT_HARNESS_H_
#define FABRIC_TOOLS_BENCH_AGENT_HARNESS_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "agent/daemon/agent.h"
#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "tools/bench/bench_util.h"
#include "tools/bench/cases.h"
#include "tools/kubelet-sim/kubelet_sim.h"

namespace fabric::bench {

inline constexpr char kEfa[] = "vpc.amazonaws.com/efa";
inline constexpr char kRdma[] = "device.gpustack.ai/rdma";
inline constexpr int kDefaultPools = 4;

class AgentHarness {
 public:
  AgentHarness();
  ~AgentHarness();

  const std::string& root() const { return dir_.path(); }
  sim::KubeletSim& kubelet() { return *kubelet_; }
  Agent& agent() { return *agent_; }

  // Starts the simulator and an Agent with `options` (kubelet_root and the
  // registration mode are set here) and waits until every default pool has
  // registered and sent its first list.
  absl::Status Start(AgentOptions options);
  // The agent's socket for `resource` (kubelet registration mode).
  std::string PoolSocket(const std::string& resource) const;

 private:
  TempDir dir_;
  std::unique_ptr<sim::KubeletSim> kubelet_;
  std::unique_ptr<Agent> agent_;
};

// A sample node tree: the copy generated at build time if there is one
// (p5-128, too large to check in), else the one under <testdata>/nodes.
std::string SampleNodeDir(const BenchOptions& bench, const std::string& node);
// The same as agent paths.
AgentOptions SampleNodeOptions(const BenchOptions& bench, const std::string& node);

std::shared_ptr<grpc::Channel> UnixChannel(const std::string& socket_path);

// The floor: a DevicePlugin whose unary methods finish at once with an empty
// answer, on the same gRPC server API (callback) the agent uses.
class FloorService final : public v1beta1::DevicePlugin::CallbackService {
 public:
  grpc::ServerUnaryReactor* GetDevicePluginOptions(grpc::CallbackServerContext* ctx,
                                                   const v1beta1::Empty*,
                                                   v1beta1::DevicePluginOptions*) override {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

// Serves `service` on unix:`socket_path`; nullptr on failure.
std::unique_ptr<grpc::Server> ServeOnUnixSocket(grpc::Service* service,
                                                const std::string& socket_path);

}  // namespace fabric::bench

#endif  // FABRIC_TOOLS_BENCH_AGENT_HARNESS_H_
