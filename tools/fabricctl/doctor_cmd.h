// `fabricctl doctor`: the fabric doctor's matrix from the local agent's
// /v1/peers, as a table or JSON, with one exit code per verdict; and
// `--bench PEER`, the 1 MiB bench against one peer over the doctor's provider.
#ifndef FABRIC_TOOLS_FABRICCTL_DOCTOR_CMD_H_
#define FABRIC_TOOLS_FABRICCTL_DOCTOR_CMD_H_

#include <nlohmann/json.hpp>
#include <string>

#include "agent/doctor/report.h"
#include "tools/fabricctl/cli_args.h"

namespace fabric::fabricctl {

int DoctorExitCode(doctor::Verdict v);
// {"verdict", "pairs": [{peer_node, local_device, peer_device, provider,
// reachable, control_reachable, rtt_seconds, last_error}]} — exactly these.
nlohmann::ordered_json DoctorJson(const doctor::PeersDocument& doc);
std::string DoctorText(const doctor::PeersDocument& doc);

int RunDoctor(const DoctorOptions& options);

}  // namespace fabric::fabricctl

#endif  // FABRIC_TOOLS_FABRICCTL_DOCTOR_CMD_H_
