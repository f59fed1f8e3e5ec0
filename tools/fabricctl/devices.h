// `fabricctl devices`: the node's EFA/RDMA devices as the agent discovers
// them (agent/sysfs) and the resource pools (agent/config) each serves.
#ifndef FABRIC_TOOLS_FABRICCTL_DEVICES_H_
#define FABRIC_TOOLS_FABRICCTL_DEVICES_H_

#include <nlohmann/json.hpp>
#include <string>

#include "agent/config/config.h"
#include "agent/model/device.h"
#include "tools/fabricctl/cli_args.h"

namespace fabric::fabricctl {

// {"devices": [{name, kind, pci, numa_node, uverbs, ports, netdev, pools, ...}],
//  "rdma_cm": {...}|null, "pools": [{name, mode, devices}], "warnings": [...]}.
// Pure: no I/O.
nlohmann::ordered_json DevicesToJson(const NodeInventory& inventory, const Config& config,
                                     const std::string& config_source);
// One row per device, then the pool summary and warnings.
std::string DevicesToText(const NodeInventory& inventory, const Config& config,
                          const std::string& config_source);

// What an agent's /v1/node says of how it serves the pools: {"pools":
// [{resource, registration, registered}], "dra": {...}|null}. Tolerates any
// JSON (missing or mistyped members are left out).
nlohmann::ordered_json AgentServing(const nlohmann::json& node);
std::string AgentServingToText(const nlohmann::ordered_json& serving, const std::string& agent);

// Discovers, prints the table (or -o json) and returns the exit code.
int RunDevices(const DevicesOptions& options);

}  // namespace fabric::fabricctl

#endif  // FABRIC_TOOLS_FABRICCTL_DEVICES_H_
