// AgentClient: how fabric-cni talks to the fabric agent (fabric.agent.v1
// over the agent's unix socket). An interface so plugin logic is testable.
#ifndef FABRIC_PLUGIN_CNI_AGENT_CLIENT_H_
#define FABRIC_PLUGIN_CNI_AGENT_CLIENT_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "fabric/agent/v1/agent.pb.h"

namespace fabric::cni {

namespace agentpb = ::fabric::agent::v1;

class AgentClient {
 public:
  virtual ~AgentClient() = default;
  // Agent-side errors keep their absl code; transport failures (agent not
  // running, socket missing) are kUnavailable/kDeadlineExceeded and set
  // last_failure_unreachable().
  virtual absl::StatusOr<agentpb::CniResponse> Add(const agentpb::CniRequest& req) = 0;
  virtual absl::StatusOr<agentpb::CniResponse> Del(const agentpb::CniRequest& req) = 0;
  virtual absl::StatusOr<agentpb::CniResponse> Check(const agentpb::CniRequest& req) = 0;
  virtual absl::StatusOr<agentpb::GcResponse> Gc(const agentpb::GcRequest& req) = 0;
  virtual absl::StatusOr<agentpb::StatusResponse> Status() = 0;
  // True if the last failure was a transport failure (agent unreachable).
  virtual bool last_failure_unreachable() const = 0;
};

std::unique_ptr<AgentClient> NewGrpcAgentClient(const std::string& socket_path,
                                                std::chrono::milliseconds timeout);

}  // namespace fabric::cni

#endif  // FABRIC_PLUGIN_CNI_AGENT_CLIENT_H_
