// The agent's status views, built from one consistent copy of the pools
// (PoolRegistry::View) plus what the servers report about registration:
// the /metrics input, the /readyz reason and the /v1/node JSON. Pure
// functions: the HTTP thread calls them outside every lock Allocate takes.
#ifndef FABRIC_AGENT_STATUS_NODE_STATUS_H_
#define FABRIC_AGENT_STATUS_NODE_STATUS_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "agent/base/latency_histogram.h"
#include "agent/holds/holds_watcher.h"
#include "agent/metrics/metrics.h"
#include "agent/pools/pool_registry.h"

namespace fabric::status {

// One pool's registration with the kubelet, as the servers report it.
struct Registration {
  std::string resource;
  std::string socket;
  std::string mode;  // "kubelet" | "watcher"
  bool registered = false;
  std::string last_error;
};

// DRA mode (fabric-dra): what it publishes, watches and prepared.
struct DraStatus {
  std::string driver;
  std::string pool;  // the node name
  bool registered = false;
  bool slices_synced = false;
  size_t slices = 0;
  size_t devices = 0;
  int64_t generation = 0;
  uint64_t slice_sync_failures = 0;
  std::string slice_error;
  bool claims_listed = false;
  size_t claims = 0;  // allocated claims with a device of ours
  uint64_t claims_rejected = 0;
  uint64_t prepared_claims = 0;
  uint64_t prepare_calls = 0;
  uint64_t prepare_errors = 0;
  uint64_t unprepare_calls = 0;
  uint64_t unprepare_errors = 0;
  LatencyHistogram::Snapshot prepare_latency;
  std::string checkpoint_error;
};

struct StatusInput {
  std::string version;
  PoolRegistry::View pools;
  std::vector<Registration> registrations;
  uint64_t kubelet_restarts = 0;
  uint64_t podresources_errors = 0;
  holds::HoldsStatus kubelet_view;
  std::optional<DraStatus> dra;  // set by the DRA front only
};

// The fabric_dra_* series (empty without DRA).
std::string DraMetricsText(const StatusInput& in);

// The input of RenderMetrics (agent/metrics).
MetricsInput BuildMetricsInput(const StatusInput& in);

// Empty when every pool is registered, else "<resource> not registered[: <error>]; ...".
std::string NotReadyReason(const std::vector<Registration>& registrations);

// Why the agent is not ready, as reported by the threads that find out (the
// seam for readiness sources beyond registration, e.g. the PodResources
// watcher): each source Sets its reason when it learns something, and
// /readyz, answered on the HTTP server's event loop, only reads them. Both
// take one short lock and never wait on I/O. Thread-safe.
class ReadinessReasons {
 public:
  // Sets `source`'s reason; an empty `reason` clears it (ready, as far as
  // `source` knows).
  void Set(const std::string& source, std::string reason);
  // Every set reason, "; "-joined in source order; empty when none is set.
  std::string Join() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::string> reasons_;
};

// The /v1/node document: devices (present, health, ports, pools selecting
// them), rdma_cm, pools (units, healthy, allocated, withdrawn, pending
// grants, registration), allocations and discovery warnings.
std::string NodeJson(const StatusInput& in);

}  // namespace fabric::status

#endif  // FABRIC_AGENT_STATUS_NODE_STATUS_H_
