// CniAgentServer: serves fabric.agent.v1.CniAgent (CniService) on a local unix
// socket for the fabric-cni plugin. The socket's directory is created (0700)
// if missing and the socket is chmod 0600: only root (the runtime running the
// plugin) may talk to it.
#ifndef FABRIC_AGENT_CNI_SERVICE_CNI_AGENT_SERVER_H_
#define FABRIC_AGENT_CNI_SERVICE_CNI_AGENT_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "agent/cni_service/cni_service.h"

namespace grpc {
class Server;
}

namespace fabric::cni_service {

// The agent's --agent-socket default; fabric-cni's "agentSocket" default
// (plugin/cni/cni_config.h) is the same path.
inline constexpr char kDefaultAgentSocketPath[] = "/var/run/fabric-agent/agent.sock";

class CniAgentServer {
 public:
  explicit CniAgentServer(CniService* service);
  ~CniAgentServer();

  // Serves on `socket_path` (a stale socket there is replaced).
  absl::Status Start(const std::string& socket_path);
  void Stop();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<grpc::Server> server_;
  std::string socket_path_;
};

}  // namespace fabric::cni_service

#endif  // FABRIC_AGENT_CNI_SERVICE_CNI_AGENT_SERVER_H_
