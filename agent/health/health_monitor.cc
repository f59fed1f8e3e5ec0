#include "agent/health/health_monitor.h"

#include "absl/strings/str_cat.h"
#include "agent/base/file_util.h"
#include "agent/base/logging.h"
#include "agent/base/mono_clock.h"
#include "agent/sysfs/sysfs_discovery.h"

namespace fabric {

HealthMonitor::HealthMonitor(HostPaths paths, HealthConfig config, SampleSource latest_sample,
                             Publish publish)
    : paths_(std::move(paths)),
      layout_(paths_),
      latest_sample_(std::move(latest_sample)),
      publish_(std::move(publish)),
      config_(std::move(config)) {}

HealthMonitor::~HealthMonitor() { Stop(); }

std::map<std::string, DeviceHealth> HealthMonitor::Prime(const NodeInventory& inventory,
                                                         absl::Time now) {
  std::lock_guard<std::mutex> lock(mu_);
  inventory_ = inventory;
  health_ = Evaluate(now);
  return health_;
}

void HealthMonitor::SetInventory(const NodeInventory& inventory, absl::Time now) {
  std::lock_guard<std::mutex> publishing(publish_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    inventory_ = inventory;
    // Forget the tracking of devices that are gone: memory stays flat under
    // devices that come and go.
    for (auto it = ports_.begin(); it != ports_.end();) {
      it = inventory_.Find(it->first) ? std::next(it) : ports_.erase(it);
    }
    for (auto it = efa_.begin(); it != efa_.end();) {
      it = inventory_.Find(it->first) ? std::next(it) : efa_.erase(it);
    }
  }
  EvaluateAndPublishLocked(now, /*force=*/true);
}

void HealthMonitor::Start() {
  thread_ = std::thread([this] {
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        const auto period = std::chrono::milliseconds(config_.poll_interval_ms);
        if (stop_cv_.wait_for(lock, period, [this] { return stop_; })) return;
      }
      Tick(MonotonicNow());
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

bool HealthMonitor::CheckPorts(RdmaDevice& dev, absl::Time now, DeviceHealth* h) {
  const absl::Duration hold = absl::Milliseconds(config_.port_hold_down_ms);
  bool changed_state = false;
  std::string problem;
  for (PortInfo& port : dev.ports) {
    auto state = ReadTrimmed(layout_.PortStateFile(dev.name, port.number));
    auto phys = ReadTrimmed(layout_.PortPhysStateFile(dev.name, port.number));
    PortTrack& track = ports_[dev.name][port.number];
    int sc = 0, pc = 0;
    std::string sn, pn;
    if (!state.ok() || !phys.ok() || !ParseNumberedState(*state, &sc, &sn) ||
        !ParseNumberedState(*phys, &pc, &pn)) {
      // A failed read says nothing about the port (EMFILE, a device going
      // away, garbage): the previous verdict stands until a read succeeds.
      if (track.down) {
        problem = problem.empty() ? track.last_problem : problem + ", " + track.last_problem;
      }
      continue;
    }
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
    h->cause = HealthCause::kPortDown;
  }
  return changed_state;
}

namespace {

// A counter of `c`: device-level on current kernels, under port 1 on older
// ones (< ~5.14), as the driver placed it.
const CounterValue* FindErrorCounter(const sampler::DeviceCounters& c, const std::string& name) {
  const CounterValue* at_port = nullptr;
  for (const CounterValue& v : c.hw) {
    if (v.name != name) continue;
    if (v.port == "0") return &v;
    if (v.port == "1" && at_port == nullptr) at_port = &v;
  }
  return at_port;
}

}  // namespace

void HealthMonitor::CheckEfa(const RdmaDevice& dev, const sampler::Sample* sample, absl::Time now,
                             DeviceHealth* h) {
  EfaTrack& track = efa_[dev.name];
  const EfaHealthRule& rule = config_.efa;
  // A check compares the counters of the newest sample with those of the
  // sample the previous check used: the growth window is the check interval
  // or the sample period, whichever is longer.
  if (now - track.last_check >= absl::Milliseconds(rule.check_interval_ms) && sample != nullptr &&
      sample->seq != track.last_seq) {
    track.last_check = now;
    track.last_seq = sample->seq;
    const sampler::DeviceCounters* counters = nullptr;
    for (const sampler::DeviceCounters& c : sample->counters) {
      if (c.device == dev.name) counters = &c;
    }
    for (const auto& counter : rule.error_counters) {
      // Not sampled (a device newer than the sample) or unreadable: nothing
      // learnt; the previous verdict and value stand.
      const CounterValue* v = counters ? FindErrorCounter(*counters, counter.name) : nullptr;
      if (v == nullptr) continue;
      auto last = track.last.find(counter.name);
      if (last != track.last.end() && v->value >= last->second &&
          v->value - last->second >= counter.threshold) {
        track.last_growth = now;
        track.last_problem = absl::StrCat(counter.name, " grew by ", v->value - last->second,
                                          " (threshold ", counter.threshold, ")");
      }
      track.last[counter.name] = v->value;
    }
  }
  if (track.last_growth != absl::InfinitePast() &&
      now - track.last_growth < absl::Milliseconds(rule.quiet_period_ms)) {
    h->healthy = false;
    h->reason = track.last_problem;
    h->cause = HealthCause::kErrorCounters;
  }
}

std::map<std::string, DeviceHealth> HealthMonitor::Evaluate(absl::Time now) {
  std::map<std::string, DeviceHealth> out;
  // One sample for every device of this evaluation (a short lock in the
  // sampler; no file is read here).
  const sampler::SamplePtr sample = latest_sample_ ? latest_sample_() : nullptr;
  for (RdmaDevice& dev : inventory_.devices) {
    if (inventory_.in_pod_netns.count(dev.name)) {
      // In a Pod's netns: the host cannot see its ports or counters. Held.
      auto last = health_.find(dev.name);
      out[dev.name] = last == health_.end() ? DeviceHealth{} : last->second;
      continue;
    }
    DeviceHealth h;
    // EFA ports are hard-wired ACTIVE by the driver: only counters tell.
    if (dev.kind == DeviceKind::kEfa) {
      CheckEfa(dev, sample.get(), now, &h);
    } else {
      CheckPorts(dev, now, &h);
    }
    out[dev.name] = h;
  }
  return out;
}

bool HealthMonitor::Tick(absl::Time now) {
  std::lock_guard<std::mutex> publishing(publish_mu_);
  return EvaluateAndPublishLocked(now, /*force=*/false);
}

bool HealthMonitor::EvaluateAndPublishLocked(absl::Time now, bool force) {
  NodeInventory inventory;
  std::map<std::string, DeviceHealth> health;
  {
    std::lock_guard<std::mutex> lock(mu_);
    health = Evaluate(now);
    if (!force && health == health_) return false;
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
