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
#include <set>
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
  // QPs that can move bytes: connected or ready (restrack::QpCanMoveBytes),
  // and no part of the RDMA stack itself (restrack::IsStackInternalQp). Only
  // these make their owner a user of the fabric: a PD, CQ or MR moves
  // nothing, and a QP in RESET is a library's probe (libfabric's fi_getinfo).
  uint32_t qp_active = 0;
  // Summed MR lengths; saturates at UINT64_MAX (an implicit ODP MR has
  // length UINT64_MAX: the whole address space).
  uint64_t mr_bytes = 0;
  // Of the above, those whose creating thread had exited (the kernel names
  // no owner), booked to the owner of their protection domain or device
  // context (restrack::RdmaResource::pdn, ctxn).
  uint32_t adopted = 0;
  bool any() const { return qp + cq + mr + pd > 0; }
  bool active() const { return qp_active > 0; }
  bool operator==(const Owned&) const = default;
};

// What one container's processes own on one device.
struct ContainerOwned {
  std::string pod_uid;
  std::string container_id;
  std::string device;
  Owned owned;
  std::vector<uint32_t> pids;  // processes (thread group IDs), not threads
};

// What a process outside every Pod owns on one device (a host process, a
// hostPID tool).
struct HostOwned {
  uint32_t pid = 0;  // the process (thread group), not the creating thread
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
  // The containers with a live process (sandbox included), sorted.
  std::vector<std::string> container_ids;
};

// A Pod's names as its runtime records them (when the runtime's state
// directory is readable), by Pod UID.
struct PodNames {
  std::string ns, pod;
  std::map<std::string, std::string> containers;  // container ID -> name
  std::set<std::string> sandboxes;                // the Pod's pause container(s)
};

// A device granted to a container, as the kubelet's view held it.
struct Grant {
  PodDeviceHold hold;
  bool exclusive = false;  // from an exclusive pool
  // Why the GID index this grant's engine variables carried no longer names
  // its GID (engine_env::WhyGone); "" when it still does, or none was given.
  std::string gid_gone;
  bool operator==(const Grant&) const = default;
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
  // Devices whose resource dump failed this round, with why: who owns what
  // there is unknown (every other device's resources are here).
  std::map<std::string, std::string> resources_failed;
  std::vector<ContainerOwned> owned;
  std::vector<HostOwned> host_owned;
  // Kernel-owned resources by device, then owner (kern_name: "ib_core",
  // "ib_ipoib", "rdma_cm" for a kernel ULP such as NFS/RDMA or iSER).
  std::map<std::string, std::map<std::string, Owned>> kernel_owned;
  // User resources whose owner is not known, by device: pid 0 without a
  // kern_name (the kernel names a resource's creating thread, which may have
  // exited, or be outside the agent's PID namespace), and owners that exited
  // or could not be read before they were identified; in each case only when
  // neither the resource's PD nor its device context has an owner that can be
  // identified either.
  std::map<std::string, Owned> unattributed;
  uint32_t owners_exited = 0;      // gone before they could be identified
  uint32_t owners_unreadable = 0;  // their /proc files could not be read
  std::string owner_error;         // the first such read error

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
