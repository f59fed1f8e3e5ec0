// The engine environment of a grant: the variables that point Mooncake, NCCL,
// UCX and libfabric at exactly the granted devices, per the pool's `env:`
// presets (agent/config). Pure: Allocate (device-plugin mode) and the DRA
// prepare compute it from a pool snapshot, whose devices carry the GID tables
// the inventory keeps current, so no file is read on the way.
//
//   mooncake        MOONCAKE_DEVICE=<dev>,...  MC_MS_FILTERS=<dev>,...  MC_GID_INDEX=<n>
//   nccl            NCCL_IB_HCA==<dev>:<port>,... (non-EFA devices)
//   nccl-gid-index  NCCL_IB_GID_INDEX=<n> (the non-EFA ports')
//   ucx             UCX_NET_DEVICES=<dev>:<port>,...
//   libfabric       FI_PROVIDER=efa (EFA grants)
//
// <n> is the index of the RoCE v2 IPv4 GID of the granted ports' own netdevs,
// set only when every port it applies to has one and they agree (agent/sysfs/gid_table).
// `nccl` leaves NCCL_IB_GID_INDEX out: NCCL 2.21+ selects the RoCE v2 IPv4
// GID itself, from the live table, honouring NCCL_IB_ADDR_FAMILY and
// NCCL_IB_ADDR_RANGE, which a set index turns off (docs/configuration.md).
// MC_GID_INDEX covers every port, EFA ones too: Mooncake opens every device
// it is given. NCCL_IB_GID_INDEX covers the non-EFA ports only, the ones
// NCCL_IB_HCA names. docs/configuration.md says which engine version each
// variable was checked against.
#ifndef FABRIC_AGENT_ENGINE_ENV_ENGINE_ENV_H_
#define FABRIC_AGENT_ENGINE_ENV_ENGINE_ENV_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/config/config.h"
#include "agent/engine_env/gid_ledger.h"
#include "agent/model/device.h"
#include "agent/sysfs/gid_table.h"

namespace fabric::engine_env {

// One granted port's RoCE v2 IPv4 GID (or why it has none).
struct PortGid {
  std::string device;
  int port = 0;
  gid::RoceV2Ipv4 choice;
};
// Every port of `devices` (the EFA ones left out with `skip_efa`).
std::vector<PortGid> PortGids(const std::vector<const RdmaDevice*>& devices, bool skip_efa = false);

// The GID index every one of `gids` agrees on, or why there is none:
// "rxe0 port 1: index 1, rxe1 port 1: index 3 (devices disagree)".
struct GidAgreement {
  std::optional<int> index;
  std::string reason;
};
GidAgreement AgreeOnGidIndex(const std::vector<PortGid>& gids);

struct EngineEnv {
  std::vector<std::pair<std::string, std::string>> vars;  // in a fixed order
  // Why a preset's variable was left out, one line each ("MC_GID_INDEX not
  // set: ..."), for the agent's log.
  std::vector<std::string> notes;
  // Per port, the GID the index variables named (GidLedger::Record).
  std::vector<GivenGid> given;
};

// `devices` in grant order, each once. No presets: nothing.
EngineEnv ForGrant(const std::vector<EnvPreset>& presets,
                   const std::vector<const RdmaDevice*>& devices);

}  // namespace fabric::engine_env

#endif  // FABRIC_AGENT_ENGINE_ENV_ENGINE_ENV_H_
