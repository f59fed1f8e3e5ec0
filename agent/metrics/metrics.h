// Prometheus exposition for the node: devices, ports, every hw counter, PMA
// data counters in bytes, pools, registration, Allocate latency, and the
// counters of each allocated device again under the Pod that holds it.
// Rendering is a pure function of a MetricsInput plus sysfs counter reads, so
// it is golden-tested on fake trees.
#ifndef FABRIC_AGENT_METRICS_METRICS_H_
#define FABRIC_AGENT_METRICS_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "agent/base/host_paths.h"
#include "agent/base/latency_histogram.h"
#include "agent/model/device.h"

namespace fabric {

struct PoolMetrics {
  std::string resource;
  std::string mode;  // exclusive | shared
  uint64_t units = 0;
  uint64_t healthy_units = 0;
  uint64_t allocated_units = 0;
  bool registered = false;
  std::string registration_mode;  // kubelet | watcher
  uint64_t allocate_ok = 0;
  uint64_t allocate_error = 0;
  LatencyHistogram::Snapshot allocate_latency;
};

struct MetricsInput {
  std::string version;
  std::vector<RdmaDevice> devices;             // live devices
  std::map<std::string, DeviceHealth> health;  // by device (incl. removed ones)
  std::vector<PoolMetrics> pools;
  std::vector<PodDeviceHold> holds;
  uint64_t kubelet_restarts = 0;
  uint64_t podresources_errors = 0;
  uint64_t discovery_warnings = 0;
};

// Renders the Prometheus text format (version 0.0.4). Counter files are read
// from paths.sysfs_root at render time.
std::string RenderMetrics(const MetricsInput& in, const HostPaths& paths);

// Label value escaping per the text format (\\, \", \n).
std::string EscapeLabel(const std::string& v);

}  // namespace fabric

#endif  // FABRIC_AGENT_METRICS_METRICS_H_
