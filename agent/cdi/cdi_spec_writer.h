// Owns the CDI spec files this agent writes, one per kind:
// <cdi_dir>/<vendor>-<class>.json. The kubelet replays a container's cached
// Allocate response (including its CDI names) for the Pod's whole life, across
// agent and kubelet restarts, so an entry stays in the spec while a live
// allocation references it, even after the device left the pool. The last
// written spec is mirrored in <state_dir>/cdi/ (durable, unlike /var/run/cdi)
// so a restarted agent, or one after a reboot, can still write those entries.
#ifndef FABRIC_AGENT_CDI_CDI_SPEC_WRITER_H_
#define FABRIC_AGENT_CDI_CDI_SPEC_WRITER_H_

#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "agent/cdi/cdi_spec.h"

namespace fabric::cdi {

class CdiSpecWriter {
 public:
  CdiSpecWriter(std::string cdi_dir, std::string state_dir);

  // Writes/updates the spec for `input.kind` atomically (temp file + rename in
  // the same directory). Entries for names in `still_referenced` that are no
  // longer in input.devices are kept with their last written nodes and env. If
  // nothing is left the spec file is removed (a CDI spec needs a device).
  // Unchanged content is not rewritten, so runtimes watching the directory see
  // no churn.
  absl::Status Update(const CdiSpecInput& input, const std::set<std::string>& still_referenced);

  // Removes the spec and its state copy (missing files are fine).
  absl::Status RemoveKind(const std::string& kind);

  // Kinds this writer (or an earlier agent with the same state dir) has
  // specs for, from the durable state copies: how a restarted agent finds the
  // specs of pools that left the config while it was down.
  std::vector<std::string> WrittenKinds() const;

  std::string SpecPath(const std::string& kind) const;
  std::string StatePath(const std::string& kind) const;

 private:
  // The devices last written for `kind`: the state copy, else the spec file
  // in cdi_dir, else none.
  std::vector<CdiDevice> LastWritten(const std::string& kind) const;
  absl::Status RemoveFiles(const std::string& kind);

  const std::string cdi_dir_;
  const std::string state_dir_;
  std::mutex mu_;
};

}  // namespace fabric::cdi

#endif  // FABRIC_AGENT_CDI_CDI_SPEC_WRITER_H_
