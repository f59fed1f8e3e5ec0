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
#include <mutex>
#include <string>
#include <vector>

#include "agent/base/host_paths.h"
#include "agent/base/latency_histogram.h"
#include "agent/metrics/counter_reader.h"
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
  // The kubelet's view of who holds what (agent/holds).
  bool kubelet_view_complete = true;
  double podresources_list_failing_seconds = 0;
  bool kubelet_checkpoint_readable = false;
  uint64_t discovery_warnings = 0;
};

// Renders the Prometheus text format (version 0.0.4). Counter files are read
// at render time through descriptors it keeps open between renders
// (CounterReader), so a render costs one pread per counter and opens no file
// once the node's counter set is known. Renders are serialized.
class MetricsRenderer {
 public:
  // `files` is borrowed (nullptr: the real filesystem under paths.sysfs_root).
  explicit MetricsRenderer(HostPaths paths, CounterFiles* files = nullptr);
  std::string Render(const MetricsInput& in);

 private:
  std::mutex mu_;
  CounterReader counters_;
};

// One render that opens, reads and closes every counter file (fabricctl,
// tests). A long-lived caller keeps a MetricsRenderer instead.
std::string RenderMetrics(const MetricsInput& in, const HostPaths& paths);

}  // namespace fabric

#endif  // FABRIC_AGENT_METRICS_METRICS_H_
