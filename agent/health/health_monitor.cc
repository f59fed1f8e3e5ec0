#include "agent/health/health_monitor.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "agent/base/file_util.h"
#include "agent/base/logging.h"
#include "agent/discovery/sysfs_discovery.h"

namespace fabric {
namespace {

// Names in the two class directories: a change means hot-plug (add, remove,
// driver bind/unbind), which is when a full rediscovery is worth its cost.
std::vector<std::string> Listing(const HostPaths& paths) {
  std::vector<std::string> out;
  for (const char* dir : {"class/infiniband", "class/infiniband_verbs"}) {
    auto names = ListDirFast(paths.Sys(dir));
    if (names.ok()) out.insert(out.end(), names->begin(), names->end());
    out.push_back("|");
  }
  return out;
}

}  // namespace

HealthMonitor::HealthMonitor(HostPaths paths, HealthConfig config, Publish publish)
    : paths_(std::move(paths)), publish_(std::move(publish)), config_(std::move(config)) {}

HealthMonitor::~HealthMonitor() { Stop(); }

std::map<std::string, DeviceHealth> HealthMonitor::Prime(const NodeInventory& inventory,
                                                         absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  inventory_ = inventory;
  listing_ = Listing(paths_);
  if (!inventory.warnings.empty()) retry_at_ = now;  // see RefreshInventory
  health_ = Evaluate(now);
  return health_;
}

void HealthMonitor::Start() {
  thread_ = std::thread([this] {
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        const auto period = std::chrono::milliseconds(config_.poll_interval_ms);
        if (stop_cv_.wait_for(lock, period, [this] { return stop_; })) return;
      }
      Tick(absl::Now());
    }
  });
}

void HealthMonitor::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void HealthMonitor::SetConfig(const HealthConfig& config) {
  std::lock_guard<std::mutex> lock(mu_);
  config_ = config;
}

std::map<std::string, DeviceHealth> HealthMonitor::health() const {
  std::lock_guard<std::mutex> lock(mu_);
  return health_;
}

uint64_t HealthMonitor::changes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return changes_;
}

bool HealthMonitor::RefreshInventory(absl::Time now) {
  std::vector<std::string> listing = Listing(paths_);
  const bool retry = listing == listing_;
  if (retry && now < retry_at_) return false;
  listing_ = std::move(listing);
  auto inv = DiscoverNode(paths_);
  // A device skipped for a file it could not read (mid hot-plug, a transient
  // error) would otherwise stay "removed" until some other device changes the
  // listing: look again, backing off 1 s doubling to 10 s while it persists.
  if (!inv.ok() || !inv->warnings.empty()) {
    retry_backoff_ = std::clamp(retry_backoff_ * 2, absl::Seconds(1), absl::Seconds(10));
    retry_at_ = now + retry_backoff_;
  } else {
    retry_backoff_ = absl::ZeroDuration();
    retry_at_ = absl::InfiniteFuture();
  }
  if (!inv.ok()) {
    LogWarn(Component::kHealth, "rediscovery failed, keeping the last device set: {}",
            inv.status().message());
    return false;
  }
  // A retry that finds the same devices is not a change worth publishing.
  const bool same =
      retry && std::equal(inv->devices.begin(), inv->devices.end(), inventory_.devices.begin(),
                          inventory_.devices.end(), [](const RdmaDevice& a, const RdmaDevice& b) {
                            return a.name == b.name;
                          });
  inventory_ = *inv;
  return !same;
}

