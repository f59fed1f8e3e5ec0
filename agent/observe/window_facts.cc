// Step 1 of a window's evaluation: what its samples say (window_facts.h).
#include "agent/observe/window_facts.h"

#include <fmt/format.h>

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/base/utf8.h"

namespace fabric::observe::window {

using sampler::NetValue;
using sampler::Owned;
using sampler::OwnedValue;
using sampler::PodEntity;
using sampler::SampleHeader;
using sampler::SampleRing;
using sampler::TrafficValue;

namespace {

void MaxInto(Owned& into, const Owned& o) {
  into.qp = std::max(into.qp, o.qp);
  into.qp_active = std::max(into.qp_active, o.qp_active);
  into.cq = std::max(into.cq, o.cq);
  into.mr = std::max(into.mr, o.mr);
  into.pd = std::max(into.pd, o.pd);
  into.mr_bytes = std::max(into.mr_bytes, o.mr_bytes);
  into.adopted = std::max(into.adopted, o.adopted);
}

// The most an owner held at any sample of the window; nullopt when it held
// nothing in it. `active_newest` says whether the newest sample had it.
std::optional<Owned> MaxOver(const Window& w, const sampler::Series<OwnedValue>& series,
                             bool* in_newest = nullptr, std::set<uint64_t>* active_seqs = nullptr) {
  std::optional<Owned> max;
  for (size_t i = 0; i < w.size(); ++i) {
    const OwnedValue* v = series.At(w.slots[i], w.seq(i));
    if (!v) continue;
    const Owned o = v->ToOwned();
    if (!max) max = Owned{};
    MaxInto(*max, o);
    if (in_newest && i + 1 == w.size()) *in_newest = true;
    if (active_seqs && o.active()) active_seqs->insert(w.seq(i));
  }
  return max;
}

// The delta of one cumulative counter over the window, or nullopt when an
// end is missing or the value goes down anywhere (a reset: the driver
// reloaded, the device was re-created); never a negative or wrapped delta.
// A sample between the ends that does not list the device at all is a reset
// too: the device went away and came back, and its counters may have climbed
// past their old value since.
using Counter = std::optional<uint64_t> (*)(const TrafficValue&);
std::optional<uint64_t> Bytes(const TrafficValue& t) {
  return t.has_bytes ? std::optional<uint64_t>(uint64_t{t.bytes}) : std::nullopt;
}
std::optional<uint64_t> Packets(const TrafficValue& t) {
  return t.has_packets ? std::optional<uint64_t>(uint64_t{t.packets}) : std::nullopt;
}

std::optional<uint64_t> CounterDelta(const std::vector<const TrafficValue*>& seq, Counter counter,
                                     bool* reset) {
  if (!seq.front() || !seq.back()) return std::nullopt;
  const std::optional<uint64_t> first = counter(*seq.front()), last = counter(*seq.back());
  if (!first || !last) return std::nullopt;
  std::optional<uint64_t> prev;
  for (const TrafficValue* t : seq) {
    if (!t) {
      *reset = true;
      return std::nullopt;
    }
    const std::optional<uint64_t> v = counter(*t);
    if (!t->readable || !v) continue;  // unreadable here: compared across
    if (prev && *v < *prev) {
      *reset = true;
      return std::nullopt;
    }
    prev = v;
  }
  return *last - *first;
}

std::string UnreadableWhy(const sampler::DeviceEntity& d, uint64_t seq) {
  auto it = d.unreadable.find(seq);
  return SanitizeUtf8(it == d.unreadable.end() || it->second.empty() ? "no reason given"
                                                                     : it->second);
}

Delta DeviceDelta(const Window& w, const std::string& device) {
  Delta d;
  auto it = w.ring->devices().find(device);
  std::vector<const TrafficValue*> seq;
  for (size_t i = 0; i < w.size(); ++i) {
    const TrafficValue* t =
        it == w.ring->devices().end() ? nullptr : it->second.traffic.At(w.slots[i], w.seq(i));
    seq.push_back(t);
    if (t) d.seen = true;
  }
  if (d.seen) d.kind = it->second.kind;
  const TrafficValue* first = seq.front();
  const TrafficValue* last = seq.back();
  if (!first || !last) {
    d.why = absl::StrCat(device, " is not in the window's ", !first ? "first" : "last",
                         " sample (the device appeared or went away)");
    return d;
  }
  for (size_t i : {size_t{0}, seq.size() - 1}) {
    if (!seq[i]->readable) {
      d.why = absl::StrCat("counters of ", device,
                           " unreadable: ", UnreadableWhy(it->second, w.seq(i)));
      return d;
    }
  }
  d.packets_only = !last->has_bytes && last->has_packets;
  bool reset = false;
  d.bytes = CounterDelta(seq, Bytes, &reset);
  d.packets = CounterDelta(seq, Packets, &reset);
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
  if (w.size() < 2) {
    return absl::StrCat("the window holds ", w.size(),
                        " sample(s); a verdict needs 2 (the sampler has not run a full period)");
  }
  for (auto it = w.headers.rbegin(); it != w.headers.rend(); ++it) {
    const SampleHeader& h = **it;
    if (!h.resources_ok) {
      return absl::StrCat(
          "fabric resources not observed (observation off or failing): ",
          SanitizeUtf8(h.resources_error.empty() ? "no reason given" : h.resources_error));
    }
    if (!h.procs_ok) {
      return absl::StrCat("Pod processes not observed (observation off or failing): ",
                          SanitizeUtf8(h.procs_error.empty() ? "no reason given" : h.procs_error));
    }
    if (!h.holds_complete) {
      return absl::StrCat(
          "the kubelet view is incomplete: ",
          SanitizeUtf8(h.holds_incomplete_reason.empty() ? "no reason given"
                                                         : h.holds_incomplete_reason));
    }
  }
  return "";
}

const PodEntity* FindPod(const Window& w, const std::string& uid) {
  if (uid.empty()) return nullptr;
  auto it = w.ring->pods().find(uid);
  return it == w.ring->pods().end() ? nullptr : &it->second;
}

// The Pod's own network bytes, from the first sample of the window that
// shows the Pod (one that started within the window moved all its bytes
// after that) to the newest. A Pod missing from a sample in between lost
// every process (its sandbox may have been re-created with a new netns), and
// bytes going down are a reset: both make the delta unknown.
PodNetFacts NetFacts(const Window& w, const PodEntity* p) {
  PodNetFacts f;
  const NetValue* last = p ? p->net.At(w.slots.back(), w.newest_seq()) : nullptr;
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
  const NetValue* first = nullptr;
  uint64_t first_seq = 0;
  std::optional<uint64_t> prev;
  bool reset = false, gap = false;
  for (size_t i = 0; i < w.size(); ++i) {
    const NetValue* n = p->net.At(w.slots[i], w.seq(i));
    if (!n) {
      gap = gap || first != nullptr;  // the newest shows it: this is in between
      continue;
    }
    if (!first) {
      first = n;
      first_seq = w.seq(i);
    }
    if (!n->readable) continue;
    if (prev && n->bytes < *prev) reset = true;
    prev = uint64_t{n->bytes};
  }
  if (!first->readable || !last->readable) {
    auto e = p->errors.find(!last->readable ? w.newest_seq() : first_seq);
    f.why = absl::StrCat("the Pod's network bytes are unreadable (through pid ", p->pid,
                         "): ", SanitizeUtf8(e == p->errors.end() ? "no reason given" : e->second));
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
  f.bytes = last->bytes - first->bytes;
  return f;
}

// Whether container `name` of the Pod runs, by the runtime's names of the
// Pod's live containers in the newest sample.
Liveness LivenessOf(const Window& w, const std::string& name, const PodEntity* p) {
  // No container of the Pod known (processes in the Pod's own cgroup only):
  // nothing to tell.
  if (p == nullptr || p->live_seq != w.newest_seq() || p->live_containers.empty()) {
    return Liveness::kUnknown;
  }
  bool all_named = true;
  for (const std::string& id : p->live_containers) {
    if (p->names.sandboxes.count(id)) continue;
    auto it = p->names.containers.find(id);
    if (it == p->names.containers.end()) {
      all_named = false;
    } else if (it->second == name) {
      return Liveness::kRunning;
    }
  }
  return all_named ? Liveness::kNotRunning : Liveness::kUnknown;
}

// The users of each device that are not Pods, and its failed dumps.
void OtherUsers(const Window& w, Facts* f) {
  for (const auto& [key, e] : w.ring->others()) {
    const auto& [pid_text, kern, dev] = key;
    std::optional<Owned> max = MaxOver(w, e.owned);
    if (!max) continue;
    DeviceUsers& u = f->users[dev];
    uint32_t pid = 0;
    if (!pid_text.empty() && absl::SimpleAtoi(pid_text, &pid)) {
      HostUser& h = u.hosts[pid];
      h.comm = SanitizeUtf8(e.comm);
      MaxInto(h.owned, *max);
    } else if (!kern.empty()) {
      MaxInto(u.kernel[kern], *max);
    } else {
      MaxInto(u.unattributed, *max);
    }
  }
  for (const auto& [dev, d] : w.ring->devices()) {
    auto failed = d.dump_failed.lower_bound(w.first_seq());
    if (failed != d.dump_failed.end() && failed->first <= w.newest_seq()) {
      f->users[dev].dump_failed = failed->second;
    }
  }
  for (const SampleHeader* h : w.headers) {
    f->owners_exited = std::max(f->owners_exited, h->owners_exited);
    f->owners_unreadable = std::max(f->owners_unreadable, h->owners_unreadable);
    if (f->owner_error.empty()) f->owner_error = h->owner_error;
  }
}

}  // namespace

Window Select(const SampleRing& ring, absl::Duration requested) {
  Window w;
  w.ring = &ring;
  w.bounds.requested = requested;
  const std::vector<size_t> all = ring.Slots();
  if (all.empty()) return w;
  const absl::Time from = ring.header(all.back()).mono - requested;
  size_t first = 0;
  bool reached = false;
  for (size_t i = all.size(); i-- > 0;) {
    if (ring.header(all[i]).mono <= from) {
      first = i;
      reached = true;
      break;
    }
  }
  w.slots.assign(all.begin() + static_cast<std::ptrdiff_t>(first), all.end());
  for (size_t slot : w.slots) w.headers.push_back(&ring.header(slot));
  w.bounds.start = w.headers.front()->wall;
  w.bounds.end = w.headers.back()->wall;
  w.bounds.seconds = absl::ToDoubleSeconds(w.headers.back()->mono - w.headers.front()->mono);
  w.bounds.samples = w.size();
  w.bounds.shorter = !reached;
  return w;
}

const Delta& DeltaOf(Facts& facts, const std::string& device) {
  auto it = facts.deltas.find(device);
  if (it == facts.deltas.end()) {
    it = facts.deltas.emplace(device, DeviceDelta(facts.window, device)).first;
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

Facts Accumulate(const SampleRing& ring, absl::Duration length, const TransportOptions& options) {
  Facts f;
  f.window = Select(ring, length);
  if (f.window.size() == 0) return f;
  const Window& w = f.window;
  f.problem = WindowProblem(w);

  auto uid_by_name = [&](const std::string& ns, const std::string& pod) -> std::string {
    for (const auto& [uid, p] : ring.pods()) {
      if (p.names.ns == ns && p.names.pod == pod) return uid;
    }
    return "";
  };

  // The grants of the newest sample.
  if (const auto& grants = w.headers.back()->grants) {
    for (const sampler::Grant& g : *grants) {
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
      if (d.gid_gone.empty()) d.gid_gone = g.gid_gone;
    }
  }
  for (auto& [key, p] : f.pods) {
    const PodEntity* pe = FindPod(w, p.uid);
    for (auto& [name, c] : p.containers) c.liveness = LivenessOf(w, name, pe);
  }

  // What every Pod's containers held on each device over the window.
  for (const auto& [key, e] : ring.containers()) {
    const auto& [uid, container_id, device] = key;
    bool in_newest = false;
    std::set<uint64_t> active;
    std::optional<Owned> max = MaxOver(w, e.owned, &in_newest, &active);
    if (!max || !max->any() || uid.empty()) continue;
    PodFacts& p = f.pods[uid];
    p.uid = uid;
    p.owns_any = true;
    if (!active.empty()) f.users[device].pods.insert(uid);
    const PodEntity* pe = FindPod(w, uid);
    std::string name;
    bool named = false;
    if (pe) {
      if (auto c = pe->names.containers.find(container_id); c != pe->names.containers.end()) {
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
    if (!container_id.empty()) c.ids.insert(container_id);
    DeviceFacts& d = c.devices[device];
    MaxInto(d.owned, *max);
    for (const auto& [pid, seq] : e.pids) {
      if (seq >= w.first_seq()) d.pids.insert(pid);
    }
    if (in_newest) c.liveness = Liveness::kRunning;
  }
  OtherUsers(w, &f);
  // Containers first met as owners: running when named among the live ones.
  for (auto& [key, p] : f.pods) {
    const PodEntity* pe = FindPod(w, p.uid);
    for (auto& [name, c] : p.containers) {
      if (!c.granted && c.liveness == Liveness::kUnknown && !name.empty()) {
        c.liveness = LivenessOf(w, name, pe);
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
      const PodEntity* pe = FindPod(w, uid);
      for (const auto& [id, cname] : pe->names.containers) {
        if (cname.empty()) continue;
        ContainerFacts& c = p.containers[cname];
        c.ids.insert(id);
        c.liveness = LivenessOf(w, cname, pe);
      }
      if (p.containers.empty()) p.containers[""];
    }
  }
  for (auto& [key, p] : f.pods) {
    const PodEntity* pe = FindPod(w, p.uid);
    if (p.pod.empty() && pe) {  // known by UID only
      p.ns = pe->names.ns;
      p.pod = pe->names.pod;
    }
    p.net = NetFacts(w, pe);
  }
  return f;
}

}  // namespace fabric::observe::window
