// Agent configuration: the resource pools to serve and how devices are
// selected for them. Loaded from YAML or JSON (--config); validated strictly
// so that a typo is an error naming the key, never a silently ignored setting.
#ifndef FABRIC_AGENT_CONFIG_CONFIG_H_
#define FABRIC_AGENT_CONFIG_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/model/device.h"

namespace fabric {

enum class PoolMode {
  kExclusive,  // one device per allocation unit
  kShared,     // tokens_per_device units per device
};
std::string PoolModeName(PoolMode m);

// Which devices a pool takes. Fields are ANDed; values within a list are ORed;
// an empty list does not constrain. Name/address fields accept shell globs.
struct Selector {
  std::vector<DeviceKind> kinds;
  std::vector<uint32_t> vendors;
  std::vector<uint32_t> device_ids;
  std::vector<std::string> drivers;
  std::vector<std::string> ibdev_names;
  std::vector<std::string> netdev_names;
  std::vector<std::string> link_types;
  std::vector<std::string> pci_addresses;
  std::optional<bool> is_vf;    // SR-IOV virtual function
  std::optional<bool> has_vfs;  // a PF with VFs enabled

  bool Matches(const RdmaDevice& dev) const;
};

// EFA ports always read ACTIVE, so EFA health comes from error counters.
struct EfaHealthRule {
  struct Counter {
    std::string name;        // a device-level or port-level hw_counters file
    uint64_t threshold = 1;  // growth per check interval that marks Unhealthy
  };
  std::vector<Counter> error_counters;
  int64_t check_interval_ms = 1000;
  // Healthy again after this long without a growth at or above threshold.
  int64_t quiet_period_ms = 60000;
};

struct HealthConfig {
  int64_t poll_interval_ms = 200;    // sysfs poll period for port state and counters
  int64_t port_hold_down_ms = 2000;  // a port must stay up this long before Healthy again
  EfaHealthRule efa;
};

// Environment presets: which engines' variables a grant of the pool carries,
// pointing them at exactly the granted devices (agent/engine_env).
// kNcclGidIndex adds NCCL_IB_GID_INDEX, which `nccl` leaves to NCCL itself.
enum class EnvPreset { kMooncake, kNccl, kNcclGidIndex, kUcx, kLibfabric };
// "mooncake" | "nccl" | "nccl-gid-index" | "ucx" | "libfabric"
std::string EnvPresetName(EnvPreset p);

struct PoolConfig {
  std::string name;  // extended resource name, e.g. "vpc.amazonaws.com/efa"
  PoolMode mode = PoolMode::kExclusive;
  int tokens_per_device = 64;  // shared pools only
  Selector selector;
  // `env:` in the config, in a fixed order without repeats; empty (the
  // default) adds no engine variable, so existing Pods see no change.
  std::vector<EnvPreset> env = {};
  // Socket file name for this pool, derived from the resource name.
  std::string SocketName() const;
};

struct Config {
  std::vector<PoolConfig> pools;
  HealthConfig health;
  const PoolConfig* FindPool(const std::string& name) const;
};

// The pools the GPUStack operator requests, used when no --config is given:
// vpc.amazonaws.com/efa (exclusive, every EFA), device.gpustack.ai/rdma
// (exclusive, non-EFA, no VFs, no PFs with VFs), device.gpustack.ai/rdma.shared
// (same devices, 64 tokens each), device.gpustack.ai/rdma.partitioned (VFs).
Config DefaultConfig();

// Parses YAML or JSON text. `source` names the file in error messages.
// Returns kInvalidArgument naming the offending key.
absl::StatusOr<Config> ParseConfig(const std::string& text, const std::string& source);
absl::StatusOr<Config> LoadConfigFile(const std::string& path);

// The kubelet's IsExtendedResourceName rules (see protocols.md §2.1).
absl::Status ValidateResourceName(const std::string& name);

// Names of the pools whose selector takes `dev`, in config order.
std::vector<std::string> PoolsSelecting(const Config& config, const RdmaDevice& dev);

}  // namespace fabric

#endif  // FABRIC_AGENT_CONFIG_CONFIG_H_
