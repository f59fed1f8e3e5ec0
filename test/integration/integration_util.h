// What the agent integration tests share: the resource names, an agent on a
// checked-in sample node, and "the kubelet simulator has every pool".
#ifndef FABRIC_TEST_INTEGRATION_INTEGRATION_UTIL_H_
#define FABRIC_TEST_INTEGRATION_INTEGRATION_UTIL_H_

#include <string>

#include "agent/daemon/agent.h"
#include "test/testing/test_dirs.h"
#include "tools/kubelet-sim/kubelet_sim.h"

namespace fabric::integration {

inline constexpr char kEfa[] = "vpc.amazonaws.com/efa";
inline constexpr char kRdma[] = "device.gpustack.ai/rdma";
inline constexpr char kShared[] = "device.gpustack.ai/rdma.shared";
inline constexpr char kPartitioned[] = "device.gpustack.ai/rdma.partitioned";

// The agent on test/testdata/nodes/<node>, registering in classic mode with
// the kubelet under `kubelet_root`.
inline AgentOptions SampleNodeOptions(const std::string& node, const std::string& kubelet_root) {
  const std::string tree = testing::TestDataDir() + "/nodes/" + node;
  AgentOptions o;
  o.paths.sysfs_root = tree + "/sys";
  o.paths.dev_root = tree + "/dev";
  o.paths.kubelet_root = kubelet_root;
  o.registration = RegistrationMode::kKubelet;
  return o;
}

// Exactly `n` resources registered, each with its first ListAndWatch answer.
inline bool AllRegistered(const sim::KubeletSim& k, size_t n) {
  if (k.Resources().size() != n) return false;
  for (const auto& r : k.Resources()) {
    if (k.ListAndWatchMessages(r) == 0) return false;
  }
  return true;
}

}  // namespace fabric::integration

#endif  // FABRIC_TEST_INTEGRATION_INTEGRATION_UTIL_H_
