#include "agent/daemon/agent.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "agent/base/file_util.h"
#include "agent/base/logging.h"
#include "agent/cdi/cdi_spec.h"
#include "agent/discovery/sysfs_discovery.h"
#include "agent/netns/rdma_netlink_mnl.h"
#include "nlohmann/json.hpp"
#include "plugin/deviceplugin/allocation.h"

namespace fabric {
namespace {

// Where the kernel has no RDMA netlink (old kernels, some sandboxes): the CNI
// part still attributes Pods in shared mode; moves fail with a clear error.
class NoRdmaNetlink : public netns::RdmaNetlink {
 public:
  explicit NoRdmaNetlink(std::string why) : why_(std::move(why)) {}
  absl::StatusOr<netns::NetnsMode> GetNetnsMode() override {
    return absl::UnavailableError("RDMA netlink unavailable: " + why_);
  }
  absl::StatusOr<std::vector<netns::RdmaLink>> ListDevices(const std::string&) override {
    return absl::UnavailableError("RDMA netlink unavailable: " + why_);
  }
  absl::Status MoveDevice(const std::string& device, const std::string&,
                          const std::string&) override {
    return absl::UnavailableError("cannot move " + device + ": RDMA netlink unavailable: " + why_);
  }

 private:
  std::string why_;
};

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
    std::lock_guard<std::mutex> lock(mu_);
    node_.inventory = *inventory;
    node_.health = health;
    for (const RdmaDevice& d : inventory->devices) node_.known[d.name] = d;
  }
  if (options_.write_cdi) {
    cdi_writer_ = std::make_unique<cdi::CdiSpecWriter>(options_.paths.cdi_dir,
                                                       options_.paths.state_dir + "/cdi");
  }
  if (absl::Status s = ApplyConfig(config); !s.ok()) return s;
  if (absl::Status s = plugins_->Start(); !s.ok()) return s;
  monitor_->Start();
  podresources::PodResourcesClientOptions pr;
  pr.socket_path = options_.paths.PodResourcesSocket();
  pr.use_get = false;  // we want every Pod: List
  podresources_ = std::make_unique<podresources::PodResourcesClient>(pr);
  watcher_ = std::thread([this] { RunAllocationWatcher(); });
  if (!options_.agent_socket.empty()) {
    auto nl = netns::MnlRdmaNetlink::Create();
    if (nl.ok()) {
      rdma_netlink_ = std::move(*nl);
    } else {
      LogWarn(Component::kCni, "RDMA netlink unavailable ({}); exclusive-mode moves will fail",
              nl.status().message());
      rdma_netlink_ = std::make_unique<NoRdmaNetlink>(std::string(nl.status().message()));
    }
    cni_ = std::make_unique<cni_service::CniService>(options_.paths, podresources_.get(), this,
                                                     rdma_netlink_.get());
    if (auto released = cni_->ReconcileGoneNetns(); released.ok() && *released > 0) {
      LogInfo(Component::kCni, "released {} attachment(s) whose Pod netns is gone", *released);
    }
    cni_server_ = std::make_unique<cni_service::CniAgentServer>(cni_.get());
    if (absl::Status s = cni_server_->Start(options_.agent_socket); !s.ok()) return s;
  }
  if (options_.doctor.enabled) {
    // Opt-in and never on the device-plugin path: if it cannot start, the
    // agent serves on and /v1/peers says why.
    doctor_ = std::make_unique<doctor::Doctor>(options_.doctor,
                                               doctor::DeviceSpecs(*inventory, options_.doctor));
    if (absl::Status s = doctor_->Start(); !s.ok()) {
      LogError(Component::kAgent, "doctor: not running: {}", s.message());
      doctor_->Stop();
      doctor_.reset();
      doctor_error_ = std::string(s.message());
    }
  }
  if (!options_.metrics_address.empty()) {
    HttpHandlers h;
    h.metrics = [this] { return MetricsText(); };
    h.not_ready_reason = [this] { return NotReadyReason(); };
    h.node_json = [this] { return NodeJson(); };
    if (options_.doctor.enabled) h.peers_json = [this] { return PeersJson(); };
    http_ = std::make_unique<HttpServer>(h, options_.metrics_cache);
    if (absl::Status s = http_->Start(options_.metrics_address); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void Agent::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_watcher_ = true;
  }
  watcher_cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  if (cni_server_) cni_server_->Stop();
  if (http_) http_->Stop();
  if (doctor_) doctor_->Stop();
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
    std::lock_guard<std::mutex> lock(mu_);
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
      state->SetAllocateHook([this] {
        {
          std::lock_guard<std::mutex> lock(mu_);
          refresh_requested_ = true;
        }
        watcher_cv_.notify_all();
      });
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
  if (auto w = withdrawn_.find(pool.name); w != withdrawn_.end()) in.withdrawn = w->second;
  if (options_.cdi_devices) in.cdi_kind = cdi::KindForResource(pool.name);
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
  WriteSideFilesLocked();
}

void Agent::WriteSideFilesLocked() {
  if (cdi_writer_) {
    for (const PoolConfig& pool : config_.pools) {
      auto it = pools_.find(pool.name);
      if (it == pools_.end()) continue;
      auto snap = it->second->snapshot();
      cdi::CdiSpecInput in;
      in.kind = cdi::KindForResource(pool.name);
      bool any_rdma = false;
      for (const auto& [name, dev] : snap->devices) {
        if (!node_.inventory.Find(name)) continue;  // gone: kept below while referenced
        cdi::CdiDevice d;
        d.name = name;
        d.nodes.push_back(
            {HostDevicePath(dev.uverbs.rel_path), "", dev.uverbs.major, dev.uverbs.minor});
        d.env.push_back(absl::StrCat(DevicesEnvName(pool.name), "_", name, "=", name));
        any_rdma = any_rdma || dev.kind == DeviceKind::kRdma;
        in.devices.push_back(std::move(d));
      }
      if (any_rdma && snap->rdma_cm) {
        in.common_nodes.push_back({HostDevicePath(snap->rdma_cm->rel_path), "",
                                   snap->rdma_cm->major, snap->rdma_cm->minor});
      }
      if (!options_.memlock_hook_path.empty()) {
        in.memlock_hook = cdi::MemlockHook(options_.memlock_hook_path, options_.memlock_limit);
      }
      std::set<std::string> referenced;
      for (const PodDeviceHold& h : holds_) {
        if (h.resource == pool.name) referenced.insert(h.device);
      }
      if (in.devices.empty() && referenced.empty()) {
        (void)cdi_writer_->RemoveKind(in.kind);
        continue;
      }
      if (absl::Status s = cdi_writer_->Update(in, referenced); !s.ok()) {
        LogWarn(Component::kCdi, "CDI spec for {} not written: {}", pool.name, s.message());
      }
    }
  }
  if (!options_.nfd_features_file.empty()) {
    int efa = 0, rdma = 0;
    for (const RdmaDevice& d : node_.inventory.devices) (d.kind == DeviceKind::kEfa ? efa : rdma)++;
    std::string text = absl::StrCat(
        "# written by fabric-agent\n", "fabric-efa.present=", efa > 0 ? "true" : "false", "\n",
        "fabric-efa.count=", efa, "\n", "fabric-rdma.present=", rdma > 0 ? "true" : "false", "\n",
        "fabric-rdma.count=", rdma, "\n");
    if (absl::Status s = WriteFileAtomic(options_.nfd_features_file, text); !s.ok()) {
      LogWarn(Component::kAgent, "NFD feature file not written: {}", s.message());
    }
  }
}

void Agent::RunAllocationWatcher() {
  absl::Time last_reconcile = absl::Now();
  while (true) {
    bool requested = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      watcher_cv_.wait_for(lock, absl::ToChronoMilliseconds(options_.podresources_interval),
                           [this] { return stop_watcher_ || refresh_requested_; });
      if (stop_watcher_) return;
      requested = refresh_requested_;
      refresh_requested_ = false;
    }
    // The kubelet records an allocation right after Allocate returns.
    if (requested) absl::SleepFor(absl::Milliseconds(100));
    RefreshAllocations();
    if (cni_ && absl::Now() - last_reconcile > absl::Seconds(60)) {
      last_reconcile = absl::Now();
      (void)cni_->ReconcileGoneNetns();
    }
  }
}

