#include "plugin/deviceplugin/allocation.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/base/file_util.h"
#include "agent/base/host_paths.h"
#include "agent/engine_env/engine_env.h"

namespace fabric {

std::string DevicesEnvName(const std::string& resource) {
  std::string out = "FABRIC_DEVICES_";
  for (char c : resource) out.push_back(absl::ascii_isalnum(c) ? absl::ascii_toupper(c) : '_');
  return out;
}

std::shared_ptr<const v1beta1::ListAndWatchResponse> MakeDeviceList(const PoolSnapshot& snap) {
  auto msg = std::make_shared<v1beta1::ListAndWatchResponse>();
  for (const PoolUnit& u : snap.units) {
    v1beta1::Device* d = msg->add_devices();
    d->set_id(u.id);
    d->set_health(u.healthy ? "Healthy" : "Unhealthy");
    if (u.numa_node >= 0) d->mutable_topology()->add_nodes()->set_id(u.numa_node);
  }
  return msg;
}

absl::StatusOr<ContainerGrant> AllocateContainer(const PoolSnapshot& snap,
                                                 const v1beta1::ContainerAllocateRequest& req) {
  if (req.devices_ids().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(snap.resource, ": empty allocation request"));
  }
  std::vector<std::string> devices;  // distinct, in request order
  std::set<std::string> seen_ids;
  for (const std::string& id : req.devices_ids()) {
    if (!seen_ids.insert(id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(snap.resource, ": device ID ", id, " requested twice"));
    }
    const PoolUnit* unit = snap.FindUnit(id);
    if (unit == nullptr) {
      return absl::NotFoundError(absl::StrCat(snap.resource, ": unknown device ID \"", id, "\""));
    }
    if (!unit->healthy) {
      auto h = snap.health.find(unit->device);
      std::string reason = h != snap.health.end() && !h->second.healthy ? h->second.reason : "";
      if (reason.empty()) reason = unit->withdrawn;
      if (reason.empty()) reason = "withdrawn while its device is held through another pool";
      return absl::FailedPreconditionError(
          absl::StrCat(snap.resource, ": device ID \"", id, "\" is unhealthy: ", reason));
    }
    if (std::find(devices.begin(), devices.end(), unit->device) == devices.end()) {
      devices.push_back(unit->device);
    }
  }

  ContainerGrant grant;
  v1beta1::ContainerAllocateResponse& resp = grant.response;
  std::vector<std::string> rdma_names;
  std::vector<const RdmaDevice*> granted;
  for (const std::string& name : devices) {
    const RdmaDevice& dev = snap.devices.at(name);
    granted.push_back(&dev);
    auto* spec = resp.add_devices();
    spec->set_container_path(HostDevicePath(dev.uverbs.rel_path));
    spec->set_host_path(HostDevicePath(dev.uverbs.rel_path));
    spec->set_permissions("rw");
    if (dev.kind == DeviceKind::kRdma) rdma_names.push_back(name);
    if (!snap.cdi_kind.empty())
      resp.add_cdi_devices()->set_name(absl::StrCat(snap.cdi_kind, "=", name));
  }
  if (!rdma_names.empty() && snap.rdma_cm) {
    auto* spec = resp.add_devices();
    spec->set_container_path(HostDevicePath(snap.rdma_cm->rel_path));
    spec->set_host_path(HostDevicePath(snap.rdma_cm->rel_path));
    spec->set_permissions("rw");
  }
  (*resp.mutable_envs())[DevicesEnvName(snap.resource)] = absl::StrJoin(devices, ",");
  if (!rdma_names.empty()) {
    // "=" makes NCCL match names exactly: plain "mlx5_1" would also select mlx5_10.
    (*resp.mutable_envs())["NCCL_IB_HCA"] = absl::StrCat("=", absl::StrJoin(rdma_names, ","));
  }
  engine_env::EngineEnv engine = engine_env::ForGrant(snap.env, granted);
  for (auto& [name, value] : engine.vars) (*resp.mutable_envs())[name] = std::move(value);
  grant.notes = std::move(engine.notes);
  grant.given = std::move(engine.given);
  return grant;
}

