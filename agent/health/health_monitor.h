// HealthMonitor: keeps the node's device set and per-device health current by
// polling only the files that matter (directory listings for hot-plug, port
// state for RDMA, configured error counters for EFA) and publishing a new view
// when anything changes. Every change carries a reason.
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

namespace fabric {

class HealthMonitor {
 public:
  using Publish = std::function<void(const NodeInventory& inventory,
                                     const std::map<std::string, DeviceHealth>& health)>;
  HealthMonitor(HostPaths paths, HealthConfig config, Publish publish);
  ~HealthMonitor();

  // Takes the first inventory and evaluates health once, synchronously, so the
  // first advertisement already reflects a port that is down.
  std::map<std::string, DeviceHealth> Prime(const NodeInventory& inventory, absl::Time now);
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
    std::map<std::string, uint64_t> last;     // counter -> last value
    std::map<std::string, std::string> path;  // counter -> file it was found in
    absl::Time last_check = absl::InfinitePast();
    absl::Time last_growth = absl::InfinitePast();
    std::string last_problem;
  };

  bool RefreshInventory(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool CheckPorts(RdmaDevice& dev, absl::Time now, DeviceHealth* h)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckEfa(const RdmaDevice& dev, absl::Time now, DeviceHealth* h)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::map<std::string, DeviceHealth> Evaluate(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const HostPaths paths_;
  const Publish publish_;
  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  HealthConfig config_ ABSL_GUARDED_BY(mu_);
  NodeInventory inventory_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> listing_ ABSL_GUARDED_BY(mu_);
  // Rediscover at this time even if the listing is unchanged (the last one
  // skipped a device or failed), with this backoff.
  absl::Time retry_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  absl::Duration retry_backoff_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  std::map<std::string, DeviceHealth> health_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::map<int, PortTrack>> ports_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, EfaTrack> efa_ ABSL_GUARDED_BY(mu_);
  uint64_t changes_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace fabric

#endif  // FABRIC_AGENT_HEALTH_HEALTH_MONITOR_H_
