// DraDevicePreparer: what NodePrepareResources means on this node. The
// claim's published device names resolve to pool units (agent/dra names);
// PoolRegistry::Claim applies the exclusive/shared rule exactly as Allocate
// does (a unit whose device is held through the other pool mode is refused,
// naming the holder) and records the grant, which withdraws the device from
// conflicting pools until the claim's hold is seen; the answer is the CDI
// names of the units' devices, from the same CDI specs the device-plugin
// mode writes (exactly the granted uverbs nodes, plus rdma_cm for RDMA).
// When the pools have env presets, the claim's engine environment
// (agent/engine_env) goes into a CDI entry of its own (ClaimEnvSpecs), named
// for every device of the claim.
#ifndef FABRIC_AGENT_DRA_FRONT_DRA_DEVICE_PREPARER_H_
#define FABRIC_AGENT_DRA_FRONT_DRA_DEVICE_PREPARER_H_

#include <functional>
#include <string>
#include <vector>

#include "agent/dra/dra_names.h"
#include "agent/dra_front/claim_env_specs.h"
#include "agent/engine_env/engine_env.h"
#include "agent/pools/pool_registry.h"
#include "plugin/dra/device_preparer.h"

namespace fabric::dra {

// The engine environment of a claim that spans `grants` (resource -> the
// devices granted through it), each pool's presets over its own devices. A
// variable two pools set differently is left out, with a note. Each pool's
// GidLedger records what its GID index variables named.
engine_env::EngineEnv ClaimEngineEnv(const PoolRegistry& registry,
                                     const std::map<std::string, std::vector<std::string>>& grants);

class DraDevicePreparer : public DevicePreparer {
 public:
  // `cdi_ready` says whether a CDI kind's spec is written (SideFileWriter).
  // `env_specs` (borrowed, may be null: no engine environment) writes the
  // claims' engine environment.
  DraDevicePreparer(PoolRegistry* registry, std::function<DraNames()> names,
                    std::function<absl::Status(const std::string& kind)> cdi_ready,
                    ClaimEnvSpecs* env_specs = nullptr);

  absl::StatusOr<std::vector<std::vector<std::string>>> Prepare(
      const std::string& claim_uid, const std::vector<std::string>& device_names) override;
  // The hold ends when the claim is deallocated (ClaimHolds sees it); the
  // pools' CDI specs stay, since they describe devices, not claims; the
  // claim's engine-environment entry goes.
  absl::Status Unprepare(const std::string& claim_uid) override;

 private:
  PoolRegistry* const registry_;
  const std::function<DraNames()> names_;
  const std::function<absl::Status(const std::string&)> cdi_ready_;
  ClaimEnvSpecs* const env_specs_;
};

}  // namespace fabric::dra

#endif  // FABRIC_AGENT_DRA_FRONT_DRA_DEVICE_PREPARER_H_
