#include "agent/podconditions/event_recorder.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/base/logging.h"
#include "agent/kubeapi/api_status.h"

namespace fabric::podconditions {
namespace {

bool Unreachable(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsResourceExhausted(s) ||
         absl::IsUnknown(s) || absl::IsInternal(s) || absl::IsFailedPrecondition(s);
}

}  // namespace

EventRecorder::EventRecorder(kubeapi::KubeClient* client, EventRecorderOptions options)
    : client_(client), options_(std::move(options)) {
  if (!options_.now) options_.now = [] { return absl::Now(); };
}

void EventRecorder::Record(const PodRef& pod, const EventSpec& event) {
  const absl::Time now = options_.now();
  Series& s = series_[{pod.uid, event.reason}];
  if (s.count == 0 || now - s.last_observed > options_.series_gap) {
    s = Series{};
    s.pod = pod;
    s.event = event;
    s.first = now;
  }
  ++s.count;
  s.last_observed = now;
  s.dirty = true;
  (void)Flush();
}

absl::Status EventRecorder::Flush() {
  const absl::Time now = options_.now();
  absl::Status first_error;
  for (auto& [key, s] : series_) {
    if (!s.dirty || now - s.last_write < options_.min_write_interval) continue;
    absl::Status st = Write(s, now);
    if (st.ok()) continue;
    ++errors_;
    if (Unreachable(st)) {
      if (first_error.ok()) first_error = st;
      break;  // the API server is away: the rest waits too
    }
    // Refused (RBAC, validation): logged once per occurrence, not retried.
    LogWarn(Component::kPods, "event {} on {}/{} not written: {}", s.event.reason, s.pod.ns,
            s.pod.name, st.message());
    s.dirty = false;
  }
  return first_error;
}

absl::Status EventRecorder::Write(Series& s, absl::Time now) {
  const nlohmann::json series = {{"count", s.count},
                                 {"lastObservedTime", ApiMicroTime(s.last_observed)}};
  if (!s.name.empty() && s.count >= 2) {
    auto path = kubeapi::ObjectPath("/apis/events.k8s.io/v1", "events", s.pod.ns, s.name);
    if (!path.ok()) return path.status();
    auto r = client_->Patch(*path, {{"series", series}}, kubeapi::PatchType::kMerge);
    s.last_write = now;  // an attempt spends the budget too
    if (r.ok()) {
      ++writes_;
      s.dirty = false;
      return absl::OkStatus();
    }
    if (!absl::IsNotFound(r.status())) return r.status();
    s.name.clear();  // the event expired (its TTL): a new object carries the series on
  }
  const std::string base = s.pod.name.substr(0, 200);
  const std::string name = absl::StrCat(base, ".", absl::StrFormat("%x", absl::ToUnixNanos(now)));
  nlohmann::json ev = {
      {"apiVersion", "events.k8s.io/v1"},
      {"kind", "Event"},
      {"metadata", {{"name", name}, {"namespace", s.pod.ns}}},
      {"eventTime", ApiMicroTime(s.first)},
      {"reportingController", kReportingController},
      {"reportingInstance", options_.node},
      {"action", "Observe"},
      {"reason", s.event.reason},
      {"type", s.event.warning ? "Warning" : "Normal"},
      {"note", s.event.note},
      {"regarding",
       {{"apiVersion", "v1"},
        {"kind", "Pod"},
        {"namespace", s.pod.ns},
        {"name", s.pod.name},
        {"uid", s.pod.uid}}},
  };
  if (s.count >= 2) ev["series"] = series;
  auto coll = kubeapi::CollectionPath("/apis/events.k8s.io/v1", "events", s.pod.ns);
  if (!coll.ok()) return coll.status();
  auto r = client_->Create(*coll, ev);
  s.last_write = now;
  if (!r.ok()) return r.status();
  ++writes_;
  s.name = name;
  s.dirty = false;
  return absl::OkStatus();
}

void EventRecorder::Retain(const std::function<bool(const std::string& uid)>& live) {
  for (auto it = series_.begin(); it != series_.end();) {
    it = live(it->first.first) ? std::next(it) : series_.erase(it);
  }
}

}  // namespace fabric::podconditions
