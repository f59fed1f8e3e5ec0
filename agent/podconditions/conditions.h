// The two Pod conditions the agent keeps (docs/observe.md, "Pod conditions"),
// decided by one pure function of the transport verdicts (agent/observe), the
// Pod as the API server shows it (pod_info.h) and what the agent remembers of
// the Pod, at a given time. No I/O, no clock: the writer (writer.h) calls it
// after every sample and patches only what changed.
//
// fabric.gpustack.ai/FabricAttached: True (Attached) once every container
// with a fabric grant owns a QP that can move bytes on a granted device,
// and it stays True while that container instance runs; False (NotAttached)
// once a granted container has run for the attach grace without one;
// Unknown while that cannot be told yet (AttachPending, ContainerNotRunning,
// ObservationUnknown, NotObserved). A Pod of interest without any grant is
// False (NoGrant).
// fabric.gpustack.ai/Transport: the reason is the window's verdict (Efa,
// Rdma, Tcp, Idle, Unknown); status True for a fabric, False for tcp, and
// for Idle the last status before it.
#ifndef FABRIC_AGENT_PODCONDITIONS_CONDITIONS_H_
#define FABRIC_AGENT_PODCONDITIONS_CONDITIONS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/observe/transport.h"
#include "agent/podconditions/pod_info.h"

namespace fabric::podconditions {

inline constexpr absl::Duration kDefaultAttachGrace = absl::Seconds(60);
inline constexpr absl::Duration kMaxAttachGrace = absl::Hours(24);
inline constexpr size_t kMaxMessageBytes = 1024;

// Whether the container's processes own, on this device, a QP that can move
// bytes, on a device granted to it. The one place that says what "attached"
// means (issue 27 narrows it to QPs past RESET: sampler::Owned::qp_active).
bool AttachedOn(const observe::DeviceObservation& device);

// What the agent remembers of one container (by name) between evaluations.
struct ContainerMemory {
  std::string attached_id;       // the container instance that attached ("" none)
  std::string attached_message;  // what it owned when it attached
  std::string seen_running_id;   // the instance first seen running at...
  absl::Time seen_running_at = absl::InfinitePast();
  bool operator==(const ContainerMemory&) const = default;
};

struct PodMemory {
  std::map<std::string, ContainerMemory> containers;
  std::string transport_status;  // the Transport status before an Idle ("" none yet)
  bool fallback = false;         // the last non-idle, known verdict was a fallback
  bool operator==(const PodMemory&) const = default;
};

struct Desired {
  Condition attached;   // type kFabricAttached
  Condition transport;  // type kTransport
  // The Transport verdict is tcp while a fabric device is granted; and
  // whether the last one before this evaluation was (idle and unknown
  // verdicts in between do not count).
  bool fallback = false;
  bool fallback_before = false;
  // The first evidence lines behind the Transport verdict (for Events; they
  // carry amounts that change every sample, so conditions do not).
  std::string transport_evidence;
  PodMemory memory;
};

// The attach grace of a Pod: its fabric.gpustack.ai/attach-grace annotation
// ("90s", "2m", "1m30s") or `default_grace`. InvalidArgument naming the value
// when it does not parse, is negative or exceeds kMaxAttachGrace.
absl::StatusOr<absl::Duration> AttachGrace(const PodInfo& pod, absl::Duration default_grace);

// The conditions the Pod should carry now. `observation` is the Pod's entry of
// the newest window (null when the observer has none: NotObserved/Unknown).
Desired DesiredConditions(const PodInfo& pod, const observe::PodObservation* observation,
                          const PodMemory& memory, absl::Time now,
                          absl::Duration default_grace = kDefaultAttachGrace);

// `desired` with the lastTransitionTime it must carry: `current`'s when the
// status did not change, else `now`.
Condition WithTransitionTime(Condition desired, const Condition* current, absl::Time now);

// An event a change of the conditions calls for.
struct EventSpec {
  std::string reason;  // FabricAttached | FabricNotAttached | FabricFallback
  bool warning = false;
  std::string note;
};
// The events for going from `attached_before` (FabricAttached as last
// written; null: none) to `now`: FabricAttached when it turns Attached,
// FabricNotAttached when it turns NotAttached, FabricFallback when the
// Transport verdict turns tcp while a fabric is granted (now.fallback and not
// now.fallback_before).
std::vector<EventSpec> TransitionEvents(const Condition* attached_before, const Desired& now);

}  // namespace fabric::podconditions

#endif  // FABRIC_AGENT_PODCONDITIONS_CONDITIONS_H_
