#include "agent/podconditions/pod_info.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace fabric::podconditions {
namespace {

const nlohmann::json* Field(const nlohmann::json& o, const char* key) {
  if (!o.is_object()) return nullptr;
  auto it = o.find(key);
  return it == o.end() ? nullptr : &*it;
}

std::string StringField(const nlohmann::json& o, const char* key) {
  const nlohmann::json* f = Field(o, key);
  return f != nullptr && f->is_string() ? f->get<std::string>() : "";
}

const nlohmann::json& ArrayField(const nlohmann::json& o, const char* key) {
  static const nlohmann::json* empty = new nlohmann::json(nlohmann::json::array());
  const nlohmann::json* f = Field(o, key);
  return f != nullptr && f->is_array() ? *f : *empty;
}

std::string StripScheme(const std::string& id) {
  const size_t p = id.find("://");
  return p == std::string::npos ? id : id.substr(p + 3);
}

}  // namespace

std::optional<absl::Time> ParseApiTime(const nlohmann::json& v) {
  if (!v.is_string()) return std::nullopt;
  absl::Time t;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, v.get<std::string>(), &t, &err)) return std::nullopt;
  return t;
}

std::string ApiTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

std::string ApiMicroTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", t, absl::UTCTimeZone());
}

absl::StatusOr<PodInfo> ParsePod(const nlohmann::json& pod) {
  PodInfo p;
  const nlohmann::json* md = Field(pod, "metadata");
  if (md == nullptr || !md->is_object()) {
    return absl::InvalidArgumentError("a Pod without metadata");
  }
  for (auto [key, out] : {std::pair<const char*, std::string*>{"uid", &p.uid},
                          {"namespace", &p.ns},
                          {"name", &p.name}}) {
    *out = StringField(*md, key);
    if (out->empty())
      return absl::InvalidArgumentError(absl::StrCat("a Pod without metadata.", key));
  }
  p.resource_version = StringField(*md, "resourceVersion");
  if (Field(*md, "deletionTimestamp") != nullptr && !Field(*md, "deletionTimestamp")->is_null())
    p.terminal = true;
  if (const nlohmann::json* ann = Field(*md, "annotations"); ann != nullptr && ann->is_object()) {
    auto it = ann->find(kAttachGraceAnnotation);
    if (it != ann->end() && it->is_string()) p.attach_grace = it->get<std::string>();
  }
  static const nlohmann::json kEmpty = nlohmann::json::object();
  const nlohmann::json* spec = Field(pod, "spec");
  const nlohmann::json& s = spec != nullptr ? *spec : kEmpty;
  p.node = StringField(s, "nodeName");
  for (const auto& c : ArrayField(s, "initContainers")) {
    ContainerState cs;
    cs.name = StringField(c, "name");
    if (cs.name.empty()) continue;
    cs.sidecar = StringField(c, "restartPolicy") == "Always";
    if (cs.sidecar) {
      p.containers.push_back(std::move(cs));
    } else {
      p.init_containers.push_back(std::move(cs.name));
    }
  }
  for (const auto& c : ArrayField(s, "containers")) {
    ContainerState cs;
    cs.name = StringField(c, "name");
    if (!cs.name.empty()) p.containers.push_back(std::move(cs));
  }
  for (const auto& g : ArrayField(s, "readinessGates")) {
    const std::string t = StringField(g, "conditionType");
    if (!t.empty()) p.readiness_gates.push_back(t);
  }
  const nlohmann::json* status = Field(pod, "status");
  const nlohmann::json& st = status != nullptr ? *status : kEmpty;
  const std::string phase = StringField(st, "phase");
  if (phase == "Succeeded" || phase == "Failed") p.terminal = true;
  // Sidecars report in initContainerStatuses, the others in containerStatuses.
  auto read_statuses = [&](const nlohmann::json& list, bool sidecars) {
    for (const auto& cs : list) {
      const std::string name = StringField(cs, "name");
      for (ContainerState& c : p.containers) {
        if (c.name != name || c.sidecar != sidecars) continue;
        c.id = StripScheme(StringField(cs, "containerID"));
        if (const nlohmann::json* rc = Field(cs, "restartCount"); rc && rc->is_number_integer())
          c.restart_count = rc->get<int>();
        const nlohmann::json* state = Field(cs, "state");
        const nlohmann::json* running = state ? Field(*state, "running") : nullptr;
        if (running != nullptr && running->is_object()) {
          c.running = true;
          if (const nlohmann::json* at = Field(*running, "startedAt")) {
            if (auto t = ParseApiTime(*at)) c.started_at = *t;
          }
        }
      }
    }
  };
  read_statuses(ArrayField(st, "initContainerStatuses"), true);
  read_statuses(ArrayField(st, "containerStatuses"), false);
  for (const auto& c : ArrayField(st, "conditions")) {
    Condition cond;
    cond.type = StringField(c, "type");
    if (!absl::StartsWith(cond.type, kConditionPrefix)) continue;
    cond.status = StringField(c, "status");
    cond.reason = StringField(c, "reason");
    cond.message = StringField(c, "message");
    if (const nlohmann::json* at = Field(c, "lastTransitionTime")) {
      if (auto t = ParseApiTime(*at)) cond.last_transition = *t;
    }
    p.fabric_conditions[cond.type] = std::move(cond);
  }
  return p;
}

}  // namespace fabric::podconditions
