// Events on Pods through events.k8s.io/v1 (reporting controller
// fabric.gpustack.ai/agent, reporting instance the node). Occurrences are
// keyed as client-go's events recorder keys them: by the Pod, the reason and
// the note (action, controller and type are this recorder's own), so an
// occurrence with another note is an Event of its own. A repeated one becomes
// a series (series.count, series.lastObservedTime) on the first object,
// never a new object per occurrence; an occurrence more than `series_gap`
// after the last one starts a new object, as client-go's recorder does. At
// most one write per Pod per reason per `min_write_interval` (an occurrence
// inside it is written with the next Flush after it).
//
// A restarted agent does not start new objects for series an earlier agent
// began: before it creates the first Event of a Pod (unless NoHistory said
// there is none) it lists the Events the API server holds for that Pod
// (field selector regarding.uid), and an occurrence whose key matches one
// this node's agent wrote and last observed within `series_gap` carries that
// object's series on. Not thread-safe: the writer's thread owns it.
#ifndef FABRIC_AGENT_PODCONDITIONS_EVENT_RECORDER_H_
#define FABRIC_AGENT_PODCONDITIONS_EVENT_RECORDER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
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
  // The Pod has no Event of an earlier agent to carry on (this agent writes
  // its first conditions): its first Event is created without a list.
  void NoHistory(const std::string& uid) { held_.try_emplace(uid); }
  // Drops the series of Pods not in `live` (UIDs), and series past their gap.
  void Retain(const std::function<bool(const std::string& uid)>& live);

  uint64_t writes() const { return writes_; }
  uint64_t errors() const { return errors_; }

 private:
  struct Series {
    PodRef pod;
    EventSpec event;
    std::string name;  // "" until created (or found on the API server)
    int count = 0;
    absl::Time first, last_observed;
    bool dirty = false;
    bool looked_up = false;  // matched against the Events the API server held
  };
  // An Event this node's agent wrote before (this process, or an earlier one).
  struct Held {
    std::string name;
    int count = 1;
    absl::Time first, last_observed;
  };
  using Key = std::tuple<std::string, std::string, std::string>;  // (uid, reason, note)
  absl::Status Write(Series& s, absl::Time now);
  // The time of the last write of the series' (Pod, reason); InfinitePast.
  absl::Time& LastWrite(const Series& s);
  // Lists the Events the API server holds for the Pod (once per Pod).
  absl::Status LookUp(const PodRef& pod);
  // Carries on the series of a held Event with the same key, if recent.
  void Adopt(Series& s);

  kubeapi::KubeClient* const client_;
  EventRecorderOptions options_;
  std::map<Key, Series> series_;
  // The write budget, per (uid, reason) whatever the note.
  std::map<std::pair<std::string, std::string>, absl::Time> last_write_;
  // What LookUp found, by uid then (reason, note); a uid is present once
  // looked up (refused or empty included).
  std::map<std::string, std::map<std::pair<std::string, std::string>, Held>> held_;
  bool lookup_refused_logged_ = false;
  uint64_t writes_ = 0, errors_ = 0;
};

}  // namespace fabric::podconditions

#endif  // FABRIC_AGENT_PODCONDITIONS_EVENT_RECORDER_H_
