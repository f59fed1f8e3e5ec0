// Keeps the Pods' fabric.gpustack.ai/ conditions in the API server in line
// with the verdicts. Once per sample (Tick), for every Pod of interest that
// runs on this node: decides the conditions (conditions.h), records the
// Events their changes call for (event_recorder.h), and patches pods/status
// only when a value differs from what the API server holds:
//  - a strategic-merge patch of status.conditions keyed by type, with the
//    Pod's UID as precondition (the kubelet's own shape), naming only
//    fabric.gpustack.ai/ types, so the kubelet's conditions are untouched;
//  - lastTransitionTime moves only with the status;
//  - at most one patch per Pod per Tick; a change that keeps every status
//    (a reason or message alone, e.g. Rdma -> Idle) waits until
//    `detail_refresh` after the Pod's last patch, so bursty traffic cannot
//    turn into a patch per burst;
//  - while the API server cannot be reached, nothing is written and the
//    next attempt backs off (1 s doubling to `max_backoff`); a write refused
//    for one Pod (RBAC, the admission policy) waits `refused_backoff` for it;
//  - after an agent restart, what the API server holds stands until a window
//    is conclusive (Conclusive: at least 2 samples spanning the whole window):
//    a condition the Pod had when this agent first saw it is neither patched
//    nor the cause of an Event before that, and a change of its reason or
//    message alone waits `detail_refresh` from that first sight, as if the
//    earlier agent had just written it.
// Not thread-safe: one thread calls Tick (controller.h).
#ifndef FABRIC_AGENT_PODCONDITIONS_WRITER_H_
#define FABRIC_AGENT_PODCONDITIONS_WRITER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "absl/time/time.h"
#include "agent/kubeapi/kube_client.h"
#include "agent/observe/transport.h"
#include "agent/podconditions/conditions.h"
#include "agent/podconditions/event_recorder.h"
#include "agent/podconditions/node_pods.h"

namespace fabric::podconditions {

struct WriterOptions {
  absl::Duration attach_grace = kDefaultAttachGrace;
  absl::Duration detail_refresh = absl::Minutes(5);
  absl::Duration min_backoff = absl::Seconds(1);
  absl::Duration max_backoff = absl::Seconds(60);
  absl::Duration refused_backoff = absl::Minutes(5);
  std::function<absl::Time()> now;  // wall clock (default absl::Now)
};

struct WriterStats {
  uint64_t ticks = 0;
  uint64_t patches = 0;          // pods/status patches that succeeded
  uint64_t patch_errors = 0;     // failed or refused
  uint64_t skipped_backoff = 0;  // ticks skipped while the API server was away
  size_t pods = 0;               // Pods of interest on this node, last tick
};

// Whether a window may overrule a condition the API server holds: it has 2
// samples or more and reaches back the whole length asked for. The first
// windows after an agent start do not (one sample, then a few seconds whose
// verdicts can say idle or tcp where the full window says rdma).
bool Conclusive(const observe::WindowBounds& window);

class ConditionWriter {
 public:
  ConditionWriter(kubeapi::KubeClient* client, NodePods* pods, EventRecorder* events,
                  WriterOptions options);

  void Tick(const observe::WindowResult& result);
  const WriterStats& stats() const { return stats_; }

 private:
  struct PodState {
    bool seen = false;  // the Pod was met in an earlier Tick
    PodMemory memory;
    std::optional<Condition> attached;  // FabricAttached as last decided (events)
    // Condition types the Pod had when this agent first saw it, until a
    // conclusive window (an earlier agent wrote them: they stand till then).
    std::set<std::string> inherited;
    absl::Time last_patch = absl::InfinitePast();
    absl::Time refused_until = absl::InfinitePast();
  };
  // `d` with the inherited conditions as the API server holds them (no
  // patch, no event), and nothing learnt from this window.
  static void KeepInherited(const PodInfo& pod, const PodState& state, Desired& d);
  // False when the API server cannot be reached (stop this tick).
  bool Write(const PodInfo& pod, const Desired& desired, PodState& state, absl::Time now);
  enum class Change { kNone, kDetail, kStatus };  // kStatus: also a condition not there yet
  Change Compare(const Condition& want, const PodInfo& pod) const;

  kubeapi::KubeClient* const client_;
  NodePods* const pods_;
  EventRecorder* const events_;
  WriterOptions options_;
  std::map<std::string, PodState> state_;  // by UID
  absl::Time backoff_until_ = absl::InfinitePast();
  absl::Duration backoff_;
  WriterStats stats_;
};

}  // namespace fabric::podconditions

#endif  // FABRIC_AGENT_PODCONDITIONS_WRITER_H_
