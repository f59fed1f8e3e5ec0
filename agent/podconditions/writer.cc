#include "agent/podconditions/writer.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "agent/base/logging.h"
#include "agent/kubeapi/api_status.h"

namespace fabric::podconditions {
namespace {

nlohmann::json ConditionJson(const Condition& c) {
  return {{"type", c.type},
          {"status", c.status},
          {"reason", c.reason},
          {"message", c.message},
          {"lastTransitionTime", ApiTime(c.last_transition)},
          {"lastProbeTime", nullptr}};
}

const observe::PodObservation* Find(const observe::WindowResult& r, const PodInfo& pod) {
  for (const auto& p : r.pods) {
    if (!p.pod_uid.empty() ? p.pod_uid == pod.uid : (p.ns == pod.ns && p.pod == pod.name)) {
      return &p;
    }
  }
  return nullptr;
}

}  // namespace

bool Conclusive(const observe::WindowBounds& window) {
  return window.samples >= 2 && !window.shorter;
}

void ConditionWriter::KeepInherited(const PodInfo& pod, const PodState& state, Desired& d) {
  for (const std::string& type : state.inherited) {
    auto held = pod.fabric_conditions.find(type);
    if (held == pod.fabric_conditions.end()) continue;  // removed since: decided as usual
    if (type == kFabricAttached) {
      d.attached = held->second;
    } else if (type == kTransport) {
      d.transport = held->second;
      d.fallback = d.fallback_before;  // no FabricFallback from this window either
    }
  }
  d.memory = state.memory;
}

ConditionWriter::ConditionWriter(kubeapi::KubeClient* client, NodePods* pods, EventRecorder* events,
                                 WriterOptions options)
    : client_(client), pods_(pods), events_(events), options_(std::move(options)) {
  if (!options_.now) options_.now = [] { return absl::Now(); };
  backoff_ = options_.min_backoff;
}

ConditionWriter::Change ConditionWriter::Compare(const Condition& want, const PodInfo& pod) const {
  auto it = pod.fabric_conditions.find(want.type);
  if (it == pod.fabric_conditions.end() || it->second.status != want.status) return Change::kStatus;
  return it->second.SameValue(want) ? Change::kNone : Change::kDetail;
}

void ConditionWriter::Tick(const observe::WindowResult& result) {
  ++stats_.ticks;
  const absl::Time now = options_.now();
  if (!pods_->synced()) return;
  const std::map<std::string, PodInfo> pods = pods_->Snapshot();
  std::set<std::string> live;
  std::vector<std::pair<const PodInfo*, const observe::PodObservation*>> todo;
  for (const auto& [uid, pod] : pods) {
    const observe::PodObservation* obs = Find(result, pod);
    if (obs == nullptr || pod.terminal) continue;  // not of interest, or ending
    live.insert(uid);
    todo.emplace_back(&pod, obs);
  }
  stats_.pods = todo.size();
  for (auto it = state_.begin(); it != state_.end();) {
    it = live.count(it->first) ? std::next(it) : state_.erase(it);
  }
  events_->Retain([&](const std::string& uid) { return live.count(uid) > 0; });

  bool reachable = now >= backoff_until_;
  if (!reachable) ++stats_.skipped_backoff;
  const bool conclusive = Conclusive(result.window);
  for (const auto& [pod, obs] : todo) {
    PodState& st = state_[pod->uid];
    if (!st.seen) {  // first sight: what the API holds is "before"
      st.seen = true;
      auto a = pod->fabric_conditions.find(kFabricAttached);
      if (a != pod->fabric_conditions.end()) st.attached = a->second;
      for (const char* type : {kFabricAttached, kTransport}) {
        if (pod->fabric_conditions.count(type)) st.inherited.insert(type);
      }
      if (!st.inherited.empty()) {
        st.last_patch = now;
      } else {
        events_->NoHistory(pod->uid);  // no earlier agent wrote for it: no Event to carry on
      }
    }
    Desired d = DesiredConditions(*pod, obs, st.memory, now, options_.attach_grace);
    if (conclusive) {
      st.inherited.clear();
    } else if (!st.inherited.empty()) {
      KeepInherited(*pod, st, d);
    }
    st.memory = d.memory;
    for (const EventSpec& e :
         TransitionEvents(st.attached.has_value() ? &*st.attached : nullptr, d)) {
      events_->Record(PodRef{pod->ns, pod->name, pod->uid}, e);
    }
    st.attached = d.attached;
    if (reachable && now >= st.refused_until) reachable = Write(*pod, d, st, now);
  }
  if (reachable) (void)events_->Flush();
}

bool ConditionWriter::Write(const PodInfo& pod, const Desired& d, PodState& st, absl::Time now) {
  const Change a_change = Compare(d.attached, pod), t_change = Compare(d.transport, pod);
  if (a_change != Change::kStatus && t_change != Change::kStatus) {
    if (a_change == Change::kNone && t_change == Change::kNone) return true;
    if (now - st.last_patch < options_.detail_refresh) return true;  // a detail waits
  }
  auto current = [&](const char* type) -> const Condition* {
    auto it = pod.fabric_conditions.find(type);
    return it == pod.fabric_conditions.end() ? nullptr : &it->second;
  };
  const Condition a = WithTransitionTime(d.attached, current(kFabricAttached), now);
  const Condition t = WithTransitionTime(d.transport, current(kTransport), now);
  const nlohmann::json patch = {{"metadata", {{"uid", pod.uid}}},
                                {"status", {{"conditions", {ConditionJson(a), ConditionJson(t)}}}}};
  auto path = kubeapi::ObjectPath("/api/v1", "pods", pod.ns, pod.name, "status");
  if (!path.ok()) return true;
  auto r = client_->Patch(*path, patch, kubeapi::PatchType::kStrategicMerge);
  if (r.ok()) {
    ++stats_.patches;
    st.last_patch = now;
    backoff_ = options_.min_backoff;
    if (auto p = ParsePod(*r); p.ok()) pods_->Put(*std::move(p));
    return true;
  }
  ++stats_.patch_errors;
  const absl::Status& e = r.status();
  if (absl::IsNotFound(e) || absl::IsAborted(e)) return true;  // gone, or recreated (UID)
  if (absl::IsPermissionDenied(e) || absl::IsInvalidArgument(e) || absl::IsUnauthenticated(e)) {
    st.refused_until = now + options_.refused_backoff;
    LogWarn(Component::kPods, "conditions of {}/{} not written (next try in {}): {}", pod.ns,
            pod.name, absl::FormatDuration(options_.refused_backoff), e.message());
    return true;
  }
  backoff_until_ = now + backoff_;
  LogWarn(Component::kPods, "the API server cannot be reached, conditions wait {}: {}",
          absl::FormatDuration(backoff_), e.message());
  backoff_ = std::min(backoff_ * 2, options_.max_backoff);
  return false;
}

}  // namespace fabric::podconditions
