// `fabricctl observe`: the transport each container of a Pod really used, from
// the agent's /v1/pods (agent/observe), as one line per container or the
// agent's JSON document, with one exit code per verdict.
#ifndef FABRIC_TOOLS_FABRICCTL_OBSERVE_H_
#define FABRIC_TOOLS_FABRICCTL_OBSERVE_H_

#include <nlohmann/json.hpp>
#include <string>

#include "tools/fabricctl/cli_args.h"

namespace fabric::fabricctl {

// The exit code of one container object of a PodTransport document:
//   efa|rdma: 0, or kExitObserveMismatch when `expect` names the other;
//   tcp: kExitObserveFallback when a fabric was granted (fallback) or
//        `expect` is set, else 0;
//   idle: kExitObserveIdle; unknown (or anything else): kExitObserveUnknown.
int ContainerExitCode(const nlohmann::json& container, const std::string& expect);

// The worse of two observe exit codes: 20 > 23 > 22 > 21 > 0 (a fallback is
// the finding to act on first).
int WorseObserveCode(int a, int b);

// One line per container: "NS/POD CONTAINER VERDICT ATTRIBUTION FABRIC OTHER
// [note]"; `doc` is a PodTransport document.
std::string ObserveLines(const nlohmann::json& doc);

// Runs the command; writes stdout to `out` and diagnostics to `err`.
int RunObserve(const ObserveOptions& options, std::string* out, std::string* err);

}  // namespace fabric::fabricctl

#endif  // FABRIC_TOOLS_FABRICCTL_OBSERVE_H_