bool HealthMonitor::CheckPorts(RdmaDevice& dev, absl::Time now, DeviceHealth* h) {
  const absl::Duration hold = absl::Milliseconds(config_.port_hold_down_ms);
  bool changed_state = false;
  std::string problem;
  for (PortInfo& port : dev.ports) {
    const std::string dir =
        paths_.Sys(absl::StrCat("class/infiniband/", dev.name, "/ports/", port.number));
    auto state = ReadTrimmed(dir + "/state");
    auto phys = ReadTrimmed(dir + "/phys_state");
    PortTrack& track = ports_[dev.name][port.number];
    if (!state.ok() || !phys.ok()) {
      // Gone between listing and read: the next listing change rediscovers it.
      continue;
    }
    int sc = 0, pc = 0;
    std::string sn, pn;
    if (!ParseNumberedState(*state, &sc, &sn) || !ParseNumberedState(*phys, &pc, &pn)) continue;
    if (sc != port.state_code || pc != port.phys_state_code) changed_state = true;
    port.state_code = sc;
    port.state = sn;
    port.phys_state_code = pc;
    port.phys_state = pn;
    if (!port.active()) {
      track.down = true;
      track.up_since = absl::InfinitePast();
      track.last_problem = absl::StrCat("port ", port.number, " ", sn, "/", pn);
      problem = problem.empty() ? track.last_problem : problem + ", " + track.last_problem;
    } else if (track.down) {
      // Back up: Healthy only after it stayed up for the hold-down, so a
      // flapping link does not spam the kubelet.
      if (track.up_since == absl::InfinitePast()) track.up_since = now;
      if (now - track.up_since >= hold) {
        track.down = false;
        track.up_since = absl::InfinitePast();
      } else if (problem.empty()) {
        // Same reason as while down: no new message while it settles.
        problem = track.last_problem;
      }
    }
  }
  if (!problem.empty()) {
    h->healthy = false;
    h->reason = problem;
  }
  return changed_state;
}

void HealthMonitor::CheckEfa(const RdmaDevice& dev, absl::Time now, DeviceHealth* h) {
  EfaTrack& track = efa_[dev.name];
  const EfaHealthRule& rule = config_.efa;
  if (now - track.last_check >= absl::Milliseconds(rule.check_interval_ms)) {
    track.last_check = now;
    const std::string base = paths_.Sys("class/infiniband/" + dev.name);
    for (const auto& counter : rule.error_counters) {
      // Device-level on current kernels; under the port on older ones (< ~5.14).
      // Remember where each counter was found instead of failing a read per poll.
      std::string& where = track.path[counter.name];
      absl::StatusOr<uint64_t> v = absl::NotFoundError("");
      if (!where.empty()) v = ReadU64(where);
      if (!v.ok()) {
        where.clear();
        for (const char* dir : {"/hw_counters/", "/ports/1/hw_counters/"}) {
          const std::string candidate = absl::StrCat(base, dir, counter.name);
          v = ReadU64(candidate);
          if (v.ok()) {
            where = candidate;
            break;
          }
        }
      }
      if (!v.ok()) continue;
      auto last = track.last.find(counter.name);
      if (last != track.last.end() && *v >= last->second &&
          *v - last->second >= counter.threshold) {
        track.last_growth = now;
        track.last_problem = absl::StrCat(counter.name, " grew by ", *v - last->second,
                                          " (threshold ", counter.threshold, ")");
      }
      track.last[counter.name] = *v;
    }
  }
  if (track.last_growth != absl::InfinitePast() &&
      now - track.last_growth < absl::Milliseconds(rule.quiet_period_ms)) {
    h->healthy = false;
    h->reason = track.last_problem;
  }
}

std::map<std::string, DeviceHealth> HealthMonitor::Evaluate(absl::Time now) {
  std::map<std::string, DeviceHealth> out;
  for (RdmaDevice& dev : inventory_.devices) {
    DeviceHealth h;
    // EFA ports are hard-wired ACTIVE by the driver: only counters tell.
    if (dev.kind == DeviceKind::kEfa) {
      CheckEfa(dev, now, &h);
    } else {
      CheckPorts(dev, now, &h);
    }
    out[dev.name] = h;
  }
  return out;
}

bool HealthMonitor::Tick(absl::Time now) {
  NodeInventory inventory;
  std::map<std::string, DeviceHealth> health;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const bool devices_changed = RefreshInventory(now);
    health = Evaluate(now);
    if (!devices_changed && health == health_) return false;
    for (const auto& [name, h] : health) {
      auto old = health_.find(name);
      if (old != health_.end() && old->second == h) continue;
      if (h.healthy) {
        LogInfo(Component::kHealth, "{} is Healthy{}", name,
                old == health_.end() ? " (new device)" : "");
      } else {
        LogWarn(Component::kHealth, "{} is Unhealthy: {}", name, h.reason);
      }
    }
    for (const auto& [name, h] : health_) {
      if (!health.count(name)) LogWarn(Component::kHealth, "{} was removed", name);
    }
    health_ = health;
    changes_++;
    inventory = inventory_;
  }
  publish_(inventory, health);
  return true;
}

}  // namespace fabric
