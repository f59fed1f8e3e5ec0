// A Pod as the API server sends it (agent/podconditions/pod_info.h): the
// agent's Pod watch parses every Pod of its node, whatever the API server (or
// anyone able to write a Pod's metadata, spec or status) put there.
// Input: bytes; parsed as JSON first (not JSON: nothing to check).
// Invariant: ParsePod never throws; an accepted Pod has a UID, namespace and
// name; only fabric.gpustack.ai/ conditions are kept, each under its own type;
// container IDs carry no "://" scheme; and DesiredConditions on the result
// (with no observation and with an empty one) never throws and answers the
// two condition types with a status of True, False or Unknown.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "agent/podconditions/conditions.h"
#include "agent/podconditions/pod_info.h"
#include "test/fuzz/fuzz_check.h"

namespace {

bool ValidStatus(const std::string& s) { return s == "True" || s == "False" || s == "Unknown"; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  auto pod = fabric::podconditions::ParsePod(j);
  if (!pod.ok()) return 0;
  FUZZ_CHECK(!pod->uid.empty() && !pod->ns.empty() && !pod->name.empty());
  for (const auto& [type, c] : pod->fabric_conditions) {
    FUZZ_CHECK(type == c.type);
    FUZZ_CHECK(absl::StartsWith(type, fabric::podconditions::kConditionPrefix));
  }
  for (const auto& c : pod->containers) FUZZ_CHECK(!absl::StrContains(c.id, "://"));
  const absl::Time now = absl::FromUnixSeconds(1'800'000'000);
  fabric::observe::PodObservation empty;
  empty.pod_uid = pod->uid;
  for (const fabric::observe::PodObservation* obs :
       {static_cast<decltype(&empty)>(nullptr), &empty}) {
    const auto d = fabric::podconditions::DesiredConditions(*pod, obs, {}, now);
    FUZZ_CHECK(d.attached.type == fabric::podconditions::kFabricAttached);
    FUZZ_CHECK(d.transport.type == fabric::podconditions::kTransport);
    FUZZ_CHECK(ValidStatus(d.attached.status) && ValidStatus(d.transport.status));
  }
  return 0;
}