bool Agent::RefreshAllocations() {
  if (!PathExists(options_.paths.PodResourcesSocket())) return false;  // no kubelet API here
  auto list = podresources_->ListPodDevices();
  std::lock_guard<std::mutex> lock(mu_);
  if (!list.ok()) {
    if (podresources_errors_++ % 30 == 0) {
      LogWarn(Component::kPodResources, "PodResources List failed: {}", list.status().message());
    }
    return false;
  }
  std::vector<PodDeviceHold> holds;
  std::map<std::string, uint64_t> allocated;
  // device -> pools holding it
  std::map<std::string, std::set<std::string>> held_via;
  for (const auto& entry : *list) {
    auto pool = pools_.find(entry.resource);
    if (pool == pools_.end()) continue;
    auto snap = pool->second->snapshot();
    for (const std::string& id : entry.device_ids) {
      const PoolUnit* unit = snap->FindUnit(id);
      if (unit == nullptr) continue;
      allocated[entry.resource]++;
      held_via[unit->device].insert(entry.resource);
      PodDeviceHold h{entry.ns, entry.pod, entry.container, entry.resource, unit->device};
      if (std::find(holds.begin(), holds.end(), h) == holds.end()) holds.push_back(std::move(h));
    }
  }
  // A device held through one pool is withdrawn from every other pool when
  // either side is exclusive: no Pod may hold it exclusively while another
  // holds one of its tokens.
  std::map<std::string, std::set<std::string>> withdrawn;
  for (const PoolConfig& pool : config_.pools) {
    auto snap = pools_.at(pool.name)->snapshot();
    for (const PoolUnit& u : snap->units) {
      auto held = held_via.find(u.device);
      if (held == held_via.end()) continue;
      for (const std::string& other : held->second) {
        if (other == pool.name) continue;
        const PoolConfig* o = config_.FindPool(other);
        if (pool.mode == PoolMode::kExclusive || (o && o->mode == PoolMode::kExclusive)) {
          withdrawn[pool.name].insert(u.id);
        }
      }
    }
  }
  const bool changed =
      withdrawn != withdrawn_ || holds.size() != holds_.size() || allocated != allocated_units_;
  for (const auto& [pool, ids] : withdrawn) {
    if (withdrawn_[pool] != ids) {
      LogInfo(Component::kPodResources,
              "{}: {} unit(s) withdrawn while their device is held "
              "through another pool",
              pool, ids.size());
    }
  }
  holds_ = std::move(holds);
  allocated_units_ = std::move(allocated);
  withdrawn_ = std::move(withdrawn);
  if (changed) RebuildAllLocked();
  return true;
}

