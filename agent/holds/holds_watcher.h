// HoldsWatcher: the owner of the holds loop's kubelet side. Allocate records
// a grant (PoolRegistry::Claim) and asks for a refresh; this watcher then
// observes what the kubelet holds and hands the registry one KubeletView per
// round, saying whether that view may be incomplete.
//
// Each round reads two sources:
//  - PodResources List: Pods by namespace and name, app and sidecar
//    containers only, and empty right after a kubelet restart (it is served
//    before the pod manager is filled);
//  - the kubelet checkpoint: every allocation by Pod UID, init containers
//    included, kept across kubelet restarts.
// The view is their join. It is marked incomplete, so the registry lifts no
// hold and releases no grant, while
//  - a kubelet restart has not settled (restart_settle after the PodResources
//    socket was replaced, or after List answers again following failures);
//  - List fails, for at most list_failure_bound; past it the view is the
//    checkpoint alone (or nothing), grants lapse by their TTL, and
//    NotReadyReason() says so.
#ifndef FABRIC_AGENT_HOLDS_HOLDS_WATCHER_H_
#define FABRIC_AGENT_HOLDS_HOLDS_WATCHER_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "agent/base/mono_clock.h"
#include "agent/holds/kubelet_view.h"
#include "agent/podresources/kubelet_checkpoint.h"
#include "agent/podresources/pod_devices.h"

namespace fabric::holds {

struct HoldsWatcherOptions {
  std::string podresources_socket;  // HostPaths::PodResourcesSocket()
  std::string checkpoint_path;      // <device-plugin dir>/kubelet_internal_checkpoint
  absl::Duration interval = absl::Seconds(2);
  // The real kubelet v1.20.2 listed a running static Pod again 68 ms after
  // it served an empty List; Pods from the API server take seconds more.
  absl::Duration restart_settle = absl::Seconds(30);
  // How long a failing List keeps every hold and grant before the view falls
  // back to the checkpoint alone.
  absl::Duration list_failure_bound = absl::Minutes(5);
  // A checkpoint entry of a Pod UID that an answering List never showed (an
  // initializing Pod whose app containers hold no device; a Pod that ended
  // before the agent started; any Pod during a restart) is held for at most
  // this long. While List fails, or on a node without it, the checkpoint
  // stands as it is.
  // The kubelet keeps an ended Pod's entries until its next allocation, so
  // without a bound they could withdraw a device indefinitely. A UID List did
  // show is dropped as soon as a settled List no longer shows its Pod.
  absl::Duration unlisted_hold_max = absl::Minutes(10);
  // The kubelet records an allocation right after Allocate returns.
  absl::Duration after_grant_delay = absl::Milliseconds(100);
  std::function<absl::Time()> clock = [] { return MonotonicNow(); };
};

// What the watcher knows of its sources, for /readyz, /v1/node and metrics.
struct HoldsStatus {
  bool podresources_seen = false;  // the socket existed once
  uint64_t list_errors = 0;
  absl::Duration list_failing_for = absl::ZeroDuration();  // 0 while List answers
  std::string last_list_error;
  bool checkpoint_ok = false;
  std::string checkpoint_error;   // why not, when !checkpoint_ok
  uint64_t kubelet_restarts = 0;  // restarts seen through the PodResources socket
  bool complete = true;           // the last view
  std::string incomplete_reason;
  uint64_t rounds = 0;
  // Non-empty while List has failed for longer than list_failure_bound.
  std::string not_ready_reason;
};

class HoldsWatcher {
 public:
  using Sink = std::function<void(const KubeletView&)>;
  // `source` and the callbacks outlive the watcher. `no_source` runs instead
  // of `sink` on a node with neither PodResources nor a checkpoint (grants
  // then lapse by TTL only). `after_round` runs after every round.
  HoldsWatcher(HoldsWatcherOptions options, podresources::PodResourcesSource* source, Sink sink,
               std::function<void()> no_source, std::function<void()> after_round = {});
  ~HoldsWatcher();

  void Start();
  void Stop();
  // A grant was recorded: observe soon (after after_grant_delay).
  void RequestRefresh();
  // One round now, on the caller's thread (tests; the thread is not needed).
  void RunRound();
  HoldsStatus status() const;

 private:
  void Loop();
  // Applies unlisted_hold_max and drops entries of Pods List showed before
  // and no longer shows (only when `list_settled`).
  std::vector<podresources::PodDevices> BoundUnlisted(std::vector<podresources::PodDevices> joined,
                                                      absl::Time now, bool list_settled)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(round_mu_);

  const HoldsWatcherOptions options_;
  podresources::PodResourcesSource* const source_;
  const Sink sink_;
  const std::function<void()> no_source_;
  const std::function<void()> after_round_;
  podresources::KubeletCheckpointReader checkpoint_;  // used by rounds only

  // Round state: rounds run on one thread at a time (round_mu_).
  std::mutex round_mu_;
  uint64_t socket_ino_ ABSL_GUARDED_BY(round_mu_) = 0;  // the socket's identity
  bool replaced_unsettled_ ABSL_GUARDED_BY(round_mu_) = false;
  absl::Time settle_from_ ABSL_GUARDED_BY(round_mu_) = absl::InfinitePast();
  absl::Time failing_since_ ABSL_GUARDED_BY(round_mu_) = absl::InfiniteFuture();
  std::string settle_why_ ABSL_GUARDED_BY(round_mu_);
  std::set<std::string> listed_uids_ ABSL_GUARDED_BY(round_mu_);  // matched to a listed Pod
  std::set<std::string> left_uids_ ABSL_GUARDED_BY(round_mu_);    // ... that List shows no more
  // (uid, container, resource) of unlisted checkpoint entries -> first seen
  std::map<std::tuple<std::string, std::string, std::string>, absl::Time> unlisted_since_
      ABSL_GUARDED_BY(round_mu_);

  mutable std::mutex status_mu_;
  HoldsStatus status_ ABSL_GUARDED_BY(status_mu_);

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool refresh_requested_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace fabric::holds

#endif  // FABRIC_AGENT_HOLDS_HOLDS_WATCHER_H_
