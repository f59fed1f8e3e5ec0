// The fabric-cni plugin's logic, separate from main() so it is testable: one
// invocation in (environment + stdin), what to print on stdout and the exit
// code out. Logs go to stderr (and the optional "logFile"), never stdout.
#ifndef FABRIC_PLUGIN_CNI_CNI_PLUGIN_H_
#define FABRIC_PLUGIN_CNI_CNI_PLUGIN_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "plugin/cni/agent_client.h"
#include "plugin/cni/cni_config.h"

namespace fabric::cni {

struct PluginOutput {
  int exit_code = 0;
  std::string stdout_data;  // the result, the VERSION reply or a CNI error object
};

using AgentClientFactory = std::function<std::unique_ptr<AgentClient>(
    const std::string& socket_path, std::chrono::milliseconds timeout)>;

PluginOutput RunPlugin(const EnvLookup& env, const std::string& stdin_data,
                       const AgentClientFactory& make_client);

// The CNI error code for an error the agent returned.
int CniCodeForAgentError(const absl::Status& status);

}  // namespace fabric::cni

#endif  // FABRIC_PLUGIN_CNI_CNI_PLUGIN_H_
