// Prometheus exposition for the node: devices, ports, every hw counter, PMA
// data counters in bytes, pools, registration, Allocate latency, and the
// counters of each allocated device again under the Pod that holds it.
// Rendering is a pure function of a MetricsInput: the counters come from the
// sampler's latest sample (agent/sampler), so a scrape reads no file. It is
// golden-tested on fake trees.
#ifndef FABRIC_AGENT_METRICS_METRICS_H_
#define FABRIC_AGENT_METRICS_METRICS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/base/latency_histogram.h"
#include "agent/model/device.h"
#include "agent/sampler/sample.h"

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

// The sampler's own state (agent/sampler), at render time.
struct SamplerMetrics {
  uint64_t rounds = 0;
  double last_round_seconds = 0;
  double last_sample_age_seconds = 0;
  uint64_t unreadable_devices = 0;  // devices none of whose counters could be read
  uint64_t ring_bytes = 0;          // the memory of the ring the verdicts read
};

// A container's grant whose GID index variable (MC_GID_INDEX,
// NCCL_IB_GID_INDEX) was set at Allocate, per port: does it still name the GID
// it named then?
struct GidIndexStale {
  PodDeviceHold hold;
  int port = 0;
  bool stale = false;
};

struct MetricsInput {
  std::string version;
  std::vector<RdmaDevice> devices;             // live devices
  std::map<std::string, DeviceHealth> health;  // by device (incl. removed ones)
  std::vector<PoolMetrics> pools;
  std::vector<PodDeviceHold> holds;
  std::vector<GidIndexStale> gid_index_stale;
  uint64_t kubelet_restarts = 0;
  uint64_t podresources_errors = 0;
  // The kubelet's view of who holds what (agent/holds).
  bool kubelet_view_complete = true;
  double podresources_list_failing_seconds = 0;
  bool kubelet_checkpoint_readable = false;
  uint64_t discovery_warnings = 0;
  // The counters of the devices above, as the sampler read them last (null:
  // no counter series). A device missing from it (discovered after the
  // sample) gets its counter series from the next sample on.
  sampler::SamplePtr sample;
  std::optional<SamplerMetrics> sampler;  // nullopt: no sampler (one-shot renders)
};

// Renders the Prometheus text format (version 0.0.4). Reads no file: a
// one-shot caller without a sampler fills `sample` with
// sampler::SampleCountersOnce first.
std::string RenderMetrics(const MetricsInput& in);

}  // namespace fabric

#endif  // FABRIC_AGENT_METRICS_METRICS_H_
