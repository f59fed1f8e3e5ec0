#include "agent/pools/pool_registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/base/file_util.h"
#include "agent/base/logging.h"

namespace fabric {
namespace {

bool SamePool(const PoolConfig& a, const PoolConfig& b) {
  // Selector equality is approximated by its effect on the node: snapshots are
  // rebuilt anyway, so only the name and mode decide server reuse.
  return a.name == b.name && a.mode == b.mode && a.tokens_per_device == b.tokens_per_device;
}

}  // namespace

PoolRegistry::PoolRegistry(PoolRegistryOptions options) : options_(std::move(options)) {}

void PoolRegistry::SetOnChange(std::function<void()> fn) { on_change_ = std::move(fn); }
void PoolRegistry::SetOnGrant(std::function<void()> fn) { on_grant_ = std::move(fn); }

void PoolRegistry::Notify(bool changed, bool granted) {
  if (granted && on_grant_) on_grant_();
  if (changed && on_change_) on_change_();
}

PoolRegistry::Changes PoolRegistry::ApplyConfig(const Config& config) {
  Changes changes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::map<std::string, std::shared_ptr<PoolState>> next;
    for (const PoolConfig& pool : config.pools) {
      const PoolConfig* old = config_.FindPool(pool.name);
      auto it = pools_.find(pool.name);
      if (old != nullptr && it != pools_.end() && SamePool(*old, pool)) {
        next[pool.name] = it->second;  // keeps its server and streams
      }
    }
    for (auto& [name, state] : pools_) {
      if (!next.count(name)) {
        changes.removed.push_back(name);
        members_.erase(name);
        withdrawn_.erase(name);
        std::erase_if(grants_, [&pool = name](const auto& g) { return g.second.resource == pool; });
      }
    }
    config_ = config;
    for (const PoolConfig& pool : config_.pools) {
      if (next.count(pool.name)) continue;
      auto state = std::make_shared<PoolState>(BuildLocked(pool));
      state->SetClaimer([this](const std::string& resource, const std::vector<std::string>& ids) {
        return Claim(resource, ids);
      });
      next[pool.name] = state;
      changes.added.push_back(state);
    }
    pools_ = std::move(next);
    RefreshLocked();
  }
  Notify(true, false);
  return changes;
}

void PoolRegistry::SetNode(const NodeInventory& inventory,
                           const std::map<std::string, DeviceHealth>& health) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const RdmaDevice& d : inventory.devices) {
      if (!node_.known.count(d.name) && !node_.known.empty()) {
        LogInfo(Component::kDiscovery, "new device {} ({})", d.name, DeviceKindName(d.kind));
      }
      node_.known[d.name] = d;
    }
    node_.inventory = inventory;
    node_.health = health;
    const absl::Time now = options_.clock();
    for (const auto& [name, dev] : node_.known) {
      if (inventory.Find(name) == nullptr) {
        gone_since_.emplace(name, now);
      } else {
        gone_since_.erase(name);
      }
    }
    ForgetRemovedLocked(now);
    RefreshLocked();
  }
  Notify(true, false);
}

