// What the sampler records each period: the one read of every counter file,
// the fabric resources each Pod's processes own, and each Pod's own network
// bytes. /metrics, health and the transport verdicts (agent/observe) read
// these; nothing else reads counter files.
#ifndef FABRIC_AGENT_SAMPLER_SAMPLE_H_
#define FABRIC_AGENT_SAMPLER_SAMPLE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "agent/model/device.h"
#include "agent/sampler/counter_reader.h"

namespace fabric::sampler {

// Every counter of one device as read at one instant (for /metrics).
struct DeviceCounters {
  std::string device;
  std::vector<CounterValue> hw;   // hw_counters, device-level and per port
  std::vector<CounterValue> pma;  // IB PMA counters (port_*_data in 4-octet units)
};

// The fabric traffic of one device: cumulative totals taken from its
// counters. Bytes where the device counts bytes (EFA tx_bytes/rx_bytes, else
// the sum of the PMA data counters x 4); packets where it counts packets
// (rxe sent_pkts/rcvd_pkts, EFA tx_pkts/rx_pkts, PMA packets).
struct DeviceTraffic {
  std::string device;
  DeviceKind kind = DeviceKind::kRdma;
  bool readable = false;
  std::string error;                // why not readable
  std::optional<uint64_t> bytes;    // tx + rx
  std::optional<uint64_t> packets;  // tx + rx
  // EFA's split, where present: rdma_read_bytes, rdma_read_resp_bytes,
  // rdma_write_bytes, rdma_write_recv_bytes, send_bytes, recv_bytes.
  std::map<std::string, uint64_t> split;
};

// Fabric resources owned on one device.
struct Owned {
  uint32_t qp = 0, cq = 0, mr = 0, pd = 0;
  uint64_t mr_bytes = 0;
  bool any() const { return qp + cq + mr + pd > 0; }
  bool operator==(const Owned&) const = default;
};

// What one container's processes own on one device.
struct ContainerOwned {
  std::string pod_uid;
  std::string container_id;
  std::string device;
  Owned owned;
  std::vector<uint32_t> pids;
};

// What a process outside every Pod owns on one device (a host process, a
// hostPID tool); kernel-owned resources are counted per device apart.
struct HostOwned {
  uint32_t pid = 0;
  std::string comm;
  std::string device;
  Owned owned;
};

// A Pod's own network namespace, read through one of its processes.
struct PodNet {
  std::string pod_uid;
  uint32_t pid = 0;           // the process it was read through
  bool host_network = false;  // the Pod shares the host netns: no own bytes
  // The netns was told: its bytes were read, or it is the host's
  // (host_network, readable, bytes 0). False: `error` says why.
  bool readable = false;
  std::string error;
  uint64_t rx_bytes = 0, tx_bytes = 0;
};

// A Pod's names as its runtime records them (when the runtime's state
// directory is readable), by Pod UID.
struct PodNames {
  std::string ns, pod;
  std::map<std::string, std::string> containers;  // container ID -> name
};

// A device granted to a container, as the kubelet's view held it.
struct Grant {
  PodDeviceHold hold;
  bool exclusive = false;  // from an exclusive pool
};

struct Sample {
  uint64_t seq = 0;
  absl::Time mono;  // MonotonicNow() when taken: windows are measured on it
  absl::Time wall;  // absl::Now(), for the documents' real bounds

  // Every live device's counters: in the newest sample only (the ring's
  // older samples drop them; windows use `traffic`).
  std::vector<DeviceCounters> counters;
  std::vector<DeviceTraffic> traffic;  // every live device

  bool resources_ok = false;
  std::string resources_error;
  std::vector<ContainerOwned> owned;
  std::vector<HostOwned> host_owned;
  std::map<std::string, Owned> kernel_owned;  // by device
  // Owners whose PID vanished before it could be identified.
  uint32_t unidentified_owners = 0;

  bool procs_ok = false;
  std::string procs_error;
  std::vector<PodNet> pods;               // every Pod with a live process
  std::map<std::string, PodNames> names;  // by Pod UID

  std::vector<Grant> grants;
  bool holds_complete = true;
  std::string holds_incomplete_reason;
};

using SamplePtr = std::shared_ptr<const Sample>;

}  // namespace fabric::sampler

#endif  // FABRIC_AGENT_SAMPLER_SAMPLE_H_
