// The doctor's wire formats. Both are versioned, bounded and checked field by
// field; anything that does not decode is garbage, counted and dropped.
//
// Control channel (TCP, one request and one answer per connection):
//   frame   = u32 big-endian payload length (<= kMaxControlFrame) + payload
//   payload = "FDOC" | u8 version | u8 type | body
//   Query (type 1): the asker's NodeInfo (so the answerer learns its endpoint
//   names and accepts its fabric probes); Info (type 2): the answerer's
//   NodeInfo; Error (type 3): u16 length + message (e.g. unsupported version).
//
// Fabric probe (one libfabric message, <= kMaxProbeMessage bytes):
//   "FDPB" | u8 version | u8 kind (1 probe, 2 reply) | u16 name length |
//   u64 nonce | sender endpoint name (<= kMaxEndpointName bytes)
#ifndef FABRIC_AGENT_DOCTOR_PROTOCOL_H_
#define FABRIC_AGENT_DOCTOR_PROTOCOL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fabric::doctor {

inline constexpr uint8_t kProtocolVersion = 1;
inline constexpr size_t kMaxControlFrame = 64 * 1024;
inline constexpr size_t kMaxDevices = 256;
inline constexpr size_t kMaxNameLength = 253;   // node / device / provider names
inline constexpr size_t kMaxEndpointName = 96;  // fi_getname (efa: 32, tcp/verbs: <= 28)
inline constexpr size_t kProbeHeader = 4 + 1 + 1 + 2 + 8;
inline constexpr size_t kMaxProbeMessage = kProbeHeader + kMaxEndpointName;

struct DeviceEndpoint {
  std::string device;    // "rdmap79s0", "mlx5_0"
  std::string provider;  // as opened: "efa", "verbs;ofi_rxm", "tcp;ofi_rxm"
  std::string name;      // raw fi_getname bytes
  bool operator==(const DeviceEndpoint&) const = default;
};

struct NodeInfo {
  std::string node;       // node name (NODE_NAME or hostname)
  uint64_t instance = 0;  // random per process: tells restarts apart
  std::vector<DeviceEndpoint> devices;
  bool operator==(const NodeInfo&) const = default;
};

enum class ControlType : uint8_t { kQuery = 1, kInfo = 2, kError = 3 };

struct ControlMessage {
  ControlType type = ControlType::kQuery;
  NodeInfo info;      // kQuery, kInfo
  std::string error;  // kError
};

// Payload only (no length prefix). Oversized fields, and names or error text
// that the decoder would refuse (see DecodeControl), are an InvalidArgument:
// we never send what a peer must reject.
absl::StatusOr<std::string> EncodeControl(const ControlMessage& m);
// A pure function (bytes in, message or error out; no I/O, no state), the
// entry point for the control-frame fuzzer. kInvalidArgument for garbage and
// for a node, device or provider name or error text that is not clean text
// (CheckExternalName: valid UTF-8, no control characters, <= kMaxNameLength
// bytes), so nothing a peer sends reaches JSON, Prometheus labels or logs
// unchecked; kFailedPrecondition for another version. Endpoint names are raw
// provider bytes and are only length-checked here (the prober checks them
// against the provider's exact address length).
absl::StatusOr<ControlMessage> DecodeControl(const std::string& payload);
// The counted reason for a DecodeControl error: "control_bad_name" (a name or
// error text that is not clean text), "control_version" (another version) or
// "control_garbage" (anything else).
std::string ControlRejectReason(const absl::Status& decode_error);
// The 4-byte length prefix + payload.
std::string Frame(const std::string& payload);

enum class ProbeKind : uint8_t { kProbe = 1, kReply = 2 };
struct ProbeMessage {
  ProbeKind kind = ProbeKind::kProbe;
  uint64_t nonce = 0;
  std::string sender;  // sender's endpoint name
  bool operator==(const ProbeMessage&) const = default;
};
// Writes into `out` (at least kMaxProbeMessage bytes); returns the length.
size_t EncodeProbe(const ProbeMessage& m, char* out);
// A pure function, the entry point for the probe-message fuzzer. The sender
// name is raw provider bytes (checked against the allow-list and the
// provider's address length by the prober, never rendered).
absl::StatusOr<ProbeMessage> DecodeProbe(const char* data, size_t len);

}  // namespace fabric::doctor

#endif  // FABRIC_AGENT_DOCTOR_PROTOCOL_H_
