// The kubelet's PodResources List answer (proto/podresources/v1), bytes from
// the kubelet's socket, merged per Pod by MergePodResources
// (agent/podresources/podresources_client.h).
// Input: a serialized v1.ListPodResourcesResponse.
// Invariant: parsing never crashes; for every Pod, MergePodResources yields
// one entry per distinct (container, resource) that has devices in the input,
// each naming that Pod, with device IDs that all came from that container's
// entries for that resource, without duplicates, and covering every one of
// them; and the response re-serialized and parsed again merges the same.
#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "agent/podresources/podresources_client.h"
#include "podresources/v1/api.pb.h"
#include "test/fuzz/fuzz_check.h"

namespace {

using fabric::podresources::MergePodResources;
using fabric::podresources::PodDevices;

void CheckMerged(const v1::PodResources& pod, const std::vector<PodDevices>& merged) {
  // (container, resource) -> every device ID the input lists for it.
  std::map<std::pair<std::string, std::string>, std::set<std::string>> in;
  for (const auto& c : pod.containers()) {
    for (const auto& d : c.devices()) {
      auto& ids = in[{c.name(), d.resource_name()}];
      ids.insert(d.device_ids().begin(), d.device_ids().end());
    }
  }
  std::set<std::pair<std::string, std::string>> seen;
  for (const PodDevices& m : merged) {
    FUZZ_CHECK(m.ns == pod.namespace_() && m.pod == pod.name());
    const auto key = std::make_pair(m.container, m.resource);
    FUZZ_CHECK(seen.insert(key).second);  // one entry per (container, resource)
    auto it = in.find(key);
    FUZZ_CHECK(it != in.end());
    const std::set<std::string> ids(m.device_ids.begin(), m.device_ids.end());
    FUZZ_CHECK(ids.size() == m.device_ids.size());  // no duplicates
    FUZZ_CHECK(ids == it->second);                  // all from the input, none lost
  }
  FUZZ_CHECK(seen.size() == in.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Proto3 strings must be UTF-8: the parser refuses the others and logs
  // each refusal, which would flood the run.
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)quiet;
  v1::ListPodResourcesResponse resp;
  if (!resp.ParseFromArray(data, static_cast<int>(size))) return 0;
  std::vector<std::vector<PodDevices>> merged;
  for (const v1::PodResources& pod : resp.pod_resources()) {
    merged.push_back(MergePodResources(pod));
    CheckMerged(pod, merged.back());
  }
  v1::ListPodResourcesResponse again;
  FUZZ_CHECK(again.ParseFromString(resp.SerializeAsString()));
  FUZZ_CHECK(again.pod_resources_size() == resp.pod_resources_size());
  for (int i = 0; i < again.pod_resources_size(); ++i) {
    FUZZ_CHECK(MergePodResources(again.pod_resources(i)) == merged[static_cast<size_t>(i)]);
  }
  return 0;
}
