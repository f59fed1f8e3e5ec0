// rdma-res-probe [qp|cq|mr|pd|ctx]...: prints what the agent's restrack source
// (OpenNetlinkResourceSource) sees, one JSON object per line, so the soft-RoCE
// VM test can compare it with `rdma -j res show qp`:
//   {"kind":"qp","device":"rxe0","port":1,"id":17,"pid":164,"kern_name":null,"mr_bytes":0,
//    "pdn":1}   (pdn on QPs and MRs, ctxn on PDs and CQs, where the kernel links them)
// then {"notes":{"rejected_entries":0,"vanished_devices":0,"retried_dumps":0,"reasons":[]}}.
// On failure one {"error":"...","code":"..."} line and exit 1; a bad argument
// exits 2. No arguments: every kind. A debug tool; not installed.
#include <cstdio>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "agent/base/json_text.h"
#include "agent/restrack/rdma_resources.h"

namespace {

using fabric::restrack::ResourceKind;
using fabric::restrack::ResourceKindName;

bool ParseKind(const std::string& s, ResourceKind* out) {
  for (ResourceKind k : {ResourceKind::kQp, ResourceKind::kCq, ResourceKind::kMr, ResourceKind::kPd,
                         ResourceKind::kCtx}) {
    if (s == ResourceKindName(k)) {
      *out = k;
      return true;
    }
  }
  return false;
}

void PrintLine(const nlohmann::ordered_json& j) {
  std::printf("%s\n", fabric::DumpJson(j).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::set<ResourceKind> kinds;
  for (int i = 1; i < argc; ++i) {
    ResourceKind k;
    if (!ParseKind(argv[i], &k)) {
      std::fprintf(stderr, "usage: rdma-res-probe [qp|cq|mr|pd|ctx]...\n");
      return 2;
    }
    kinds.insert(k);
  }
  auto source = fabric::restrack::OpenNetlinkResourceSource();
  auto resources = source->Dump();
  if (!resources.ok()) {
    PrintLine({{"error", std::string(resources.status().message())},
               {"code", absl::StatusCodeToString(resources.status().code())}});
    return 1;
  }
  for (const auto& r : *resources) {
    if (!kinds.empty() && kinds.count(r.kind) == 0) continue;
    nlohmann::ordered_json j;
    j["kind"] = ResourceKindName(r.kind);
    j["device"] = r.device;
    j["port"] = r.port;
    j["id"] = r.id;
    j["pid"] = r.pid == 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.pid);
    j["kern_name"] =
        r.kern_name.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.kern_name);
    j["mr_bytes"] = r.mr_bytes;
    if (r.qp_type) j["qp_type"] = *r.qp_type;
    if (r.qp_state) j["qp_state"] = fabric::restrack::QpStateName(*r.qp_state);
    if (r.pdn) j["pdn"] = *r.pdn;
    if (r.ctxn) j["ctxn"] = *r.ctxn;
    PrintLine(j);
  }
  const fabric::restrack::DumpNotes notes = source->LastDumpNotes();
  PrintLine({{"notes",
              {{"rejected_entries", notes.rejected_entries},
               {"vanished_devices", notes.vanished_devices},
               {"retried_dumps", notes.retried_dumps},
               {"failed_devices", notes.failed_devices},
               {"contexts_missing", notes.contexts_missing},
               {"reasons", notes.reasons}}}});
  return 0;
}
