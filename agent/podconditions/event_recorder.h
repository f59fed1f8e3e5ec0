// Events on Pods through events.k8s.io/v1 (reporting controller
// fabric.gpustack.ai/agent, reporting instance the node). A repeated event
// becomes a series (series.count, series.lastObservedTime) on the first
// object, never a new object per occurrence; at most one write per Pod per
// reason per `min_write_interval` (an occurrence inside it is written with the
// next Flush after it). An occurrence more than `series_gap` after the last
// one starts a new object, as client-go's recorder does. Not thread-safe: the
// writer's thread owns it.
#ifndef FABRIC_AGENT_PODCONDITIONS_EVENT_RECORDER_H_
#define FABRIC_AGENT_PODCONDITIONS_EVENT_RECORDER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/kubeapi/kube_client.h"
#include "agent/podconditions/conditions.h"

namespace fabric::podconditions {

inline constexpr char kReportingController[] = "fabric.gpustack.ai/agent";

struct EventRecorderOptions {
  std::string node;  // the reporting instance
  absl::Duration min_write_interval = absl::Minutes(1);
  absl::Duration series_gap = absl::Minutes(6);
  std::function<absl::Time()> now;  // wall clock (default absl::Now)
};

struct PodRef {
  std::string ns, name, uid;
};

class EventRecorder {
 public:
  EventRecorder(kubeapi::KubeClient* client, EventRecorderOptions options);

  // One occurrence; written at once when the budget allows.
  void Record(const PodRef& pod, const EventSpec& event);
  // Writes what waited for the budget. Returns the first failure to reach
  // the API server (those writes wait for the next Flush).
  absl::Status Flush();
  // Drops the series of Pods not in `live` (UIDs).
  void Retain(const std::function<bool(const std::string& uid)>& live);

  uint64_t writes() const { return writes_; }
  uint64_t errors() const { return errors_; }

 private:
  struct Series {
    PodRef pod;
    EventSpec event;
    std::string name;  // "" until created
    int count = 0;
    absl::Time first, last_observed, last_write = absl::InfinitePast();
    bool dirty = false;
  };
  absl::Status Write(Series& s, absl::Time now);

  kubeapi::KubeClient* const client_;
  EventRecorderOptions options_;
  std::map<std::pair<std::string, std::string>, Series> series_;  // (uid, reason)
  uint64_t writes_ = 0, errors_ = 0;
};

}  // namespace fabric::podconditions

#endif  // FABRIC_AGENT_PODCONDITIONS_EVENT_RECORDER_H_
