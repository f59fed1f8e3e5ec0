#include "agent/daemon/agent.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "agent/base/file_util.h"
#include "agent/base/logging.h"
#include "agent/discovery/sysfs_discovery.h"

namespace fabric {
namespace {

bool SamePool(const PoolConfig& a, const PoolConfig& b) {
  // Selector equality is approximated by its effect on the node: the caller
  // rebuilds snapshots anyway, so only the name and mode decide server reuse.
  return a.name == b.name && a.mode == b.mode && a.tokens_per_device == b.tokens_per_device;
}

}  // namespace

Agent::Agent(AgentOptions options)
    : options_(std::move(options)),
      plugins_(std::make_unique<PluginManager>(options_.paths, options_.registration)) {}

Agent::~Agent() { Stop(); }

absl::Status Agent::Start() {
  Config config = DefaultConfig();
  if (!options_.config_path.empty()) {
    auto loaded = LoadConfigFile(options_.config_path);
    if (!loaded.ok()) return loaded.status();
    config = *loaded;
  }
  auto inventory = DiscoverNode(options_.paths);
  if (!inventory.ok()) return inventory.status();
  LogInfo(Component::kDiscovery, "found {} RDMA device(s){}", inventory->devices.size(),
          inventory->rdma_cm ? "" : " (no rdma_cm)");
  monitor_ = std::make_unique<HealthMonitor>(
      options_.paths, config.health,
      [this](const NodeInventory& inv, const std::map<std::string, DeviceHealth>& health) {
        OnNodeChanged(inv, health);
      });
  // The first advertisement already reflects a port that is down.
  auto health = monitor_->Prime(*inventory, absl::Now());
  {
    absl::MutexLock lock(&mu_);
    node_.inventory = *inventory;
    node_.health = health;
    for (const RdmaDevice& d : inventory->devices) node_.known[d.name] = d;
  }
  if (absl::Status s = ApplyConfig(config); !s.ok()) return s;
  if (absl::Status s = plugins_->Start(); !s.ok()) return s;
  monitor_->Start();
  return absl::OkStatus();
}

void Agent::Stop() {
  if (monitor_) monitor_->Stop();
  plugins_->Stop();
}

absl::Status Agent::Reload() {
  if (options_.config_path.empty()) return absl::OkStatus();
  auto loaded = LoadConfigFile(options_.config_path);
  if (!loaded.ok()) {
    LogError(Component::kConfig, "config reload rejected, keeping the previous config: {}",
             loaded.status().message());
    return loaded.status();
  }
  LogInfo(Component::kConfig, "config reloaded from {}", options_.config_path);
  if (monitor_) monitor_->SetConfig(loaded->health);
  return ApplyConfig(*loaded);
}

absl::Status Agent::ApplyConfig(const Config& config) {
  std::vector<std::shared_ptr<PoolState>> added;
  std::vector<std::string> removed;
  {
    absl::MutexLock lock(&mu_);
    std::map<std::string, std::shared_ptr<PoolState>> next;
    for (const PoolConfig& pool : config.pools) {
      const PoolConfig* old = config_.FindPool(pool.name);
      auto it = pools_.find(pool.name);
      if (old != nullptr && it != pools_.end() && SamePool(*old, pool)) {
        next[pool.name] = it->second;  // keeps its server and streams
      } else {
        if (it != pools_.end()) removed.push_back(pool.name);
        pool_members_.erase(pool.name);
      }
    }
    for (auto& [name, state] : pools_) {
      if (!config.FindPool(name)) {
        removed.push_back(name);
        pool_members_.erase(name);
      }
    }
    config_ = config;
    for (const PoolConfig& pool : config_.pools) {
      if (next.count(pool.name)) continue;
      auto state = std::make_shared<PoolState>(BuildPoolSnapshot(pool));
      next[pool.name] = state;
      added.push_back(state);
    }
    pools_ = std::move(next);
    RebuildAllLocked();
  }
  for (const std::string& name : removed) plugins_->RemovePool(name);
  for (auto& state : added) {
    LogInfo(Component::kPlugin, "{}: {} unit(s), {} healthy", state->resource(),
            state->snapshot()->units.size(), state->snapshot()->HealthyCount());
    if (absl::Status s = plugins_->AddPool(state); !s.ok()) return s;
  }
  return absl::OkStatus();
}

std::shared_ptr<const PoolSnapshot> Agent::BuildPoolSnapshot(const PoolConfig& pool) const {
  SnapshotInputs in;
  in.pool = &pool;
  in.rdma_cm = node_.inventory.rdma_cm;
  in.health = node_.health;
  std::vector<std::string> members;
  auto it = pool_members_.find(pool.name);
  if (it != pool_members_.end()) members = it->second;
  // A remembered member stays only while it is gone (kept Unhealthy) or
  // still selected; a config change can drop live devices from a pool.
  members.erase(std::remove_if(members.begin(), members.end(),
                               [&](const std::string& name) {
                                 const RdmaDevice* live = node_.inventory.Find(name);
                                 return live != nullptr && !pool.selector.Matches(*live);
                               }),
                members.end());
  for (const RdmaDevice& d : node_.inventory.devices) {
    if (pool.selector.Matches(d) && std::find(members.begin(), members.end(), d.name) == members.end()) {
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
      in.health[name] = DeviceHealth{false, "device removed"};
    }
  }
  return BuildSnapshot(in);
}

void Agent::RebuildAllLocked() {
  for (const PoolConfig& pool : config_.pools) {
    auto snap = BuildPoolSnapshot(pool);
    std::vector<std::string>& members = pool_members_[pool.name];
    members.clear();
    for (const auto& [name, dev] : snap->devices) members.push_back(name);
    auto it = pools_.find(pool.name);
    if (it != pools_.end()) it->second->Update(snap);
  }
}

void Agent::OnNodeChanged(const NodeInventory& inventory,
                          const std::map<std::string, DeviceHealth>& health) {
  absl::MutexLock lock(&mu_);
  for (const RdmaDevice& d : inventory.devices) {
    if (!node_.known.count(d.name)) {
      LogInfo(Component::kDiscovery, "new device {} ({})", d.name, DeviceKindName(d.kind));
    }
    node_.known[d.name] = d;
  }
  node_.inventory = inventory;
  node_.health = health;
  RebuildAllLocked();
}

NodeView Agent::node() const {
  absl::MutexLock lock(&mu_);
  return node_;
}

Config Agent::config() const {
  absl::MutexLock lock(&mu_);
  return config_;
}

std::vector<std::shared_ptr<PoolState>> Agent::pools() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<PoolState>> out;
  for (const PoolConfig& p : config_.pools) out.push_back(pools_.at(p.name));
  return out;
}

}  // namespace fabric
