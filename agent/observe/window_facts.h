// The three steps of a window's evaluation (transport.h EvaluateWindow):
//   1. Accumulate: what the window's samples say, per Pod, container and
//      device (grants, resources owned, the other users of each device, the
//      traffic deltas, the Pods' own network bytes, which containers run);
//   2. Attribute: whose a device's bytes are, for one container;
//   3. Decide: the container's verdict by the rules of docs/observe.md.
// Pure functions of the ring (sampler/sample_ring.h): no I/O, no clock.
// Internal to agent/observe.
#ifndef FABRIC_AGENT_OBSERVE_WINDOW_FACTS_H_
#define FABRIC_AGENT_OBSERVE_WINDOW_FACTS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/observe/transport.h"
#include "agent/sampler/sample.h"
#include "agent/sampler/sample_ring.h"

namespace fabric::observe::window {

// The samples of one window (their ring slots and headers, oldest first) and
// its real bounds.
struct Window {
  const sampler::SampleRing* ring = nullptr;
  std::vector<size_t> slots;
  std::vector<const sampler::SampleHeader*> headers;
  WindowBounds bounds;
  size_t size() const { return slots.size(); }
  uint64_t seq(size_t i) const { return headers[i]->seq; }
  uint64_t first_seq() const { return headers.front()->seq; }
  uint64_t newest_seq() const { return headers.back()->seq; }
};
Window Select(const sampler::SampleRing& ring, absl::Duration requested);

// One device's traffic over the window.
struct Delta {
  bool seen = false;  // listed in some sample (kind is known)
  DeviceKind kind = DeviceKind::kRdma;
  bool packets_only = false;
  bool known = false;
  std::optional<uint64_t> bytes, packets;
  std::string why;  // when !known
};

// Everyone but the Pods who used a device in the window: the most each
// owned at any sample.
struct HostUser {
  std::string comm;
  sampler::Owned owned;
};
struct DeviceUsers {
  std::set<std::string> pods;                    // Pod UIDs with a QP that can move bytes
  std::map<uint32_t, HostUser> hosts;            // by process
  std::map<std::string, sampler::Owned> kernel;  // by kern_name
  sampler::Owned unattributed;                   // owner not known (sample.h)
  std::string dump_failed;                       // why its dump failed in some sample; "" if never
};

// A container's liveness in the window's newest sample.
enum class Liveness {
  kRunning,     // a live process of the Pod is this container's
  kNotRunning,  // the runtime names every live container of the Pod: none is this one
  kUnknown,     // the runtime does not name them all
};

struct DeviceFacts {  // of one container
  std::string resource;
  bool granted = false;
  bool exclusive = false;
  std::string gid_gone;  // the grant's GID index no longer names its GID (sampler::Grant)
  sampler::Owned owned;  // the most of each kind at any sample
  std::set<uint32_t> pids;
};
struct ContainerFacts {
  std::set<std::string> ids;
  bool granted = false;
  bool init_container = false;  // every grant of it is an init container's
  Liveness liveness = Liveness::kUnknown;
  std::map<std::string, DeviceFacts> devices;  // by device
};

// The Pod's own network bytes over the window: the same for its containers.
struct PodNetFacts {
  bool visible = false;  // a process of the Pod in the newest sample
  bool host_network = false;
  std::optional<uint64_t> bytes;
  std::string why;  // when !bytes
};

struct PodFacts {
  std::string uid, ns, pod;
  std::map<std::string, ContainerFacts> containers;  // by name
  bool owns_any = false;
  PodNetFacts net;
};

struct Facts {
  Window window;
  std::string problem;  // why no container of the window gets a verdict; "" if none
  std::map<std::string, PodFacts> pods;      // by UID, or "name:ns/pod" when the UID is unknown
  std::map<std::string, DeviceUsers> users;  // by device
  std::map<std::string, Delta> deltas;       // by device, for every device asked
  uint32_t owners_exited = 0, owners_unreadable = 0;  // the most in any sample
  std::string owner_error;
};

// Step 1. `options.named_*` adds that Pod when the runtime names it.
Facts Accumulate(const sampler::SampleRing& ring, absl::Duration length,
                 const TransportOptions& options);

// The device's delta, computed once per window.
const Delta& DeltaOf(Facts& facts, const std::string& device);

// "ns/pod", or "uid <uid>".
std::string PodLabel(const Facts& facts, const std::string& uid);

// Steps 2 and 3: one container's observation.
ContainerObservation Evaluate(Facts& facts, const PodFacts& pod, const std::string& name,
                              const ContainerFacts& container, const TransportOptions& options);

// Text helpers shared by the steps.
std::string OwnedText(const sampler::Owned& o);
std::string Seconds(double s);

}  // namespace fabric::observe::window

#endif  // FABRIC_AGENT_OBSERVE_WINDOW_FACTS_H_
