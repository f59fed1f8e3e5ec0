// CDI (Container Device Interface) spec rendering for the devices this agent
// serves. Inputs are plain structs so the daemon can fill them from its device
// pools; the output must load in the oldest CDI library we support (v0.5.4, the
// one bundled with containerd 1.7.0), so every spec carries the LOWEST
// cdiVersion its features need (see docs/cdi.md, "cdiVersion policy").
#ifndef FABRIC_AGENT_CDI_CDI_SPEC_H_
#define FABRIC_AGENT_CDI_CDI_SPEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fabric::cdi {

// Always a character device (uverbs, rdma_cm, umad): the spec carries type "c"
// and the numbers, so the runtime does not stat the host node.
struct DeviceNode {
  std::string path;       // Path inside the container, e.g. /dev/infiniband/uverbs0.
  std::string host_path;  // Host path; empty or == path is omitted from the spec
                          // (hostPath forces cdiVersion 0.5.0).
  uint32_t major = 0;
  uint32_t minor = 0;
  std::string permissions = "rw";  // Device-cgroup access, a subset of "rwm".
  // Mode of the node the runtime creates in the container. The OCI spec leaves
  // the default to the runtime (podman 4.3.1 + runc 1.1.5 used 0666, measured),
  // so it is explicit: non-root container users must be able to open the node.
  // 0 omits the field.
  uint32_t file_mode = 0666;
};

struct CdiDevice {
  std::string name;  // CDI device name (the part after '='), e.g. "rdmap79s0".
  std::vector<DeviceNode> nodes;
  // "K=V". The runtime applies the edits of each granted device in turn, and a
  // later variable REPLACES an earlier one of the same name (also one from the
  // Allocate response). So a key shared by several devices with different
  // values (e.g. an aggregated FABRIC_DEVICES=a,b list) ends up with the last
  // device's value: use per-device keys here, or leave aggregated variables to
  // the Allocate response only.
  std::vector<std::string> env;
};

// An OCI hook added to the spec-level containerEdits (so it runs once per
// container, however many devices of the kind it was granted).
struct HookConfig {
  std::string hook_name = "createRuntime";  // or "prestart" for older runtimes.
  std::string path;                         // Absolute path in the runtime's mount namespace.
  std::vector<std::string> args;            // Full argv, args[0] included.
  std::vector<std::string> env;             // "K=V"; usually empty.
};

// The hook entry for fabric-memlock-hook installed at `host_path`, raising
// RLIMIT_MEMLOCK to `limit` ("unlimited", bytes, or <n>Ki/Mi/Gi).
HookConfig MemlockHook(const std::string& host_path, const std::string& limit);

struct CdiSpecInput {
  std::string kind;  // "vendor/class", e.g. "vpc.amazonaws.com/efa".
  std::vector<CdiDevice> devices;
  std::vector<DeviceNode> common_nodes;    // Spec-level nodes (e.g. rdma_cm), applied once.
  std::optional<HookConfig> memlock_hook;  // Spec-level hook.
};

// Maps a kubelet resource name to a CDI kind the v0.5.x parser accepts: the
// domain becomes the vendor, and in the class every character other than
// [A-Za-z0-9_-] (notably '.', which needs cdiVersion 0.6.0) becomes '_'.
//   "device.gpustack.ai/rdma.shared" -> "device.gpustack.ai/rdma_shared"
//   "vpc.amazonaws.com/efa"          -> "vpc.amazonaws.com/efa"
// A resource without a domain gets the vendor "fabric.local". Validate the
// result with ValidateKind (a name that still cannot be fixed stays invalid).
std::string KindForResource(const std::string& resource);

// "vendor/class=name" (no validation).
std::string QualifiedName(const std::string& kind, const std::string& device);

// Parser rules (container-device-interface pkg/parser): kInvalidArgument
// naming the offending name and the rule it breaks.
absl::Status ValidateKind(const std::string& kind);
absl::Status ValidateDeviceName(const std::string& name);

// The lowest cdiVersion that loads `input` ("0.3.0", "0.5.0" or "0.6.0").
std::string MinimumVersion(const CdiSpecInput& input);

// The spec as JSON text, cdiVersion = MinimumVersion(input). kInvalidArgument
// for a bad kind/device name, duplicate device names, an empty device, an env
// entry without '=', bad permissions or a relative hook path.
absl::StatusOr<std::string> RenderSpec(const CdiSpecInput& input);

// Reads back a spec rendered by RenderSpec (devices, common nodes and hook).
// Used to recover the last written entries when the state file is gone.
absl::StatusOr<CdiSpecInput> ParseSpec(const std::string& json_text);

// File name used for a kind: "<vendor>-<class>.json" with '/' -> '_' (the CDI
// library's own convention).
std::string SpecFileName(const std::string& kind);

}  // namespace fabric::cdi

#endif  // FABRIC_AGENT_CDI_CDI_SPEC_H_
