#include "agent/podconditions/conditions.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fabric::podconditions {
namespace {

using observe::ContainerObservation;
using observe::DeviceObservation;
using observe::PodObservation;
using observe::Verdict;

constexpr char kFallbackMark[] = "(fallback)";

std::string Bounded(std::string s) {
  if (s.size() <= kMaxMessageBytes) return s;
  size_t cut = kMaxMessageBytes - 3;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // UTF-8 boundary
  s.resize(cut);
  return s + "...";
}

std::string OwnedText(const sampler::Owned& o) {
  std::vector<std::string> parts;
  if (o.qp) parts.push_back(absl::StrCat(o.qp, " QP"));
  if (o.cq) parts.push_back(absl::StrCat(o.cq, " CQ"));
  if (o.mr) parts.push_back(absl::StrCat(o.mr, " MR"));
  if (o.pd) parts.push_back(absl::StrCat(o.pd, " PD"));
  return parts.empty() ? "nothing" : absl::StrJoin(parts, ", ");
}

const ContainerObservation* FindContainer(const PodObservation* obs, const std::string& name) {
  if (obs == nullptr) return nullptr;
  for (const ContainerObservation& c : obs->containers) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

std::string GrantedDevices(const ContainerObservation& c) {
  std::vector<std::string> names;
  for (const DeviceObservation& d : c.devices) {
    if (d.granted) names.push_back(d.device);
  }
  return absl::StrJoin(names, ", ");
}

// One granted container's state for FabricAttached.
enum class Attach { kAttached, kNotAttached, kPending, kNotRunning, kUnknown };
struct ContainerAttach {
  Attach state = Attach::kUnknown;
  std::string text;  // "engine: ..." for the message
};

// The QPs on a granted device, if they belong to the running instance (the
// window can still hold an earlier instance's after a restart).
std::string AttachEvidence(const ContainerObservation& c, const std::string& id) {
  const bool ours =
      c.container_ids.empty() || id.empty() ||
      std::find(c.container_ids.begin(), c.container_ids.end(), id) != c.container_ids.end();
  if (!ours) return "";
  std::vector<std::string> on;
  for (const DeviceObservation& d : c.devices) {
    if (AttachedOn(d)) on.push_back(absl::StrCat(d.owned.qp_active, " QP on ", d.device));
  }
  return absl::StrJoin(on, ", ");
}

// Why a container that ran past its grace is not attached.
std::string NotAttachedEvidence(const ContainerObservation& c) {
  std::vector<std::string> opened;
  for (const DeviceObservation& d : c.devices) {
    if (d.granted && d.owned.any()) {
      opened.push_back(absl::StrCat("opened ", d.device, " (", OwnedText(d.owned),
                                    "), no QP that can move bytes"));
    }
  }
  if (!opened.empty()) return absl::StrJoin(opened, "; ");
  return absl::StrCat("never opened a granted device (", GrantedDevices(c), ")");
}

ContainerAttach DecideContainer(const ContainerState& cs, const ContainerObservation& c,
                                const PodInfo& pod, ContainerMemory& mem, absl::Time now,
                                absl::Duration grace) {
  ContainerAttach out;
  const std::string who = absl::StrCat(cs.name, ": ");
  if (!cs.running) {
    out.state = Attach::kNotRunning;
    out.text = absl::StrCat(who, "not running");
    return out;
  }
  if (mem.seen_running_id != cs.id) {
    mem.seen_running_id = cs.id;
    mem.seen_running_at = now;
  }
  // Seed after an agent restart: the API's True, set after this instance
  // started, is this instance's attach.
  if (mem.attached_id.empty()) {
    auto it = pod.fabric_conditions.find(kFabricAttached);
    if (it != pod.fabric_conditions.end() && it->second.status == "True" &&
        cs.started_at != absl::InfinitePast() && it->second.last_transition >= cs.started_at) {
      mem.attached_id = cs.id;
      mem.attached_message = it->second.message;
    }
  }
  if (!mem.attached_id.empty() && mem.attached_id != cs.id) {
    mem.attached_id.clear();  // a restart: the grace starts again
    mem.attached_message.clear();
  }
  if (!mem.attached_id.empty()) {
    out.state = Attach::kAttached;
    out.text = mem.attached_message;
    return out;
  }
  if (const std::string ev = AttachEvidence(c, cs.id); !ev.empty()) {
    mem.attached_id = cs.id;
    mem.attached_message = absl::StrCat(who, ev);
    out.state = Attach::kAttached;
    out.text = mem.attached_message;
    return out;
  }
  if (c.verdict == Verdict::kUnknown) {
    out.state = Attach::kUnknown;
    out.text = absl::StrCat(who, c.reason.empty() ? "the observation cannot tell" : c.reason);
    return out;
  }
  const absl::Time since =
      cs.started_at != absl::InfinitePast() ? std::min(cs.started_at, now) : mem.seen_running_at;
  const absl::Duration ran = now - since;
  if (ran >= grace) {
    out.state = Attach::kNotAttached;
    out.text = absl::StrCat(who, NotAttachedEvidence(c), " after ", absl::FormatDuration(grace),
                            " (the attach grace)");
    return out;
  }
  out.state = Attach::kPending;
  out.text = absl::StrCat(who, "no QP on a granted device (", GrantedDevices(c),
                          ") yet; the attach grace is ", absl::FormatDuration(grace));
  return out;
}

Condition AttachedCondition(const PodInfo& pod, const PodObservation* obs, PodMemory& memory,
                            absl::Time now, absl::Duration default_grace) {
  Condition cond{kFabricAttached, "Unknown", "NotObserved", "", absl::InfinitePast()};
  if (obs == nullptr) {
    cond.message = "the agent has no observation of this Pod yet";
    return cond;
  }
  absl::Duration grace = default_grace;
  std::string grace_note;
  if (auto g = AttachGrace(pod, default_grace); g.ok()) {
    grace = *g;
  } else {
    grace_note = absl::StrCat(" (", g.status().message(), "; using ",
                              absl::FormatDuration(default_grace), ")");
  }
  std::vector<ContainerAttach> states;
  std::map<std::string, ContainerMemory> kept;
  for (const ContainerState& cs : pod.containers) {
    const ContainerObservation* c = FindContainer(obs, cs.name);
    if (c == nullptr || !c->granted) continue;
    ContainerMemory mem = memory.containers[cs.name];
    states.push_back(DecideContainer(cs, *c, pod, mem, now, grace));
    kept[cs.name] = std::move(mem);
  }
  memory.containers = std::move(kept);  // containers no longer granted are forgotten
  if (states.empty()) {
    cond.status = "False";
    cond.reason = "NoGrant";
    cond.message = "no container of this Pod holds a fabric grant";
    return cond;
  }
  auto collect = [&](Attach a) {
    std::vector<std::string> t;
    for (const ContainerAttach& s : states) {
      if (s.state == a) t.push_back(s.text);
    }
    return t;
  };
  if (auto t = collect(Attach::kNotAttached); !t.empty()) {
    cond.status = "False";
    cond.reason = "NotAttached";
    cond.message = Bounded(absl::StrJoin(t, "; ") + grace_note);
    return cond;
  }
  for (auto [a, reason] : {std::pair{Attach::kUnknown, "ObservationUnknown"},
                           {Attach::kNotRunning, "ContainerNotRunning"},
                           {Attach::kPending, "AttachPending"}}) {
    if (auto t = collect(a); !t.empty()) {
      cond.reason = reason;
      cond.message = Bounded(absl::StrJoin(t, "; ") + grace_note);
      return cond;
    }
  }
  cond.status = "True";
  cond.reason = "Attached";
  cond.message = Bounded(absl::StrJoin(collect(Attach::kAttached), "; "));
  return cond;
}

const char* VerdictReason(Verdict v) {
  switch (v) {
    case Verdict::kEfa:
      return "Efa";
    case Verdict::kRdma:
      return "Rdma";
    case Verdict::kTcp:
      return "Tcp";
    case Verdict::kIdle:
      return "Idle";
    default:
      return "Unknown";
  }
}

// How much a container's verdict decides the Pod's: a fallback first, then a
// fabric, then plain tcp, unknown, idle.
int Rank(const ContainerObservation& c) {
  if (c.verdict == Verdict::kTcp && c.fallback) return 5;
  if (c.verdict == Verdict::kEfa) return 4;
  if (c.verdict == Verdict::kRdma) return 3;
  if (c.verdict == Verdict::kTcp) return 2;
  if (c.verdict == Verdict::kUnknown) return 1;
  return 0;
}

// A message that changes only with the verdict's facts, not every sample:
// the devices, who owns what on them, never amounts of traffic.
std::string TransportMessage(const ContainerObservation& c) {
  std::string m = absl::StrCat(c.name.empty() ? "(unnamed container)" : c.name, ": ",
                               observe::VerdictName(c.verdict));
  if (c.fallback) absl::StrAppend(&m, " while ", GrantedDevices(c), " is granted ", kFallbackMark);
  std::vector<std::string> devs;
  for (const DeviceObservation& d : c.devices) {
    if (!d.granted && !d.owned.any()) continue;
    std::string s =
        absl::StrCat(d.device, d.granted ? " granted" : "", ", owns ", OwnedText(d.owned));
    if (c.verdict == Verdict::kEfa || c.verdict == Verdict::kRdma) {
      absl::StrAppend(&s, " (", observe::AttributionName(d.attribution), ")");
    }
    devs.push_back(std::move(s));
  }
  if (!devs.empty()) absl::StrAppend(&m, "; ", absl::StrJoin(devs, "; "));
  if (c.verdict == Verdict::kTcp) {
    absl::StrAppend(&m, "; the Pod's network bytes are over the floor, the fabric's are not");
  }
  if (c.verdict == Verdict::kUnknown && !c.reason.empty()) absl::StrAppend(&m, "; ", c.reason);
  if (c.verdict == Verdict::kIdle && c.last_non_idle.has_value()) {
    absl::StrAppend(&m, "; last ", observe::VerdictName(*c.last_non_idle), " at ",
                    ApiTime(c.last_non_idle_at));
  }
  return Bounded(std::move(m));
}

void TransportCondition(const PodInfo& pod, const PodObservation* obs, Desired& out) {
  Condition& cond = out.transport;
  cond = Condition{kTransport, "Unknown", "Unknown", "", absl::InfinitePast()};
  PodMemory& memory = out.memory;
  if (memory.transport_status.empty()) {  // after an agent restart: what it wrote before
    auto it = pod.fabric_conditions.find(kTransport);
    if (it != pod.fabric_conditions.end() && it->second.status != "Unknown") {
      memory.transport_status = it->second.status;
      memory.fallback = absl::StrContains(it->second.message, kFallbackMark);
    }
  }
  out.fallback_before = memory.fallback;
  const ContainerObservation* pick = nullptr;
  if (obs != nullptr) {
    for (const ContainerObservation& c : obs->containers) {
      if (pick == nullptr || Rank(c) > Rank(*pick)) pick = &c;
    }
  }
  if (pick == nullptr) {
    cond.message = "the agent has no observation of this Pod yet";
    return;
  }
  cond.reason = VerdictReason(pick->verdict);
  cond.message = TransportMessage(*pick);
  out.fallback = pick->verdict == Verdict::kTcp && pick->fallback;
  std::vector<std::string> ev(pick->evidence.begin(),
                              pick->evidence.begin() + std::min<size_t>(3, pick->evidence.size()));
  out.transport_evidence = Bounded(absl::StrJoin(ev, "; "));
  switch (pick->verdict) {
    case Verdict::kEfa:
    case Verdict::kRdma:
      cond.status = "True";
      break;
    case Verdict::kTcp:
      cond.status = "False";
      break;
    case Verdict::kIdle:
      cond.status = memory.transport_status.empty() ? "Unknown" : memory.transport_status;
      break;
    default:
      cond.status = "Unknown";
      break;
  }
  if (pick->verdict != Verdict::kIdle && pick->verdict != Verdict::kUnknown) {
    memory.transport_status = cond.status;
    memory.fallback = out.fallback;
  }
}

}  // namespace

bool AttachedOn(const observe::DeviceObservation& device) {
  // A QP in RESET or INIT (libfabric's fi_getinfo probe) is no attachment.
  return device.granted && device.owned.qp_active > 0;
}

absl::StatusOr<absl::Duration> AttachGrace(const PodInfo& pod, absl::Duration default_grace) {
  if (!pod.attach_grace.has_value()) return default_grace;
  absl::Duration d;
  if (!absl::ParseDuration(*pod.attach_grace, &d) || d < absl::ZeroDuration() ||
      d > kMaxAttachGrace) {
    return absl::InvalidArgumentError(absl::StrCat("annotation ", kAttachGraceAnnotation, ": '",
                                                   pod.attach_grace->substr(0, 64),
                                                   "' is not a duration from 0s to 24h"));
  }
  return d;
}

Desired DesiredConditions(const PodInfo& pod, const observe::PodObservation* observation,
                          const PodMemory& memory, absl::Time now, absl::Duration default_grace) {
  Desired out;
  out.memory = memory;
  out.attached = AttachedCondition(pod, observation, out.memory, now, default_grace);
  TransportCondition(pod, observation, out);
  return out;
}

Condition WithTransitionTime(Condition desired, const Condition* current, absl::Time now) {
  desired.last_transition = current != nullptr && current->status == desired.status &&
                                    current->last_transition != absl::InfinitePast()
                                ? current->last_transition
                                : now;
  return desired;
}

std::vector<EventSpec> TransitionEvents(const Condition* attached_before, const Desired& now) {
  std::vector<EventSpec> out;
  const std::string was = attached_before != nullptr ? attached_before->reason : "";
  if (now.attached.reason != was) {
    if (now.attached.reason == "Attached") {
      out.push_back({"FabricAttached", false, now.attached.message});
    } else if (now.attached.reason == "NotAttached") {
      out.push_back({"FabricNotAttached", true, now.attached.message});
    }
  }
  if (now.fallback && !now.fallback_before) {
    out.push_back(
        {"FabricFallback", true,
         Bounded(absl::StrCat(now.transport.message, ". Evidence: ", now.transport_evidence))});
  }
  return out;
}

}  // namespace fabric::podconditions
