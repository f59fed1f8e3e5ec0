// PoolSnapshot: one resource pool's advertised units at one moment, immutable
// and shared between the gRPC threads (ListAndWatch, Allocate) and the agent
// thread that builds the next one.
#ifndef FABRIC_AGENT_POOLS_POOL_SNAPSHOT_H_
#define FABRIC_AGENT_POOLS_POOL_SNAPSHOT_H_

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agent/config/config.h"
#include "agent/model/device.h"

namespace fabric {

// One advertised kubelet device: a whole device (exclusive pools) or one token
// of a device (shared pools).
struct PoolUnit {
  std::string id;
  std::string device;  // the RDMA device it grants
  int numa_node = -1;
  bool healthy = true;
  // Why a unit of a healthy device is Unhealthy: its device is held through a
  // conflicting pool ("withdrawn while device mlx5_0 is held through <pool> (exclusive)").
  std::string withdrawn;
};

struct PoolSnapshot {
  std::string resource;
  PoolMode mode = PoolMode::kExclusive;
  std::vector<PoolUnit> units;                 // in advertisement order
  std::map<std::string, size_t> unit_index;    // id -> position in units
  std::map<std::string, RdmaDevice> devices;   // name -> device (incl. removed ones)
  std::map<std::string, DeviceHealth> health;  // name -> health
  std::optional<CharDevice> rdma_cm;
  // Allocate also names CDI devices "<cdi_kind>=<device>" when set.
  std::string cdi_kind;
  // The pool's env presets: a grant also carries the engine variables
  // (agent/engine_env), computed from `devices` (their GID tables included).
  std::vector<EnvPreset> env;

  const PoolUnit* FindUnit(const std::string& id) const;
  size_t HealthyCount() const;
};

// Inputs for building a snapshot. `devices` are the devices the pool selects,
// including ones that disappeared but must stay listed (Unhealthy). Unit IDs in
// `withdrawn` are advertised Unhealthy (conflict with the other pool mode), the
// value saying why.
struct SnapshotInputs {
  const PoolConfig* pool = nullptr;
  std::vector<RdmaDevice> devices;
  std::map<std::string, DeviceHealth> health;
  std::optional<CharDevice> rdma_cm;
  std::map<std::string, std::string> withdrawn;
  std::string cdi_kind;
};

std::shared_ptr<const PoolSnapshot> BuildSnapshot(const SnapshotInputs& in);

// Token ID of a shared pool: "<device>.t<NN>" (zero-padded to the width of
// tokens_per_device - 1) so that the ID names its device.
std::string TokenId(const std::string& device, int index, int tokens_per_device);

}  // namespace fabric

#endif  // FABRIC_AGENT_POOLS_POOL_SNAPSHOT_H_
