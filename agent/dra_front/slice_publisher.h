// SlicePublisher: keeps the API server's ResourceSlices for this node equal to
// what the pools publish (agent/dra builds them). Its own thread syncs on a
// Poke (a pool changed), on any change to our slices that the API server
// reports, and every resync period: List our slices, diff, create/update/
// delete. A conflict or failure is retried with backoff; the last good slices
// stay published meanwhile (the API server keeps them).
//
// The watch on our own slices is there for the kubelet: at its start (and 30 s
// after a driver goes away) it deletes every ResourceSlice of its node, ours
// included, and relies on the driver to publish them again at once (seen with
// kubelet v1.34.9: "Deleted ResourceSlices" fieldSelector=spec.nodeName=...).
// Without it the node would offer no devices until the next resync.
#ifndef FABRIC_AGENT_DRA_FRONT_SLICE_PUBLISHER_H_
#define FABRIC_AGENT_DRA_FRONT_SLICE_PUBLISHER_H_

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/dra/resource_slices.h"
#include "agent/kubeapi/kube_client.h"
#include "agent/kubeapi/watch.h"
#include "agent/pools/pool_snapshot.h"

namespace fabric::dra {

inline constexpr char kResourceSlicesPath[] = "/apis/resource.k8s.io/v1/resourceslices";

struct SlicePublisherOptions {
  std::string node_name;
  std::string driver = kDriverName;
  SliceOptions slices;
  absl::Duration resync = absl::Minutes(1);
  absl::Duration initial_backoff = absl::Milliseconds(500);
  absl::Duration max_backoff = absl::Seconds(30);
  // Runs on the publisher's thread before each sync it starts for a Poke or
  // the resync (the front re-sends health and holds there, outside the
  // pools' locks); not for a change the slice watch saw.
  std::function<void()> before_sync;
  // While this says false, nothing is written (checked every 200 ms): the
  // front holds the first sync until the holds are known, so a restarted
  // agent does not briefly publish what is held.
  std::function<bool()> ready;
  // Watch our slices and sync when someone else changes them. The first such
  // repair is at once; more within `repair_quiet` of the last wait
  // initial_backoff, doubling up to max_backoff.
  bool watch_slices = true;
  absl::Duration repair_quiet = absl::Minutes(1);
  absl::Duration watch_initial_backoff = absl::Seconds(1);
};

struct SlicePublisherStatus {
  bool synced = false;    // the last sync succeeded
  uint64_t syncs = 0;     // successful syncs
  uint64_t failures = 0;  // failed syncs
  uint64_t writes = 0;    // creates + updates + deletes sent
  size_t slices = 0;      // published by the last good sync
  size_t devices = 0;
  int64_t generation = 0;
  std::string last_error;
};

class SlicePublisher {
 public:
  using Pools = std::function<std::vector<std::shared_ptr<const PoolSnapshot>>()>;
  SlicePublisher(SlicePublisherOptions options, kubeapi::KubeClient* client, Pools pools);
  ~SlicePublisher();

  // One sync now, on the caller's thread (start-up and tests).
  absl::Status SyncNow();
  void Start();
  void Stop();
  // Something changed: sync soon (never blocks; called under pool locks).
  void Poke();
  SlicePublisherStatus status() const;

 private:
  class SliceEvents;  // the watch's handler: wakes the sync loop
  void Run();
  void OnSlicesChanged();
  std::string FieldSelector() const;

  const SlicePublisherOptions options_;
  kubeapi::KubeClient* const client_;
  const Pools pools_;
  std::mutex sync_mu_;  // one sync at a time
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool poked_ = false;           // the pools changed
  bool slices_changed_ = false;  // the API server's copy changed
  bool stop_ = false;
  SlicePublisherStatus status_;
  std::thread thread_;
  std::unique_ptr<SliceEvents> events_;
  std::unique_ptr<kubeapi::Watch> watch_;
  std::thread watch_thread_;
};

}  // namespace fabric::dra

#endif  // FABRIC_AGENT_DRA_FRONT_SLICE_PUBLISHER_H_
