// The kubelet's device-manager checkpoint
// (<device-plugin dir>/kubelet_internal_checkpoint), JSON the agent reads
// from the host: ParseKubeletCheckpoint (agent/podresources/kubelet_checkpoint.h).
// Input: the file's contents.
// Invariant: the parser never throws or crashes and fails only with
// kInvalidArgument; every entry it returns has a PodUID, container and
// resource that are clean text (CheckExternalName: UTF-8, no control
// characters), no namespace or Pod name (the checkpoint has none), and a
// non-empty list of clean, distinct device IDs; and those entries written
// back as a checkpoint (pre-1.20 list form, and 1.20+ NUMA-map form) parse
// again to the same entries.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "agent/base/utf8.h"
#include "agent/podresources/kubelet_checkpoint.h"
#include "test/fuzz/fuzz_check.h"

namespace {

using fabric::podresources::ParseKubeletCheckpoint;
using fabric::podresources::PodDevices;

bool Clean(const std::string& s) { return fabric::CheckExternalName("x", s, 1 << 20).ok(); }

std::string Checkpoint(const std::vector<PodDevices>& entries, bool numa_map) {
  nlohmann::json list = nlohmann::json::array();
  for (const PodDevices& d : entries) {
    nlohmann::json ids = d.device_ids;
    list.push_back({{"PodUID", d.pod_uid},
                    {"ContainerName", d.container},
                    {"ResourceName", d.resource},
                    {"DeviceIDs", numa_map ? nlohmann::json{{"0", ids}} : ids},
                    {"AllocResp", "CiAKC"}});
  }
  return nlohmann::json{{"Data", {{"PodDeviceEntries", list}, {"RegisteredDevices", nullptr}}},
                        {"Checksum", 1}}
      .dump();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::vector<PodDevices>> entries = ParseKubeletCheckpoint(text);
  if (!entries.ok()) {
    FUZZ_CHECK(entries.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  for (const PodDevices& d : *entries) {
    FUZZ_CHECK(d.ns.empty() && d.pod.empty());
    FUZZ_CHECK(Clean(d.pod_uid) && Clean(d.container) && Clean(d.resource));
    FUZZ_CHECK(!d.device_ids.empty());
    FUZZ_CHECK(std::set<std::string>(d.device_ids.begin(), d.device_ids.end()).size() ==
               d.device_ids.size());
    for (const std::string& id : d.device_ids) FUZZ_CHECK(Clean(id));
  }
  for (bool numa_map : {false, true}) {
    absl::StatusOr<std::vector<PodDevices>> again =
        ParseKubeletCheckpoint(Checkpoint(*entries, numa_map));
    FUZZ_CHECK(again.ok() && *again == *entries);
  }
  return 0;
}
