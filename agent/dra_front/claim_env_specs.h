// ClaimEnvSpecs: the engine environment of each prepared claim as a CDI
// device of its own. CDI edits of a pool's devices are per device, and the
// runtime lets a later device's variable replace an earlier one's, so a
// variable that lists every device of a claim (MOONCAKE_DEVICE=a,b) or holds
// a value all of them must agree on (MC_GID_INDEX) can only live in an entry
// for the whole claim: kind <driver>/claim, device "claim-<uid>", in
// <cdi_dir>/<vendor>-claim-<uid>.json. Each file is mirrored in the state
// dir: the CDI dir is usually a tmpfs (/var/run/cdi), and after a reboot the
// kubelet re-prepares a claim from our checkpoint without a new Prepare,
// so Restore puts the lost files back at start.
#ifndef FABRIC_AGENT_DRA_FRONT_CLAIM_ENV_SPECS_H_
#define FABRIC_AGENT_DRA_FRONT_CLAIM_ENV_SPECS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fabric::dra {

class ClaimEnvSpecs {
 public:
  // `kind_vendor` is the driver name ("fabric.gpustack.ai").
  ClaimEnvSpecs(std::string cdi_dir, std::string state_dir, std::string kind_vendor);

  // Writes the claim's entry (atomically, mirror first) and returns its fully
  // qualified CDI name. Rewriting the same claim is idempotent.
  absl::StatusOr<std::string> Write(const std::string& claim_uid,
                                    const std::vector<std::pair<std::string, std::string>>& env);
  // Removes the claim's entry and its mirror; a claim without one is fine.
  absl::Status Remove(const std::string& claim_uid);
  // Copies back every mirrored entry missing from the CDI dir; returns how
  // many it restored.
  absl::StatusOr<int> Restore();

  std::string SpecPath(const std::string& claim_uid) const;

 private:
  std::string FileName(const std::string& claim_uid) const;
  const std::string cdi_dir_;
  const std::string state_dir_;
  const std::string vendor_;
};

}  // namespace fabric::dra

#endif  // FABRIC_AGENT_DRA_FRONT_CLAIM_ENV_SPECS_H_
