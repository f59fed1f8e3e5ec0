// RunAgent: the process lifecycle around Agent — signals (SIGTERM/SIGINT stop
// cleanly, SIGHUP reloads), config-file change detection, the health monitor
// and the HTTP endpoint.
#ifndef FABRIC_AGENT_DAEMON_AGENT_RUNNER_H_
#define FABRIC_AGENT_DAEMON_AGENT_RUNNER_H_

#include "agent/daemon/agent.h"

namespace fabric {

// Blocks until SIGTERM or SIGINT. Returns the process exit code: 0 after a
// clean stop, 2 for a bad config or flags, 1 for other start failures.
int RunAgent(const AgentOptions& options);

}  // namespace fabric

#endif  // FABRIC_AGENT_DAEMON_AGENT_RUNNER_H_
