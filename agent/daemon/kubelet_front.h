// KubeletFront: how the node's pools reach the kubelet, and how the agent
// learns who holds which device. Two exist: the device-plugin API with the
// PodResources holds loop (fabric-agent, DevicePluginFront) and DRA with
// ResourceSlices and allocated ResourceClaims (fabric-dra). Everything else
// (discovery, health, pools, CDI, sampler, metrics) is the same code in both;
// a device is served by one front only, since one process runs one front.
#ifndef FABRIC_AGENT_DAEMON_KUBELET_FRONT_H_
#define FABRIC_AGENT_DAEMON_KUBELET_FRONT_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "agent/holds/holds_watcher.h"
#include "agent/pools/pool_state.h"
#include "agent/sampler/sampler.h"
#include "agent/status/node_status.h"

namespace fabric {

class KubeletFront {
 public:
  virtual ~KubeletFront() = default;

  // A pool of the config, before or after Start.
  virtual absl::Status AddPool(std::shared_ptr<PoolState> pool) = 0;
  virtual void RemovePool(const std::string& resource) = 0;

  // One round of holds now, before anything is served: after an agent
  // restart a held device is withdrawn from conflicting pools from the first
  // advertisement on.
  virtual void RefreshHolds() = 0;
  // An Allocate/Prepare granted something: look at the holds again soon.
  virtual void OnGrant() = 0;

  virtual absl::Status Start() = 0;
  virtual void Stop() = 0;

  // Whether the holds view is complete, for the observer's verdicts.
  virtual sampler::HoldsState HoldsState() const = 0;
  virtual holds::HoldsStatus holds_status() const = 0;
  // Registrations, kubelet restarts and the holds view for /v1/node and /metrics.
  virtual void FillStatus(status::StatusInput* in) const = 0;
  // Empty when this front is ready (never blocks: /readyz runs on the HTTP loop).
  virtual std::string NotReadyReason() const = 0;
  // Front-specific series appended to /metrics (may be empty).
  virtual std::string MetricsText() const { return ""; }
};

}  // namespace fabric

#endif  // FABRIC_AGENT_DAEMON_KUBELET_FRONT_H_
