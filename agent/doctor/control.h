// The doctor's control channel: a small TCP server that answers one Query
// with this node's endpoint names, and a client that queries many peers at
// once (non-blocking connects, one deadline for all). Frames are bounded
// (kMaxControlFrame), connections are bounded (max_connections) and each has
// a deadline, so a slow or hostile client costs at most one slot for a while.
#ifndef FABRIC_AGENT_DOCTOR_CONTROL_H_
#define FABRIC_AGENT_DOCTOR_CONTROL_H_

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/doctor/peers.h"
#include "agent/doctor/protocol.h"

namespace fabric::doctor {

class ControlServer {
 public:
  // `answer` returns our NodeInfo; `on_query` sees every decoded asker with
  // the connection's source address (numeric host, no port): what the
  // asker's introduction is bound to (FabricProber::AllowSenders).
  using OnQuery = std::function<void(const std::string& source, const NodeInfo& asker)>;
  ControlServer(std::function<NodeInfo()> answer, OnQuery on_query, size_t max_connections = 64,
                absl::Duration per_connection = absl::Seconds(2));
  ~ControlServer();
  absl::Status Start(const PeerAddress& listen);  // port 0: ephemeral (see port())
  void Stop();
  uint16_t port() const { return port_; }
  std::map<std::string, uint64_t> counters() const;

 private:
  void Run();
  void Count(const std::string& event);

  std::function<NodeInfo()> answer_;
  OnQuery on_query_;
  const size_t max_connections_;
  const absl::Duration per_connection_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  uint16_t port_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> counters_;
};

struct QueryResult {
  bool ok = false;
  NodeInfo info;
  // control_timeout, control_refused, control_garbage, control_version,
  // control_bad_name (a name or error text that is not clean text)
  std::string reason;
  std::string error;
};

// Sends `query` to every address; all in parallel, all done by `timeout`.
std::vector<QueryResult> QueryAll(const std::vector<PeerAddress>& peers, const NodeInfo& query,
                                  absl::Duration timeout);

}  // namespace fabric::doctor

#endif  // FABRIC_AGENT_DOCTOR_CONTROL_H_