bool PoolRegistry::SetHolds(const holds::KubeletView& view) {
  bool changed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<PodDeviceHold> holds;
    std::set<std::pair<std::string, std::string>> seen;  // (resource, id)
    for (const podresources::PodDevices& entry : view.entries) {
      auto pool = pools_.find(entry.resource);
      if (pool == pools_.end()) continue;
      auto snap = pool->second->snapshot();
      for (const std::string& id : entry.device_ids) {
        const PoolUnit* unit = snap->FindUnit(id);
        if (unit == nullptr) continue;
        seen.insert({entry.resource, id});
        holds.push_back({entry.ns, entry.pod, entry.container, entry.resource, unit->device,
                         entry.pod_uid, entry.init_container});
      }
    }
    std::set<std::pair<std::string, std::string>> held_units = seen;
    if (!view.complete) {
      // The view may miss holds: keep every one known before.
      holds.insert(holds.end(), holds_.begin(), holds_.end());
      held_units.insert(held_units_.begin(), held_units_.end());
    }
    std::sort(holds.begin(), holds.end());
    holds.erase(std::unique(holds.begin(), holds.end()), holds.end());
    std::map<std::string, uint64_t> allocated;
    for (const auto& [resource, id] : held_units) allocated[resource]++;
    // Grants the kubelet now reports are holds. One a complete view does not
    // report although it was observed well after the grant was never taken
    // up (the Pod is gone, or its admission failed); the rest wait for their
    // TTL. An incomplete view releases nothing.
    const size_t before = grants_.size();
    std::erase_if(grants_, [&](const auto& entry) {
      if (seen.count(entry.first) > 0) return true;
      if (!view.complete || !view.proves_absence) return false;
      const Grant& g = entry.second;
      if (view.observed_at - g.at < options_.grant_settle) return false;
      LogInfo(Component::kPodResources, "{}: grant of {} released: the kubelet does not hold it",
              g.resource, g.id);
      return true;
    });
    changed = grants_.size() != before;
    const absl::Time now = options_.clock();
    if (view.complete) changed = ExpireGrantsLocked(now) || changed;
    changed = changed || holds != holds_ || allocated != allocated_;
    holds_ = std::move(holds);
    held_units_ = std::move(held_units);
    allocated_ = std::move(allocated);
    changed = RecomputeWithdrawnLocked() || changed;
    if (ForgetRemovedLocked(now)) {
      RefreshLocked();
      changed = true;
    } else if (changed) {
      RebuildAllLocked();
    }
  }
  Notify(changed, false);
  return changed;
}

bool PoolRegistry::ForgetRemovedLocked(absl::Time now) {
  std::vector<std::string> forget;
  for (const auto& [name, since] : gone_since_) {
    if (now - since < options_.forget_removed_after || used_via_.count(name) > 0) continue;
    forget.push_back(name);
  }
  for (const std::string& name : forget) {
    LogInfo(Component::kDiscovery, "forgetting {}: removed {} ago and nothing holds it", name,
            absl::FormatDuration(absl::Trunc(now - gone_since_[name], absl::Seconds(1))));
    gone_since_.erase(name);
    node_.known.erase(name);
    for (auto& [pool, members] : members_) std::erase(members, name);
  }
  return !forget.empty();
}

void PoolRegistry::ExpireGrants() {
  bool changed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ExpireGrantsLocked(options_.clock()) && RecomputeWithdrawnLocked()) {
      RebuildAllLocked();
      changed = true;
    }
    if (ForgetRemovedLocked(options_.clock())) {
      RefreshLocked();
      changed = true;
    }
  }
  Notify(changed, false);
}

bool PoolRegistry::ExpireGrantsLocked(absl::Time now) {
  const size_t before = grants_.size();
  std::erase_if(grants_, [&](const auto& entry) {
    const Grant& g = entry.second;
    if (now - g.at < options_.grant_ttl) return false;
    LogInfo(Component::kPodResources, "{}: grant of {} released: no Pod took it up within {}",
            g.resource, g.id, absl::FormatDuration(options_.grant_ttl));
    return true;
  });
  return grants_.size() != before;
}

bool PoolRegistry::Conflict(const PoolConfig& a, const PoolConfig* b) const {
  return a.mode == PoolMode::kExclusive || (b != nullptr && b->mode == PoolMode::kExclusive);
}

std::vector<std::string> PoolRegistry::ConflictsLocked(const std::string& resource,
                                                       const std::string& device) const {
  const PoolConfig* pool = config_.FindPool(resource);
  auto used = used_via_.find(device);
  if (pool == nullptr || used == used_via_.end()) return {};
  std::vector<std::string> out;
  for (const std::string& other : used->second) {
    if (other != resource && Conflict(*pool, config_.FindPool(other))) out.push_back(other);
  }
  return out;
}