std::optional<cni_service::GrantedDevice> Agent::Resolve(const std::string& resource,
                                                         const std::string& device_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto pool = pools_.find(resource);
  if (pool == pools_.end()) return std::nullopt;
  auto snap = pool->second->snapshot();
  const PoolUnit* unit = snap->FindUnit(device_id);
  if (unit == nullptr) return std::nullopt;
  cni_service::GrantedDevice g;
  g.resource = resource;
  g.device_id = device_id;
  g.rdma_device = unit->device;
  g.exclusive = snap->mode == PoolMode::kExclusive;
  g.efa = snap->devices.at(unit->device).kind == DeviceKind::kEfa;
  return g;
}

std::vector<PodDeviceHold> Agent::holds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return holds_;
}

std::string Agent::MetricsText() const {
  MetricsInput in;
  in.version = "0.1.0";
  std::vector<RegistrationStatus> regs = plugins_->Status();
  in.kubelet_restarts = plugins_->kubelet_restarts();
  {
    std::lock_guard<std::mutex> lock(mu_);
    in.devices = node_.inventory.devices;
    in.health = node_.health;
    for (const auto& [name, dev] : node_.known) {
      if (!node_.inventory.Find(name)) in.health[name] = DeviceHealth{false, "device removed"};
    }
    for (const auto& d : node_.inventory.devices) in.health.emplace(d.name, DeviceHealth{});
    in.holds = holds_;
    in.podresources_errors = podresources_errors_;
    in.discovery_warnings = node_.inventory.warnings.size();
    for (const PoolConfig& pool : config_.pools) {
      auto& state = pools_.at(pool.name);
      auto snap = state->snapshot();
      PoolMetrics m;
      m.resource = pool.name;
      m.mode = PoolModeName(pool.mode);
      m.units = snap->units.size();
      m.healthy_units = snap->HealthyCount();
      auto a = allocated_units_.find(pool.name);
      m.allocated_units = a == allocated_units_.end() ? 0 : a->second;
      for (const auto& r : regs) {
        if (r.resource == pool.name) {
          m.registered = r.registered;
          m.registration_mode = r.mode;
        }
      }
      const uint64_t calls = state->stats().allocate_calls.load();
      m.allocate_error = state->stats().allocate_errors.load();
      m.allocate_ok = calls - m.allocate_error;
      m.allocate_latency = state->stats().allocate_latency.Read();
      in.pools.push_back(std::move(m));
    }
  }
  std::string out = RenderMetrics(in, options_.paths);
  if (doctor_) out += doctor_->MetricsText();
  return out;
}

