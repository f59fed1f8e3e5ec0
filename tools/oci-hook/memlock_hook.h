// fabric-memlock-hook: an OCI hook (createRuntime or prestart) that raises the
// RLIMIT_MEMLOCK of a container's process so RDMA memory registration works
// without adding IPC_LOCK/SYS_RESOURCE to the Pod.
//
// The hook runs on the host, from the host's filesystem, outside our image, so
// the binary is linked fully static and this code uses only the C++ standard
// library and header-only nlohmann_json (no absl/fmt shared libraries): errors
// are returned as HookResult instead of absl::Status.
#ifndef FABRIC_TOOLS_OCI_HOOK_MEMLOCK_HOOK_H_
#define FABRIC_TOOLS_OCI_HOOK_MEMLOCK_HOOK_H_

#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fabric::memlock_hook {

// A value or an error message (a stand-in for absl::StatusOr; see above).
template <typename T>
struct HookResult {
  std::optional<T> value;
  std::string error;
  bool ok() const { return value.has_value(); }
  static HookResult Ok(T v) { return {std::move(v), ""}; }
  static HookResult Err(std::string e) { return {std::nullopt, std::move(e)}; }
};

struct Options {
  rlim_t memlock = RLIM_INFINITY;  // Target for both soft and hard limits.
  // When the hard limit cannot be raised (no CAP_SYS_RESOURCE), raise the soft
  // limit as far as the hard limit allows and succeed instead of failing.
  bool best_effort = false;
};

// "unlimited" | "infinity" | "-1" | <bytes> | <n>Ki | <n>Mi | <n>Gi | <n>Ti.
HookResult<rlim_t> ParseMemlock(const std::string& text);

// argv[1..]: --memlock=VALUE (default unlimited), --best-effort.
HookResult<Options> ParseArgs(const std::vector<std::string>& args);

// The part of the OCI state (runtime-spec "state") the hook needs.
struct ContainerState {
  std::string id;
  std::string status;
  pid_t pid = 0;
};
HookResult<ContainerState> ParseState(const std::string& json_text);

// "unlimited" or the exact byte count with a binary suffix when it divides.
std::string FormatLimit(rlim_t v);

// The limits to set: never lowers either value (a runtime that already grants
// more keeps it). Equal to `current` when nothing needs to change.
struct rlimit TargetLimits(const struct rlimit& current, rlim_t want);

// Raises RLIMIT_MEMLOCK of `pid` per `opts`. Returns a human-readable summary
// on success, or an error naming the pid, the limits and (for EPERM on the hard
// limit) the missing CAP_SYS_RESOURCE.
HookResult<std::string> RaiseMemlock(pid_t pid, const Options& opts);

// True if this process has CAP_SYS_RESOURCE in its effective set.
bool HaveCapSysResource();

}  // namespace fabric::memlock_hook

#endif  // FABRIC_TOOLS_OCI_HOOK_MEMLOCK_HOOK_H_