bool PoolRegistry::RecomputeWithdrawnLocked() {
  std::map<std::string, std::set<std::string>>& used_via = used_via_;
  used_via.clear();
  for (const PodDeviceHold& h : holds_) used_via[h.device].insert(h.resource);
  for (const auto& [key, g] : grants_) used_via[g.device].insert(g.resource);
  std::map<std::string, std::map<std::string, std::string>> withdrawn;
  for (const PoolConfig& pool : config_.pools) {
    auto state = pools_.find(pool.name);
    if (state == pools_.end()) continue;
    auto snap = state->second->snapshot();
    for (const PoolUnit& u : snap->units) {
      auto used = used_via.find(u.device);
      if (used == used_via.end()) continue;
      for (const std::string& other : used->second) {
        const PoolConfig* o = config_.FindPool(other);
        if (other != pool.name && Conflict(pool, o)) {
          std::string& why = withdrawn[pool.name][u.id];
          absl::StrAppend(
              &why,
              why.empty() ? absl::StrCat("withdrawn while device ", u.device, " is held through ")
                          : ", ",
              other, " (", o ? PoolModeName(o->mode) : "removed", ")");
        }
      }
    }
  }
  if (withdrawn == withdrawn_) return false;
  for (const auto& [pool, ids] : withdrawn) {
    auto old = withdrawn_.find(pool);
    if (old == withdrawn_.end() || old->second != ids) {
      LogInfo(Component::kPodResources,
              "{}: {} unit(s) withdrawn while their device is held through another pool", pool,
              ids.size());
    }
  }
  withdrawn_ = std::move(withdrawn);
  return true;
}

absl::Status PoolRegistry::Claim(const std::string& resource, const std::vector<std::string>& ids) {
  bool changed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto state = pools_.find(resource);
    if (state == pools_.end()) {
      return absl::NotFoundError(absl::StrCat(resource, ": pool is no longer configured"));
    }
    auto snap = state->second->snapshot();
    std::vector<const PoolUnit*> units;
    for (const std::string& id : ids) {
      const PoolUnit* unit = snap->FindUnit(id);
      if (unit == nullptr) {
        return absl::NotFoundError(absl::StrCat(resource, ": unknown device ID \"", id, "\""));
      }
      const std::vector<std::string> others = ConflictsLocked(resource, unit->device);
      if (!others.empty()) {
        const PoolConfig* mine = config_.FindPool(resource);
        const PoolConfig* theirs = config_.FindPool(others.front());
        return absl::FailedPreconditionError(
            absl::StrCat(resource, ": device ID \"", id, "\" refused: device ", unit->device,
                         " is already granted through ", absl::StrJoin(others, ", "), " (",
                         theirs ? PoolModeName(theirs->mode) : "removed", "), and an ",
                         mine->mode == PoolMode::kExclusive ? "exclusive" : "shared",
                         " grant of the same device cannot coexist with it"));
      }
      units.push_back(unit);
    }
    const absl::Time now = options_.clock();
    bool new_use = false;  // a device now used through a pool it was not before
    for (const PoolUnit* u : units) {
      grants_[{resource, u->id}] = Grant{resource, u->id, u->device, now};
      new_use = used_via_[u->device].insert(resource).second || new_use;
    }
    // A repeated grant (same devices through the same pool) changes nothing.
    changed = new_use && RecomputeWithdrawnLocked();
    if (changed) RebuildAllLocked();
  }
  Notify(changed, true);
  return absl::OkStatus();
}

