// HealthMonitor: keeps per-device health current by polling only the files
// that matter (port state for RDMA) and the configured EFA error counters in
// the sampler's latest sample (agent/sampler, the one reader of counter
// files), and publishing a new view when a verdict changes. Every change
// carries a reason.
// It watches the devices it is given (SetInventory, from agent/inventory); it
// never lists devices. A device held in a Pod netns (NodeInventory::
// in_pod_netns) is not visible from the host: its last verdict is held.
#ifndef FABRIC_AGENT_HEALTH_HEALTH_MONITOR_H_
#define FABRIC_AGENT_HEALTH_HEALTH_MONITOR_H_

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "agent/base/host_paths.h"
#include "agent/config/config.h"
#include "agent/model/device.h"
#include "agent/sampler/sample.h"
#include "agent/sysfs/sysfs_layout.h"

namespace fabric {

class HealthMonitor {
 public:
  using Publish = std::function<void(const NodeInventory& inventory,
                                     const std::map<std::string, DeviceHealth>& health)>;
  // The newest sample (Sampler::Latest); null before the first one.
  using SampleSource = std::function<sampler::SamplePtr()>;
  // EFA error counters are read from `latest_sample`'s counters: a growth
  // shows at the first check after the sample that carries it, so detection
  // takes up to one sample period more than config.efa.check_interval_ms.
  HealthMonitor(HostPaths paths, HealthConfig config, SampleSource latest_sample, Publish publish);
  ~HealthMonitor();

  // Every `now` is on the monotonic clock, MonotonicNow()
  // (agent/base/mono_clock.h): the debounce and growth windows are
  // durations, which a wall-clock step must not stretch or cut.
  //
  // Takes the first inventory and evaluates health once, synchronously, so the
  // first advertisement already reflects a port that is down.
  std::map<std::string, DeviceHealth> Prime(const NodeInventory& inventory, absl::Time now);
  // A new device list (from the inventory): evaluated and published at once.
  void SetInventory(const NodeInventory& inventory, absl::Time now);
  // Polls every config.poll_interval_ms on its own thread.
  void Start();
  void Stop();
  void SetConfig(const HealthConfig& config);

  // One poll; returns true when it published. Public for deterministic tests.
  bool Tick(absl::Time now);

  std::map<std::string, DeviceHealth> health() const;
  uint64_t changes() const;

 private:
  struct PortTrack {
    bool down = false;                           // currently considered down
    absl::Time up_since = absl::InfinitePast();  // first seen up again after being down
    std::string last_problem;
  };
  struct EfaTrack {
    std::map<std::string, uint64_t> last;  // counter -> last value
    uint64_t last_seq = 0;                 // the sample `last` came from
    absl::Time last_check = absl::InfinitePast();
    absl::Time last_growth = absl::InfinitePast();
    std::string last_problem;
  };

  bool CheckPorts(RdmaDevice& dev, absl::Time now, DeviceHealth* h)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckEfa(const RdmaDevice& dev, const sampler::Sample* sample, absl::Time now,
                DeviceHealth* h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::map<std::string, DeviceHealth> Evaluate(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evaluates, logs the changes and publishes; `force` publishes unchanged
  // verdicts too (a new device list). Called with publish_mu_ held.
  bool EvaluateAndPublishLocked(absl::Time now, bool force);

  const HostPaths paths_;
  const SysfsLayout layout_;
  const SampleSource latest_sample_;
  const Publish publish_;
  // Held across evaluate+publish so two publishers (the poll thread and the
  // inventory's SetInventory) cannot deliver views out of order.
  std::mutex publish_mu_;
  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  HealthConfig config_ ABSL_GUARDED_BY(mu_);
  NodeInventory inventory_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, DeviceHealth> health_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::map<int, PortTrack>> ports_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, EfaTrack> efa_ ABSL_GUARDED_BY(mu_);
  uint64_t changes_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace fabric

#endif  // FABRIC_AGENT_HEALTH_HEALTH_MONITOR_H_
