// Step 1 of a window's evaluation: what its samples say (window_facts.h).
#include "agent/observe/window_facts.h"

#include <fmt/format.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/base/utf8.h"

namespace fabric::observe::window {

using sampler::ContainerOwned;
using sampler::DeviceTraffic;
using sampler::Owned;
using sampler::PodNet;
using sampler::Sample;
using sampler::SamplePtr;

namespace {

void MaxInto(Owned& into, const Owned& o) {
  into.qp = std::max(into.qp, o.qp);
  into.qp_active = std::max(into.qp_active, o.qp_active);
  into.cq = std::max(into.cq, o.cq);
  into.mr = std::max(into.mr, o.mr);
  into.pd = std::max(into.pd, o.pd);
  into.mr_bytes = std::max(into.mr_bytes, o.mr_bytes);
}

const DeviceTraffic* FindTraffic(const Sample& s, const std::string& device) {
  for (const DeviceTraffic& t : s.traffic) {
    if (t.device == device) return &t;
  }
  return nullptr;
}

// The delta of one cumulative counter over the samples, or nullopt when an
// end is missing or the value goes down anywhere (a reset: the driver
// reloaded, the device was re-created); never a negative or wrapped delta.
// A sample between the ends that does not list the device at all is a reset
// too: the device went away and came back, and its counters may have climbed
// past their old value since.
std::optional<uint64_t> CounterDelta(const std::vector<const DeviceTraffic*>& seq,
                                     std::optional<uint64_t> DeviceTraffic::*field, bool* reset) {
  if (!seq.front() || !seq.back() || !(seq.front()->*field) || !(seq.back()->*field)) {
    return std::nullopt;
  }
  std::optional<uint64_t> prev;
  for (const DeviceTraffic* t : seq) {
    if (!t) {
      *reset = true;
      return std::nullopt;
    }
    if (!t->readable || !(t->*field)) continue;  // unreadable here: compared across
    if (prev && *(t->*field) < *prev) {
      *reset = true;
      return std::nullopt;
    }
    prev = t->*field;
  }
  return *(seq.back()->*field) - *(seq.front()->*field);
}

Delta DeviceDelta(const std::vector<const Sample*>& samples, const std::string& device) {
  Delta d;
  std::vector<const DeviceTraffic*> seq;
  for (const Sample* s : samples) {
    const DeviceTraffic* t = FindTraffic(*s, device);
    seq.push_back(t);
    if (t) {
      d.seen = true;
      d.kind = t->kind;
    }
  }
  const DeviceTraffic* first = seq.front();
  const DeviceTraffic* last = seq.back();
  if (!first || !last) {
    d.why = absl::StrCat(device, " is not in the window's ", !first ? "first" : "last",
                         " sample (the device appeared or went away)");
    return d;
  }
  for (const DeviceTraffic* t : {first, last}) {
    if (!t->readable) {
      d.why = absl::StrCat("counters of ", device, " unreadable: ",
                           SanitizeUtf8(t->error.empty() ? "no reason given" : t->error));
      return d;
    }
  }
  d.packets_only = !last->bytes.has_value() && last->packets.has_value();
  bool reset = false;
  d.bytes = CounterDelta(seq, &DeviceTraffic::bytes, &reset);
  d.packets = CounterDelta(seq, &DeviceTraffic::packets, &reset);
  if (reset) {
    d.bytes.reset();
    d.packets.reset();
    d.why = absl::StrCat("counters of ", device,
                         " went down in the window, or the device went away and came back (a "
                         "reset): its delta is unknown");
    return d;
  }
  d.known = d.packets_only ? d.packets.has_value() : d.bytes.has_value();
  if (!d.known) d.why = absl::StrCat(device, " has neither byte nor packet counters");
  return d;
}

// Why no container of the window can get a verdict, or "" when they can.
std::string WindowProblem(const Window& w) {
  if (w.samples.size() < 2) {
    return absl::StrCat("the window holds ", w.samples.size(),
                        " sample(s); a verdict needs 2 (the sampler has not run a full period)");
  }
  for (auto it = w.samples.rbegin(); it != w.samples.rend(); ++it) {
    const Sample& s = **it;
    if (!s.resources_ok) {
      return absl::StrCat(
          "fabric resources not observed (observation off or failing): ",
          SanitizeUtf8(s.resources_error.empty() ? "no reason given" : s.resources_error));
    }
    if (!s.procs_ok) {
      return absl::StrCat("Pod processes not observed (observation off or failing): ",
                          SanitizeUtf8(s.procs_error.empty() ? "no reason given" : s.procs_error));
    }
    if (!s.holds_complete) {
      return absl::StrCat(
          "the kubelet view is incomplete: ",
          SanitizeUtf8(s.holds_incomplete_reason.empty() ? "no reason given"
                                                         : s.holds_incomplete_reason));
    }
  }
  return "";
}

// The runtime's names over the window, merged: a container whose processes
// ended mid-window (a restart, CrashLoopBackOff) keeps its name.
std::map<std::string, sampler::PodNames> MergedNames(const Window& w) {
  std::map<std::string, sampler::PodNames> names;
  for (const Sample* s : w.samples) {
    for (const auto& [uid, n] : s->names) {
      sampler::PodNames& into = names[uid];
      if (!n.ns.empty()) into.ns = n.ns;
      if (!n.pod.empty()) into.pod = n.pod;
      for (const auto& [id, name] : n.containers) into.containers[id] = name;
      into.sandboxes.insert(n.sandboxes.begin(), n.sandboxes.end());
    }
  }
  return names;
}

const PodNet* FindNet(const Sample& s, const std::string& uid) {
  for (const PodNet& n : s.pods) {
    if (n.pod_uid == uid) return &n;
  }
  return nullptr;
}

// The Pod's own network bytes, from the first sample of the window that
// shows the Pod (one that started within the window moved all its bytes
// after that) to the newest. A Pod missing from a sample in between lost
// every process (its sandbox may have been re-created with a new netns), and
// bytes going down are a reset: both make the delta unknown.
PodNetFacts NetFacts(const Window& w, const std::string& uid) {
  PodNetFacts f;
  const PodNet* last = uid.empty() ? nullptr : FindNet(*w.samples.back(), uid);
  f.visible = last != nullptr;
  if (!f.visible) {
    f.why = "no process of the Pod is visible";
    return f;
  }
  f.host_network = last->host_network;
  if (f.host_network) {
    f.why = "hostNetwork";
    return f;
  }
  const PodNet* first = nullptr;
  std::optional<uint64_t> prev;
  bool reset = false, gap = false;
  for (const Sample* s : w.samples) {
    const PodNet* n = FindNet(*s, uid);
    if (!n) {
      gap = gap || first != nullptr;  // the newest shows it: this is in between
      continue;
    }
    if (!first) first = n;
    if (!n->readable) continue;
    const uint64_t total = n->rx_bytes + n->tx_bytes;
    if (prev && total < *prev) reset = true;
    prev = total;
  }
  if (!first->readable || !last->readable) {
    const PodNet* bad = !last->readable ? last : first;
    f.why = absl::StrCat("the Pod's network bytes are unreadable (through pid ", bad->pid,
                         "): ", SanitizeUtf8(bad->error));
    return f;
  }
  if (gap) {
    f.why =
        "the Pod had no visible process in part of the window (its sandbox, and so its network "
        "namespace, may have been re-created): its network bytes are unknown";
    return f;
  }
  if (reset) {
    f.why = "the Pod's network byte counters went down in the window (a reset)";
    return f;
  }
  f.bytes = (last->rx_bytes + last->tx_bytes) - (first->rx_bytes + first->tx_bytes);
  return f;
}

Liveness LivenessOf(const std::string& name, const PodNet* net, const sampler::PodNames* names) {
  // No container of the Pod known (processes in the Pod's own cgroup only):
  // nothing to tell.
  if (net == nullptr || names == nullptr || net->container_ids.empty()) return Liveness::kUnknown;
  bool all_named = true;
  for (const std::string& id : net->container_ids) {
    if (names->sandboxes.count(id)) continue;
    auto it = names->containers.find(id);
    if (it == names->containers.end()) {
      all_named = false;
    } else if (it->second == name) {
      return Liveness::kRunning;
    }
  }
  return all_named ? Liveness::kNotRunning : Liveness::kUnknown;
}

}  // namespace

Window Select(const std::vector<SamplePtr>& ring, absl::Duration requested) {
  Window w;
  w.bounds.requested = requested;
  std::vector<const Sample*> all;
  for (const SamplePtr& s : ring) {
    if (s) all.push_back(s.get());
  }
  if (all.empty()) return w;
  const absl::Time from = all.back()->mono - requested;
  size_t first = 0;
  bool reached = false;
  for (size_t i = all.size(); i-- > 0;) {
    if (all[i]->mono <= from) {
      first = i;
      reached = true;
      break;
    }
  }
  w.samples.assign(all.begin() + static_cast<std::ptrdiff_t>(first), all.end());
  w.bounds.start = w.samples.front()->wall;
  w.bounds.end = w.samples.back()->wall;
  w.bounds.seconds = absl::ToDoubleSeconds(w.samples.back()->mono - w.samples.front()->mono);
  w.bounds.samples = w.samples.size();
  w.bounds.shorter = !reached;
  return w;
}

const Delta& DeltaOf(Facts& facts, const std::string& device) {
  auto it = facts.deltas.find(device);
  if (it == facts.deltas.end()) {
    it = facts.deltas.emplace(device, DeviceDelta(facts.window.samples, device)).first;
  }
  return it->second;
}

std::string PodLabel(const Facts& facts, const std::string& uid) {
  auto it = facts.pods.find(uid);
  if (it == facts.pods.end() || it->second.pod.empty()) return absl::StrCat("uid ", uid);
  return absl::StrCat(it->second.ns, "/", it->second.pod);
}

std::string OwnedText(const Owned& o) {
  std::vector<std::string> parts;
  if (o.qp) {
    parts.push_back(o.qp_active == o.qp
                        ? absl::StrCat(o.qp, " QP")
                        : absl::StrCat(o.qp, " QP (", o.qp_active, " able to move bytes)"));
  }
  if (o.cq) parts.push_back(absl::StrCat(o.cq, " CQ"));
  if (o.mr) {
    parts.push_back(absl::StrCat(o.mr, " MR (",
                                 o.mr_bytes == UINT64_MAX ? "the whole address space: an implicit "
                                                            "on-demand-paging MR"
                                                          : HumanBytes(o.mr_bytes),
                                 ")"));
  }
  if (o.pd) parts.push_back(absl::StrCat(o.pd, " PD"));
  return parts.empty() ? "nothing" : absl::StrJoin(parts, ", ");
}

std::string Seconds(double s) { return fmt::format("{:.1f} s", s); }

Facts Accumulate(const std::vector<SamplePtr>& ring, absl::Duration length,
                 const TransportOptions& options) {
  Facts f;
  f.window = Select(ring, length);
  if (f.window.samples.empty()) return f;
  const Window& w = f.window;
  const Sample& newest = *w.samples.back();
  f.problem = WindowProblem(w);

  const std::map<std::string, sampler::PodNames> names = MergedNames(w);
  auto uid_by_name = [&](const std::string& ns, const std::string& pod) -> std::string {
    for (const auto& [uid, n] : names) {
      if (n.ns == ns && n.pod == pod) return uid;
    }
    return "";
  };
  auto names_of = [&](const std::string& uid) -> const sampler::PodNames* {
    auto it = names.find(uid);
    return it == names.end() ? nullptr : &it->second;
  };

  // The grants of the newest sample.
  for (const sampler::Grant& g : newest.grants) {
    const PodDeviceHold& h = g.hold;
    std::string uid = h.pod_uid.empty() ? uid_by_name(h.ns, h.pod) : h.pod_uid;
    const std::string key = uid.empty() ? absl::StrCat("name:", h.ns, "/", h.pod) : uid;
    PodFacts& p = f.pods[key];
    p.uid = uid;
    if (!h.pod.empty()) {
      p.ns = h.ns;
      p.pod = h.pod;
    }
    ContainerFacts& c = p.containers[h.container];
    c.init_container = c.granted ? c.init_container && h.init_container : h.init_container;
    c.granted = true;
    DeviceFacts& d = c.devices[h.device];
    d.resource = h.resource;
    d.granted = true;
    d.exclusive = d.exclusive || g.exclusive;
  }
  for (auto& [key, p] : f.pods) {
    const PodNet* net = p.uid.empty() ? nullptr : FindNet(newest, p.uid);
    for (auto& [name, c] : p.containers) c.liveness = LivenessOf(name, net, names_of(p.uid));
  }

  // What every owner held on each device over the window.
  for (const Sample* s : w.samples) {
    for (const ContainerOwned& co : s->owned) {
      if (!co.owned.any() || co.pod_uid.empty()) continue;
      PodFacts& p = f.pods[co.pod_uid];
      p.uid = co.pod_uid;
      p.owns_any = true;
      if (co.owned.active()) f.users[co.device].pods.insert(co.pod_uid);
      std::string name;
      bool named = false;
      if (const sampler::PodNames* n = names_of(co.pod_uid)) {
        if (auto c = n->containers.find(co.container_id); c != n->containers.end()) {
          name = c->second;
          named = true;
        }
      }
      if (!named) {
        // The runtime does not name it: the Pod's one granted container that
        // may be running is it (a finished init container is not a candidate).
        std::vector<std::string> candidates;
        for (const auto& [cname, c] : p.containers) {
          if (!c.granted || c.liveness == Liveness::kNotRunning) continue;
          if (c.liveness == Liveness::kUnknown && c.init_container) continue;
          candidates.push_back(cname);
        }
        if (candidates.size() == 1) name = candidates[0];
      }
      ContainerFacts& c = p.containers[name];
      if (!co.container_id.empty()) c.ids.insert(co.container_id);
      DeviceFacts& d = c.devices[co.device];
      MaxInto(d.owned, co.owned);
      d.pids.insert(co.pids.begin(), co.pids.end());
      if (s == &newest) c.liveness = Liveness::kRunning;
    }
    for (const sampler::HostOwned& ho : s->host_owned) {
      HostUser& u = f.users[ho.device].hosts[ho.pid];
      u.comm = SanitizeUtf8(ho.comm);
      MaxInto(u.owned, ho.owned);
    }
    for (const auto& [dev, by_name] : s->kernel_owned) {
      for (const auto& [kern, o] : by_name) MaxInto(f.users[dev].kernel[kern], o);
    }
    for (const auto& [dev, o] : s->unattributed) MaxInto(f.users[dev].unattributed, o);
    for (const auto& [dev, why] : s->resources_failed) f.users[dev].dump_failed = why;
    f.owners_exited = std::max(f.owners_exited, s->owners_exited);
    f.owners_unreadable = std::max(f.owners_unreadable, s->owners_unreadable);
    if (f.owner_error.empty()) f.owner_error = s->owner_error;
  }
  // Containers first met as owners: running when named among the live ones.
  for (auto& [key, p] : f.pods) {
    const PodNet* net = p.uid.empty() ? nullptr : FindNet(newest, p.uid);
    for (auto& [name, c] : p.containers) {
      if (!c.granted && c.liveness == Liveness::kUnknown && !name.empty()) {
        c.liveness = LivenessOf(name, net, names_of(p.uid));
      }
    }
  }

  // The Pod asked for by name, when it is not of interest already: its
  // runtime-named containers, with neither grant nor resources.
  if (!options.named_pod.empty()) {
    const std::string uid = uid_by_name(options.named_ns, options.named_pod);
    if (!uid.empty() && f.pods.find(uid) == f.pods.end()) {
      PodFacts& p = f.pods[uid];
      p.uid = uid;
      p.ns = options.named_ns;
      p.pod = options.named_pod;
      const PodNet* net = FindNet(newest, uid);
      for (const auto& [id, cname] : names.at(uid).containers) {
        if (cname.empty()) continue;
        ContainerFacts& c = p.containers[cname];
        c.ids.insert(id);
        c.liveness = LivenessOf(cname, net, &names.at(uid));
      }
      if (p.containers.empty()) p.containers[""];
    }
  }
  for (auto& [key, p] : f.pods) {
    if (p.pod.empty() && !p.uid.empty()) {  // known by UID only
      if (const sampler::PodNames* n = names_of(p.uid)) {
        p.ns = n->ns;
        p.pod = n->pod;
      }
    }
    p.net = NetFacts(w, p.uid);
  }
  return f;
}

}  // namespace fabric::observe::window
