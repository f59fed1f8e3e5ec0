#include "agent/holds/kubelet_view.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

namespace fabric::holds {

using podresources::PodDevices;

std::vector<PodDevices> JoinListAndCheckpoint(const std::vector<PodDevices>& listed,
                                              const std::vector<PodDevices>& checkpointed) {
  // (container, resource, device ID) -> listed Pod (ns, name)
  std::map<std::tuple<std::string, std::string, std::string>, std::pair<std::string, std::string>>
      by_unit;
  for (const PodDevices& l : listed) {
    for (const std::string& id : l.device_ids)
      by_unit[{l.container, l.resource, id}] = {l.ns, l.pod};
  }
  std::map<std::string, std::pair<std::string, std::string>> pod_of_uid;
  for (const PodDevices& c : checkpointed) {
    if (pod_of_uid.count(c.pod_uid)) continue;
    for (const std::string& id : c.device_ids) {
      auto it = by_unit.find({c.container, c.resource, id});
      if (it != by_unit.end()) {
        pod_of_uid[c.pod_uid] = it->second;
        break;
      }
    }
  }
  std::map<std::pair<std::string, std::string>, std::string> uid_of_pod;
  for (const auto& [uid, pod] : pod_of_uid) uid_of_pod[pod] = uid;

  std::vector<PodDevices> out = listed;
  // (ns, pod, uid, container, resource) -> index in out
  std::map<std::tuple<std::string, std::string, std::string, std::string, std::string>, size_t>
      index;
  for (size_t i = 0; i < out.size(); ++i) {
    PodDevices& d = out[i];
    if (auto u = uid_of_pod.find({d.ns, d.pod}); u != uid_of_pod.end()) d.pod_uid = u->second;
    index.emplace(std::make_tuple(d.ns, d.pod, d.pod_uid, d.container, d.resource), i);
  }
  for (const PodDevices& c : checkpointed) {
    PodDevices d = c;
    if (auto p = pod_of_uid.find(c.pod_uid); p != pod_of_uid.end()) {
      d.ns = p->second.first;
      d.pod = p->second.second;
    }
    auto key = std::make_tuple(d.ns, d.pod, d.pod_uid, d.container, d.resource);
    auto [it, inserted] = index.emplace(key, out.size());
    if (inserted) {
      d.init_container = !d.pod.empty();  // its Pod is listed, but not this container
      out.push_back(std::move(d));
      continue;
    }
    std::vector<std::string>& ids = out[it->second].device_ids;
    for (const std::string& id : d.device_ids) {
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
  }
  return out;
}

KubeletView WithDevicePluginHolds(KubeletView claims, const KubeletView& device_plugin) {
  claims.entries.insert(claims.entries.end(), device_plugin.entries.begin(),
                        device_plugin.entries.end());
  claims.observed_at = std::min(claims.observed_at, device_plugin.observed_at);
  if (!device_plugin.complete) {
    claims.complete = false;
    const std::string why = "device-plugin grants: " + device_plugin.incomplete_reason;
    claims.incomplete_reason =
        claims.incomplete_reason.empty() ? why : claims.incomplete_reason + "; " + why;
  }
  return claims;
}

}  // namespace fabric::holds