std::string Agent::PeersJson() const {
  if (doctor_) return doctor_->PeersJson();
  nlohmann::json out{{"verdict", "error"},
                     {"error", "doctor not running: " + doctor_error_},
                     {"pairs", nlohmann::json::array()}};
  return out.dump(2) + "\n";
}

std::string Agent::NotReadyReason() const {
  std::string why;
  for (const RegistrationStatus& r : plugins_->Status()) {
    if (!r.registered) {
      absl::StrAppend(&why, why.empty() ? "" : "; ", r.resource, " not registered",
                      r.last_error.empty() ? "" : ": " + r.last_error);
    }
  }
  return why;
}

std::string Agent::NodeJson() const {
  using nlohmann::json;
  json out;
  std::vector<RegistrationStatus> regs = plugins_->Status();
  std::lock_guard<std::mutex> lock(mu_);
  json devices = json::array();
  for (const auto& [name, dev] : node_.known) {
    const RdmaDevice* live = node_.inventory.Find(name);
    json d;
    d["name"] = name;
    d["kind"] = std::string(DeviceKindName(dev.kind));
    d["present"] = live != nullptr;
    auto h = node_.health.find(name);
    bool healthy = live != nullptr && (h == node_.health.end() || h->second.healthy);
    d["healthy"] = healthy;
    d["reason"] =
        live == nullptr ? "device removed" : (h == node_.health.end() ? "" : h->second.reason);
    d["pci"] = dev.pci ? json(dev.pci->address) : json(nullptr);
    d["numa_node"] = dev.numa_node();
    d["uverbs"] = {{"path", HostDevicePath(dev.uverbs.rel_path)},
                   {"major", dev.uverbs.major},
                   {"minor", dev.uverbs.minor}};
    d["netdev"] = dev.PrimaryNetdev();
    d["link_layer"] = dev.LinkLayer();
    d["pools"] = PoolsSelecting(config_, dev);
    json ports = json::array();
    for (const PortInfo& p : (live ? live->ports : dev.ports)) {
      ports.push_back({{"port", p.number},
                       {"state", p.state},
                       {"phys_state", p.phys_state},
                       {"link_layer", p.link_layer},
                       {"rate", p.rate},
                       {"active", p.active()}});
    }
    d["ports"] = ports;
    devices.push_back(d);
  }
  out["devices"] = devices;
  out["rdma_cm"] = node_.inventory.rdma_cm ? json({{"major", node_.inventory.rdma_cm->major},
                                                   {"minor", node_.inventory.rdma_cm->minor}})
                                           : json(nullptr);
  json pools = json::array();
  for (const PoolConfig& pool : config_.pools) {
    auto snap = pools_.at(pool.name)->snapshot();
    json p;
    p["resource"] = pool.name;
    p["mode"] = PoolModeName(pool.mode);
    p["units"] = snap->units.size();
    p["healthy_units"] = snap->HealthyCount();
    auto a = allocated_units_.find(pool.name);
    p["allocated_units"] = a == allocated_units_.end() ? 0 : a->second;
    auto w = withdrawn_.find(pool.name);
    p["withdrawn_units"] = w == withdrawn_.end() ? 0 : w->second.size();
    p["registered"] = false;
    for (const auto& r : regs) {
      if (r.resource == pool.name) {
        p["registered"] = r.registered;
        p["registration"] = r.mode;
        p["socket"] = r.socket;
      }
    }
    pools.push_back(p);
  }
  out["pools"] = pools;
  json holds = json::array();
  for (const PodDeviceHold& h : holds_) {
    holds.push_back({{"namespace", h.ns},
                     {"pod", h.pod},
                     {"container", h.container},
                     {"resource", h.resource},
                     {"device", h.device}});
  }
  out["allocations"] = holds;
  out["warnings"] = node_.inventory.warnings;
  return out.dump(2) + "\n";
}

void Agent::OnNodeChanged(const NodeInventory& inventory,
                          const std::map<std::string, DeviceHealth>& health) {
  std::lock_guard<std::mutex> lock(mu_);
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
  std::lock_guard<std::mutex> lock(mu_);
  return node_;
}

Config Agent::config() const {
  std::lock_guard<std::mutex> lock(mu_);
  return config_;
}

std::vector<std::shared_ptr<PoolState>> Agent::pools() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<PoolState>> out;
  for (const PoolConfig& p : config_.pools) out.push_back(pools_.at(p.name));
  return out;
}

}  // namespace fabric