std::shared_ptr<const PoolSnapshot> PoolRegistry::BuildLocked(const PoolConfig& pool) const {
  SnapshotInputs in;
  in.pool = &pool;
  in.rdma_cm = node_.inventory.rdma_cm;
  in.health = node_.health;
  if (auto w = withdrawn_.find(pool.name); w != withdrawn_.end()) in.withdrawn = w->second;
  if (options_.cdi_kind) in.cdi_kind = options_.cdi_kind(pool.name);
  std::vector<std::string> members;
  if (auto it = members_.find(pool.name); it != members_.end()) members = it->second;
  // A remembered member stays only while it is gone (kept Unhealthy) or
  // still selected; a config change can drop live devices from a pool.
  members.erase(std::remove_if(members.begin(), members.end(),
                               [&](const std::string& name) {
                                 const RdmaDevice* live = node_.inventory.Find(name);
                                 return live != nullptr && !pool.selector.Matches(*live);
                               }),
                members.end());
  for (const RdmaDevice& d : node_.inventory.devices) {
    if (pool.selector.Matches(d) &&
        std::find(members.begin(), members.end(), d.name) == members.end()) {
      members.push_back(d.name);
    }
  }
  std::sort(members.begin(), members.end(), NaturalLess);
  for (const std::string& name : members) {
    const RdmaDevice* live = node_.inventory.Find(name);
    if (live != nullptr) {
      in.devices.push_back(*live);
    } else {
      // Removed (hot-unplug, driver unbind): keep the ID so the kubelet keeps
      // its allocations, advertised Unhealthy.
      in.devices.push_back(node_.known.at(name));
      in.health[name] = DeviceHealth{false, "device removed", HealthCause::kRemoved};
    }
  }
  return BuildSnapshot(in);
}

void PoolRegistry::RefreshLocked() {
  RebuildAllLocked();
  if (RecomputeWithdrawnLocked()) RebuildAllLocked();
}

void PoolRegistry::RebuildAllLocked() {
  for (const PoolConfig& pool : config_.pools) {
    auto it = pools_.find(pool.name);
    if (it == pools_.end()) continue;
    auto snap = BuildLocked(pool);
    std::vector<std::string>& members = members_[pool.name];
    members.clear();
    for (const auto& [name, dev] : snap->devices) members.push_back(name);
    it->second->Update(std::move(snap));
  }
}

std::optional<ResolvedUnit> PoolRegistry::Resolve(const std::string& resource,
                                                  const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto pool = pools_.find(resource);
  if (pool == pools_.end()) return std::nullopt;
  auto snap = pool->second->snapshot();
  const PoolUnit* unit = snap->FindUnit(id);
  if (unit == nullptr) return std::nullopt;
  ResolvedUnit r;
  r.resource = resource;
  r.id = id;
  r.device = unit->device;
  r.exclusive = snap->mode == PoolMode::kExclusive;
  r.efa = snap->devices.at(unit->device).kind == DeviceKind::kEfa;
  return r;
}

PoolRegistry::View PoolRegistry::view() const {
  std::lock_guard<std::mutex> lock(mu_);
  View v;
  v.node = node_;
  v.config = config_;
  v.holds = holds_;
  for (const PoolConfig& pool : config_.pools) {
    auto it = pools_.find(pool.name);
    if (it == pools_.end()) continue;
    PoolView p;
    p.config = pool;
    p.state = it->second;
    p.snapshot = it->second->snapshot();
    if (auto a = allocated_.find(pool.name); a != allocated_.end()) p.allocated_units = a->second;
    if (auto w = withdrawn_.find(pool.name); w != withdrawn_.end()) {
      p.withdrawn_units = w->second.size();
    }
    for (const auto& [key, g] : grants_) p.pending_grants += g.resource == pool.name;
    v.pools.push_back(std::move(p));
  }
  return v;
}

NodeView PoolRegistry::node() const {
  std::lock_guard<std::mutex> lock(mu_);
  return node_;
}

Config PoolRegistry::config() const {
  std::lock_guard<std::mutex> lock(mu_);
  return config_;
}

std::vector<PodDeviceHold> PoolRegistry::holds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return holds_;
}

std::vector<std::shared_ptr<PoolState>> PoolRegistry::pools() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<PoolState>> out;
  for (const PoolConfig& p : config_.pools) {
    if (auto it = pools_.find(p.name); it != pools_.end()) out.push_back(it->second);
  }
  return out;
}

}  // namespace fabric
