#include "agent/podconditions/event_recorder.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/base/logging.h"
#include "agent/kubeapi/api_status.h"
#include "agent/podconditions/pod_info.h"

namespace fabric::podconditions {
namespace {

bool Unreachable(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsResourceExhausted(s) ||
         absl::IsUnknown(s) || absl::IsInternal(s) || absl::IsFailedPrecondition(s);
}

// A member of a JSON object; null when `o` is no object or lacks it.
const nlohmann::json& Member(const nlohmann::json& o, const char* key) {
  static const nlohmann::json* const kNull = new nlohmann::json();
  if (!o.is_object()) return *kNull;
  auto it = o.find(key);
  return it == o.end() ? *kNull : *it;
}

std::string StringMember(const nlohmann::json& o, const char* key) {
  const nlohmann::json& v = Member(o, key);
  return v.is_string() ? v.get<std::string>() : "";
}

}  // namespace

EventRecorder::EventRecorder(kubeapi::KubeClient* client, EventRecorderOptions options)
    : client_(client), options_(std::move(options)) {
  if (!options_.now) options_.now = [] { return absl::Now(); };
}

void EventRecorder::Record(const PodRef& pod, const EventSpec& event) {
  const absl::Time now = options_.now();
  Series& s = series_[{pod.uid, event.reason, event.note}];
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
    if (!s.dirty) continue;
    if (now - LastWrite(s) < options_.min_write_interval) continue;
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

absl::Time& EventRecorder::LastWrite(const Series& s) {
  return last_write_.try_emplace({s.pod.uid, s.event.reason}, absl::InfinitePast()).first->second;
}

absl::Status EventRecorder::LookUp(const PodRef& pod) {
  if (held_.count(pod.uid)) return absl::OkStatus();
  auto coll = kubeapi::CollectionPath("/apis/events.k8s.io/v1", "events", pod.ns);
  if (!coll.ok()) return coll.status();
  kubeapi::ListOptions lo;
  // events.k8s.io/v1 maps regarding.uid to involvedObject.uid (every version
  // since the API went GA in 1.19); the rest is filtered here.
  lo.field_selector = absl::StrCat("regarding.uid=", pod.uid);
  auto list = client_->List(*coll, lo);
  if (!list.ok()) {
    if (Unreachable(list.status())) return list.status();
    // Refused (no "list events" in an older RBAC): series start afresh.
    if (!lookup_refused_logged_) {
      lookup_refused_logged_ = true;
      LogWarn(Component::kPods,
              "the Events the API server holds cannot be listed ({}): after an agent restart, "
              "a repeated Event starts a new object instead of carrying its series on",
              list.status().message());
    }
    held_[pod.uid];
    return absl::OkStatus();
  }
  auto& found = held_[pod.uid];
  for (const nlohmann::json& e : list->items) {
    const nlohmann::json& md = Member(e, "metadata");
    const nlohmann::json& series = Member(e, "series");
    if (StringMember(e, "reportingController") != kReportingController ||
        StringMember(e, "reportingInstance") != options_.node ||
        StringMember(Member(e, "regarding"), "uid") != pod.uid) {
      continue;
    }
    Held h;
    h.name = StringMember(md, "name");
    const std::optional<absl::Time> first = ParseApiTime(Member(e, "eventTime"));
    if (h.name.empty() || !first.has_value()) continue;
    h.first = *first;
    h.last_observed = ParseApiTime(Member(series, "lastObservedTime")).value_or(*first);
    if (const nlohmann::json& c = Member(series, "count");
        c.is_number_integer() && c.get<int>() > 0) {
      h.count = c.get<int>();
    }
    Held& slot = found[{StringMember(e, "reason"), StringMember(e, "note")}];
    if (slot.name.empty() || h.last_observed > slot.last_observed) slot = std::move(h);
  }
  return absl::OkStatus();
}

void EventRecorder::Adopt(Series& s) {
  s.looked_up = true;
  auto pod = held_.find(s.pod.uid);
  if (pod == held_.end()) return;
  auto it = pod->second.find({s.event.reason, s.event.note});
  if (it == pod->second.end()) return;
  const Held h = std::move(it->second);
  pod->second.erase(it);  // one series carries it on
  if (s.first - h.last_observed > options_.series_gap) return;
  s.name = h.name;
  s.count += h.count;
  s.first = h.first;
}

absl::Status EventRecorder::Write(Series& s, absl::Time now) {
  if (s.name.empty() && !s.looked_up) {
    absl::Status st = LookUp(s.pod);
    if (!st.ok()) return st;
    Adopt(s);
  }
  absl::Time& last_write = LastWrite(s);
  const nlohmann::json series = {{"count", s.count},
                                 {"lastObservedTime", ApiMicroTime(s.last_observed)}};
  if (!s.name.empty() && s.count >= 2) {
    auto path = kubeapi::ObjectPath("/apis/events.k8s.io/v1", "events", s.pod.ns, s.name);
    if (!path.ok()) return path.status();
    auto r = client_->Patch(*path, {{"series", series}}, kubeapi::PatchType::kMerge);
    last_write = now;  // an attempt spends the budget too
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
  last_write = now;
  if (!r.ok()) return r.status();
  ++writes_;
  s.name = name;
  s.dirty = false;
  return absl::OkStatus();
}

void EventRecorder::Retain(const std::function<bool(const std::string& uid)>& live) {
  const absl::Time now = options_.now();
  // A series past its gap is over (the next occurrence starts a new object).
  std::erase_if(series_, [&](const auto& entry) {
    const Series& s = entry.second;
    return !live(s.pod.uid) || (!s.dirty && now - s.last_observed > options_.series_gap);
  });
  std::erase_if(last_write_, [&](const auto& entry) { return !live(entry.first.first); });
  std::erase_if(held_, [&](const auto& entry) { return !live(entry.first); });
}

}  // namespace fabric::podconditions
