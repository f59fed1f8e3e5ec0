// The transport verdict (issue 17): for every Pod of interest and each of its
// containers, which transport really carried its bytes over one window of the
// sampler's ring: efa, rdma, tcp (a fallback when a fabric was granted), idle
// or unknown (with why), the attribution of the fabric bytes and the evidence
// the verdict rests on.
//
// A pure function of the sampler's ring: no I/O, no clock. The stateful part
// (the last non-idle verdict kept across idle windows) is TransportObserver's.
#ifndef FABRIC_AGENT_OBSERVE_TRANSPORT_H_
#define FABRIC_AGENT_OBSERVE_TRANSPORT_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "agent/model/device.h"
#include "agent/sampler/sample.h"
#include "agent/sampler/sample_ring.h"

namespace fabric::observe {

enum class Verdict { kEfa, kRdma, kTcp, kIdle, kUnknown };
const char* VerdictName(Verdict v);  // "efa" | "rdma" | "tcp" | "idle" | "unknown"

// Whose bytes a device's counters are.
//  - exclusive: the container's grant of the device is from an exclusive pool;
//  - sole-owner: a shared device on which only this Pod owned a QP that can
//    move bytes in the window: no other Pod, host process, kernel ULP
//    (IPoIB, NFS/RDMA, iSER...) or owner that cannot be identified did;
//  - shared-ambiguous: someone else did too (the evidence names them); the
//    bytes are the device total, the Pods among them are the holders;
//  - per-process: per-QP/per-PID byte counters. Not produced today: no driver
//    offers them (EFA and mlx5 have none in sysfs; rxe's opt-in per-QP
//    counters count no bytes, fabric-facts.md restrack section). Kept so the
//    schema need not change when one does;
//  - none: the container owns no QP that can move bytes on the device (a PD,
//    CQ or MR moves nothing), so none of its bytes are attributed to it.
enum class Attribution { kNone, kExclusive, kSoleOwner, kSharedAmbiguous, kPerProcess };
const char* AttributionName(Attribution a);

inline constexpr uint64_t kDefaultFloorBytes = 1024 * 1024;
// Packet-only devices (rxe): the byte floor over 4096, a full-MTU packet.
inline constexpr uint64_t kBytesPerFloorPacket = 4096;
inline constexpr absl::Duration kMinWindow = absl::Seconds(15);
inline constexpr absl::Duration kMaxWindow = absl::Minutes(10);
inline constexpr absl::Duration kDefaultWindow = absl::Seconds(60);

struct TransportOptions {
  uint64_t floor_bytes = kDefaultFloorBytes;
  // 0: floor_bytes / kBytesPerFloorPacket (256 packets for 1 MiB).
  uint64_t floor_packets = 0;
  // A Pod asked for by name: evaluated even when it holds no grant and owns
  // no fabric resource (a Pod that mounts /dev/infiniband by hostPath), as
  // long as its runtime names it (Sample::names). Empty: Pods of interest only.
  std::string named_ns, named_pod;
  uint64_t PacketFloor() const {
    return floor_packets ? floor_packets
                         : std::max<uint64_t>(1, floor_bytes / kBytesPerFloorPacket);
  }
};

// "60s", "2m", "1m30s", "1h" (Go duration style; s, m, h and combinations) or
// a bare integer of seconds ("90"). InvalidArgument naming the value when it
// does not parse or lies outside kMinWindow..kMaxWindow.
absl::StatusOr<absl::Duration> ParseWindow(absl::string_view text);

// The samples a window really spans.
struct WindowBounds {
  absl::Duration requested;
  absl::Time start, end;  // wall times of the first and last sample used
  double seconds = 0;     // their distance on the monotonic clock
  size_t samples = 0;     // samples in [first, last]
  bool shorter = false;   // the ring does not reach back `requested`
};

struct DeviceObservation {
  std::string device;
  std::string resource;  // the grant's resource; "" when not granted
  DeviceKind kind = DeviceKind::kRdma;
  bool granted = false;
  sampler::Owned owned;                    // by the container, max per kind over the window
  std::vector<uint32_t> pids;              // the container's owning processes
  bool counts_packets = false;             // the device counts packets, not bytes (rxe)
  bool counters_known = false;             // both ends readable and no reset
  std::optional<uint64_t> fabric_bytes;    // device delta (null: packet-only or unknown)
  std::optional<uint64_t> fabric_packets;  // device delta (null: unknown)
  Attribution attribution = Attribution::kNone;
  std::vector<std::string> holders;  // every Pod ("ns/pod" or the UID) owning a moving QP here
};

struct ContainerObservation {
  std::string name;
  std::vector<std::string> container_ids;
  Verdict verdict = Verdict::kUnknown;
  std::string reason;  // why unknown; empty otherwise
  bool granted = false;
  bool fallback = false;  // tcp while a fabric device is granted
  Attribution attribution = Attribution::kNone;
  std::optional<uint64_t> fabric_bytes;    // attributable bytes; null when packet-only
  std::optional<uint64_t> fabric_packets;  // attributable packets of packet-only devices
  std::optional<uint64_t> other_bytes;     // the Pod's netns rx+tx; null: hostNetwork/unknown
  bool host_network = false;
  std::vector<DeviceObservation> devices;
  std::vector<std::string> evidence;
  // The last efa|rdma|tcp verdict of the observer's periodic window and the
  // end of that window: filled by TransportObserver, not by EvaluateWindow.
  std::optional<Verdict> last_non_idle;
  absl::Time last_non_idle_at;
};

struct PodObservation {
  std::string ns, pod, pod_uid;
  bool host_network = false;
  bool live = false;  // a process of the Pod is visible in the window's newest sample
  std::vector<ContainerObservation> containers;
};

struct WindowResult {
  WindowBounds window;
  uint64_t floor_bytes = 0, floor_packets = 0;
  std::vector<PodObservation> pods;  // by namespace, name, UID
};

// Evaluates the window ending at the ring's newest sample and starting at the
// newest sample taken at or before newest.mono - window (or the oldest one,
// with bounds.shorter).
WindowResult EvaluateWindow(const sampler::SampleRing& ring, absl::Duration window,
                            const TransportOptions& options = {});

// "9.1 MiB", "512 B"; "2,003" (for the evidence strings).
std::string HumanBytes(uint64_t bytes);
std::string HumanCount(uint64_t n);

}  // namespace fabric::observe

#endif  // FABRIC_AGENT_OBSERVE_TRANSPORT_H_