namespace {

std::vector<std::string> PreferExclusive(const PoolSnapshot& snap,
                                         const std::vector<std::string>& candidates,
                                         std::vector<std::string> result, int size) {
  std::set<int> used_numa;
  for (const std::string& id : result) used_numa.insert(snap.FindUnit(id)->numa_node);
  std::map<int, std::vector<std::string>> by_numa;
  for (const std::string& id : candidates) by_numa[snap.FindUnit(id)->numa_node].push_back(id);
  for (auto& [numa, ids] : by_numa) std::sort(ids.begin(), ids.end(), NaturalLess);

  auto take = [&](int numa) {
    auto& ids = by_numa[numa];
    while (!ids.empty() && static_cast<int>(result.size()) < size) {
      result.push_back(ids.front());
      ids.erase(ids.begin());
    }
    used_numa.insert(numa);
  };
  // NUMA nodes already in use first, fullest first.
  std::vector<int> used(used_numa.begin(), used_numa.end());
  std::sort(used.begin(), used.end(),
            [&](int a, int b) { return by_numa[a].size() > by_numa[b].size(); });
  for (int numa : used) take(numa);
  while (static_cast<int>(result.size()) < size) {
    const size_t need = size - result.size();
    // Best fit: the smallest single node that holds the rest keeps larger
    // nodes whole for later requests; otherwise the largest node first.
    int best = INT32_MIN;
    for (auto& [numa, ids] : by_numa) {
      if (ids.size() >= need && (best == INT32_MIN || ids.size() < by_numa[best].size()))
        best = numa;
    }
    if (best == INT32_MIN) {
      for (auto& [numa, ids] : by_numa) {
        if (!ids.empty() && (best == INT32_MIN || ids.size() > by_numa[best].size())) best = numa;
      }
    }
    if (best == INT32_MIN) break;
    take(best);
  }
  return result;
}

std::vector<std::string> PreferShared(const PoolSnapshot& snap,
                                      const std::vector<std::string>& candidates,
                                      std::vector<std::string> result, int size) {
  std::map<std::string, std::vector<std::string>> by_device;
  for (const std::string& id : candidates) by_device[snap.FindUnit(id)->device].push_back(id);
  for (auto& [dev, ids] : by_device) std::sort(ids.begin(), ids.end(), NaturalLess);
  std::map<std::string, int> uses;
  std::set<int> numas;
  for (const std::string& id : result) {
    const PoolUnit* u = snap.FindUnit(id);
    uses[u->device]++;
    numas.insert(u->numa_node);
  }
  while (static_cast<int>(result.size()) < size) {
    const std::string* best = nullptr;
    auto better = [&](const std::string& a, const std::string& b) {
      // Fewer tokens of this device in the request, then NUMA locality with
      // what is already chosen, then the least used device, then name.
      if (uses[a] != uses[b]) return uses[a] < uses[b];
      bool la = numas.count(snap.devices.at(a).numa_node()) > 0;
      bool lb = numas.count(snap.devices.at(b).numa_node()) > 0;
      if (la != lb) return la;
      if (by_device[a].size() != by_device[b].size())
        return by_device[a].size() > by_device[b].size();
      return NaturalLess(a, b);
    };
    for (auto& [dev, ids] : by_device) {
      if (ids.empty()) continue;
      if (best == nullptr || better(dev, *best)) best = &dev;
    }
    if (best == nullptr) break;
    auto& ids = by_device[*best];
    result.push_back(ids.front());
    ids.erase(ids.begin());
    uses[*best]++;
    numas.insert(snap.devices.at(*best).numa_node());
  }
  return result;
}

}  // namespace

std::vector<std::string> PreferredAllocation(const PoolSnapshot& snap,
                                             const std::vector<std::string>& available,
                                             const std::vector<std::string>& must_include,
                                             int size) {
  std::vector<std::string> result;
  std::set<std::string> taken;
  for (const std::string& id : must_include) {
    if (taken.insert(id).second && snap.FindUnit(id) != nullptr) result.push_back(id);
  }
  std::vector<std::string> candidates;
  for (const std::string& id : available) {
    const PoolUnit* u = snap.FindUnit(id);
    if (u == nullptr || !u->healthy || !taken.insert(id).second) continue;
    candidates.push_back(id);
  }
  if (static_cast<int>(result.size()) >= size) return result;
  return snap.mode == PoolMode::kShared
             ? PreferShared(snap, candidates, std::move(result), size)
             : PreferExclusive(snap, candidates, std::move(result), size);
}

}  // namespace fabric
