// PoolState: the live state of one resource pool — its current snapshot and
// the open ListAndWatch streams. It outlives server restarts (kubelet restarts
// re-create the gRPC server; the pool and its counters stay).
#ifndef FABRIC_PLUGIN_DEVICEPLUGIN_POOL_STATE_H_
#define FABRIC_PLUGIN_DEVICEPLUGIN_POOL_STATE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>

#include "absl/base/thread_annotations.h"
#include "agent/metrics/metrics.h"
#include "deviceplugin/v1beta1/api.pb.h"
#include "plugin/deviceplugin/pool_snapshot.h"

namespace fabric {

// A ListAndWatch stream that wants every new device list.
class DeviceListSubscriber {
 public:
  virtual ~DeviceListSubscriber() = default;
  // Must not block: called with PoolState's lock held.
  virtual void Push(std::shared_ptr<const v1beta1::ListAndWatchResponse> msg) = 0;
  // The agent ends the stream (shutdown or server restart).
  virtual void Close() = 0;
};

// Counters exported as metrics.
struct PoolStats {
  std::atomic<uint64_t> allocate_calls{0};
  std::atomic<uint64_t> allocate_errors{0};
  std::atomic<uint64_t> preferred_calls{0};
  std::atomic<uint64_t> list_and_watch_messages{0};
  LatencyHistogram allocate_latency;
};

class PoolState {
 public:
  explicit PoolState(std::shared_ptr<const PoolSnapshot> initial);

  const std::string& resource() const { return resource_; }
  std::shared_ptr<const PoolSnapshot> snapshot() const;
  std::shared_ptr<const v1beta1::ListAndWatchResponse> device_list() const;

  // Installs a new snapshot; every open stream gets the new list unless the
  // advertised list is unchanged. Returns true when it changed.
  bool Update(std::shared_ptr<const PoolSnapshot> next);

  // Streams register on open and unregister in OnDone. Subscribe returns the
  // current list so the first message is consistent with later pushes.
  std::shared_ptr<const v1beta1::ListAndWatchResponse> Subscribe(DeviceListSubscriber* s);
  void Unsubscribe(DeviceListSubscriber* s);
  // Ends every open stream.
  void CloseStreams();
  size_t open_streams() const;

  PoolStats& stats() { return stats_; }

  // Called after every successful Allocate (the agent re-reads PodResources
  // soon after, to attribute and to withdraw conflicting units).
  void SetAllocateHook(std::function<void()> hook);
  void AfterAllocate();

 private:
  const std::string resource_;
  mutable std::mutex mu_;
  std::shared_ptr<const PoolSnapshot> snapshot_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const v1beta1::ListAndWatchResponse> list_ ABSL_GUARDED_BY(mu_);
  std::set<DeviceListSubscriber*> subscribers_ ABSL_GUARDED_BY(mu_);
  std::function<void()> allocate_hook_ ABSL_GUARDED_BY(mu_);
  PoolStats stats_;
};

// The ListAndWatch message for a snapshot: every unit, "Healthy"/"Unhealthy",
// TopologyInfo only when the NUMA node is known (never a default node 0).
std::shared_ptr<const v1beta1::ListAndWatchResponse> MakeDeviceList(const PoolSnapshot& snap);

}  // namespace fabric

#endif  // FABRIC_PLUGIN_DEVICEPLUGIN_POOL_STATE_H_
