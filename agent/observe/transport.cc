#include "agent/observe/transport.h"

#include <fmt/format.h>

#include <cctype>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/base/utf8.h"

namespace fabric::observe {

using sampler::ContainerOwned;
using sampler::DeviceTraffic;
using sampler::Owned;
using sampler::PodNet;
using sampler::Sample;
using sampler::SamplePtr;

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kEfa:
      return "efa";
    case Verdict::kRdma:
      return "rdma";
    case Verdict::kTcp:
      return "tcp";
    case Verdict::kIdle:
      return "idle";
    case Verdict::kUnknown:
      return "unknown";
  }
  return "unknown";
}

const char* AttributionName(Attribution a) {
  switch (a) {
    case Attribution::kNone:
      return "none";
    case Attribution::kExclusive:
      return "exclusive";
    case Attribution::kSoleOwner:
      return "sole-owner";
    case Attribution::kSharedAmbiguous:
      return "shared-ambiguous";
    case Attribution::kPerProcess:
      return "per-process";
  }
  return "none";
}

absl::StatusOr<absl::Duration> ParseWindow(absl::string_view text_in) {
  const std::string text(absl::StripAsciiWhitespace(text_in));
  const std::string quoted = EscapeBytes(text, 32);
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("window '", quoted, "': ", why, " (examples: 60s, 2m, 1m30s, 90)"));
  };
  if (text.empty()) return bad("empty");
  absl::Duration d = absl::ZeroDuration();
  uint64_t bare = 0;
  if (absl::SimpleAtoi(text, &bare)) {
    if (bare > 86400) return bad("out of range 15s..10m");
    d = absl::Seconds(static_cast<int64_t>(bare));
  } else {
    // Integer amounts with units h, m, s, each at most once and in that order.
    size_t i = 0;
    int last_rank = -1;
    while (i < text.size()) {
      size_t j = i;
      while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
      if (j == i || j == text.size()) return bad("expected <number><unit>");
      int64_t n = 0;
      if (j - i > 6 || !absl::SimpleAtoi(absl::string_view(text).substr(i, j - i), &n)) {
        return bad("number too large");
      }
      int rank = 0;
      switch (text[j]) {
        case 'h':
          rank = 0;
          d += absl::Hours(n);
          break;
        case 'm':
          rank = 1;
          d += absl::Minutes(n);
          break;
        case 's':
          rank = 2;
          d += absl::Seconds(n);
          break;
        default:
          return bad("unknown unit (s, m, h)");
      }
      if (rank <= last_rank) return bad("units out of order or repeated");
      last_rank = rank;
      i = j + 1;
    }
  }
  if (d < kMinWindow || d > kMaxWindow) return bad("out of range 15s..10m");
  return d;
}

std::string HumanBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (unit < 5 && v >= 1024) {
    v /= 1024;
    ++unit;
  }
  return fmt::format("{:.1f} {}", v, kUnits[unit]);
}

std::string HumanCount(uint64_t n) {
  std::string digits = absl::StrCat(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

namespace {

int Rank(Attribution a) {
  switch (a) {
    case Attribution::kNone:
      return 0;
    case Attribution::kExclusive:
      return 1;
    case Attribution::kPerProcess:
      return 2;
    case Attribution::kSoleOwner:
      return 3;
    case Attribution::kSharedAmbiguous:
      return 4;
  }
  return 0;
}

// The less certain of two attributions: a verdict is only as sure as its
// least certain device.
Attribution Weaker(Attribution a, Attribution b) { return Rank(a) >= Rank(b) ? a : b; }

void MaxInto(Owned& into, const Owned& o) {
  into.qp = std::max(into.qp, o.qp);
  into.cq = std::max(into.cq, o.cq);
  into.mr = std::max(into.mr, o.mr);
  into.pd = std::max(into.pd, o.pd);
  into.mr_bytes = std::max(into.mr_bytes, o.mr_bytes);
}

std::string OwnedText(const Owned& o) {
  std::vector<std::string> parts;
  if (o.qp) parts.push_back(absl::StrCat(o.qp, " QP"));
  if (o.cq) parts.push_back(absl::StrCat(o.cq, " CQ"));
  if (o.mr) parts.push_back(absl::StrCat(o.mr, " MR (", HumanBytes(o.mr_bytes), ")"));
  if (o.pd) parts.push_back(absl::StrCat(o.pd, " PD"));
  return parts.empty() ? "nothing" : absl::StrJoin(parts, ", ");
}

std::string Seconds(double s) { return fmt::format("{:.1f} s", s); }

std::string ShortId(const std::string& id) { return id.substr(0, 12); }

// The samples of one window and its real bounds.
struct Window {
  std::vector<const Sample*> samples;
  WindowBounds bounds;
};

Window SelectWindow(const std::vector<SamplePtr>& ring, absl::Duration requested) {
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

const DeviceTraffic* FindTraffic(const Sample& s, const std::string& device) {
  for (const DeviceTraffic& t : s.traffic) {
    if (t.device == device) return &t;
  }
  return nullptr;
}

// One device's traffic over the window.
struct Delta {
  bool seen = false;  // listed in some sample (kind is known)
  DeviceKind kind = DeviceKind::kRdma;
  bool packets_only = false;
  bool known = false;
  std::optional<uint64_t> bytes, packets;
  std::string why;  // when !known
};

// The delta of one cumulative counter over the samples, or nullopt when an
// end is missing or the value goes down anywhere (a reset: the driver
// reloaded, the device was re-created); never a negative or wrapped delta.
std::optional<uint64_t> CounterDelta(const std::vector<const DeviceTraffic*>& seq,
                                     std::optional<uint64_t> DeviceTraffic::*field, bool* reset) {
  if (!seq.front() || !seq.back() || !(seq.front()->*field) || !(seq.back()->*field)) {
    return std::nullopt;
  }
  std::optional<uint64_t> prev;
  for (const DeviceTraffic* t : seq) {
    if (!t || !t->readable || !(t->*field)) continue;
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
                         " went down in the window (a reset): its delta is unknown");
    return d;
  }
  d.known = d.packets_only ? d.packets.has_value() : d.bytes.has_value();
  if (!d.known) d.why = absl::StrCat(device, " has neither byte nor packet counters");
  return d;
}

// Accumulators over the window's samples.
struct DevAcc {
  std::string resource;
  bool granted = false;
  bool exclusive = false;
  Owned owned;
  std::set<uint32_t> pids;
};
struct ContAcc {
  std::set<std::string> ids;
  bool granted = false;
  std::map<std::string, DevAcc> devices;  // by device
};
struct PodAcc {
  std::string uid, ns, pod;
  std::map<std::string, ContAcc> containers;  // by name
  bool owns_any = false;
};

std::string PodLabel(const PodAcc& p) {
  if (!p.pod.empty()) return absl::StrCat(p.ns, "/", p.pod);
  return absl::StrCat("uid ", p.uid);
}

struct HostOwner {
  std::string comm;
  Owned owned;
};

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

}  // namespace

WindowResult EvaluateWindow(const std::vector<SamplePtr>& ring, absl::Duration window_length,
                            const TransportOptions& options) {
  WindowResult result;
  result.floor_bytes = options.floor_bytes;
  result.floor_packets = options.PacketFloor();
  Window w = SelectWindow(ring, window_length);
  result.window = w.bounds;
  if (w.samples.empty()) return result;
  const Sample& newest = *w.samples.back();

  // Runtime names, newest winning.
  std::map<std::string, sampler::PodNames> names;
  for (const Sample* s : w.samples) {
    for (const auto& [uid, n] : s->names) names[uid] = n;
  }
  auto uid_by_name = [&](const std::string& ns, const std::string& pod) -> std::string {
    for (const auto& [uid, n] : names) {
      if (n.ns == ns && n.pod == pod) return uid;
    }
    return "";
  };

  // Pods by key: the UID, or "name:ns/pod" for a grant whose UID is unknown.
  std::map<std::string, PodAcc> pods;
  for (const sampler::Grant& g : newest.grants) {
    const PodDeviceHold& h = g.hold;
    std::string uid = h.pod_uid.empty() ? uid_by_name(h.ns, h.pod) : h.pod_uid;
    const std::string key = uid.empty() ? absl::StrCat("name:", h.ns, "/", h.pod) : uid;
    PodAcc& p = pods[key];
    p.uid = uid;
    if (!h.pod.empty()) {
      p.ns = h.ns;
      p.pod = h.pod;
    }
    ContAcc& c = p.containers[h.container];
    c.granted = true;
    DevAcc& d = c.devices[h.device];
    d.resource = h.resource;
    d.granted = true;
    d.exclusive = d.exclusive || g.exclusive;
  }

  // Every Pod owning resources on a device in the window (the holders).
  std::map<std::string, std::set<std::string>> holders_by_device;
  std::map<std::string, std::map<uint32_t, HostOwner>> host_by_device;
  std::map<std::string, Owned> kernel_by_device;
  uint32_t unidentified = 0;
  for (const Sample* s : w.samples) {
    for (const ContainerOwned& co : s->owned) {
      if (!co.owned.any() || co.pod_uid.empty()) continue;
      PodAcc& p = pods[co.pod_uid];
      p.uid = co.pod_uid;
      p.owns_any = true;
      holders_by_device[co.device].insert(co.pod_uid);
      std::string name;
      bool named = false;
      if (auto n = names.find(co.pod_uid); n != names.end()) {
        if (auto c = n->second.containers.find(co.container_id); c != n->second.containers.end()) {
          name = c->second;
          named = true;
        }
      }
      if (!named) {
        std::vector<std::string> granted;
        for (const auto& [cname, c] : p.containers) {
          if (c.granted) granted.push_back(cname);
        }
        if (granted.size() == 1) name = granted[0];
      }
      ContAcc& c = p.containers[name];
      if (!co.container_id.empty()) c.ids.insert(co.container_id);
      DevAcc& d = c.devices[co.device];
      MaxInto(d.owned, co.owned);
      d.pids.insert(co.pids.begin(), co.pids.end());
    }
    for (const sampler::HostOwned& ho : s->host_owned) {
      HostOwner& o = host_by_device[ho.device][ho.pid];
      o.comm = SanitizeUtf8(ho.comm);
      MaxInto(o.owned, ho.owned);
    }
    for (const auto& [dev, o] : s->kernel_owned) MaxInto(kernel_by_device[dev], o);
    unidentified = std::max(unidentified, s->unidentified_owners);
  }
  // The Pod asked for by name, when it is not of interest already: its
  // runtime-named containers, with neither grant nor resources.
  if (!options.named_pod.empty()) {
    const std::string uid = uid_by_name(options.named_ns, options.named_pod);
    if (!uid.empty() && pods.find(uid) == pods.end()) {
      PodAcc& p = pods[uid];
      p.uid = uid;
      p.ns = options.named_ns;
      p.pod = options.named_pod;
      for (const auto& [id, cname] : names[uid].containers) {
        if (!cname.empty()) p.containers[cname].ids.insert(id);  // "" is the sandbox
      }
      if (p.containers.empty()) p.containers[""];
    }
  }
  // Names for Pods known by UID only.
  for (auto& [key, p] : pods) {
    if (!p.pod.empty() || p.uid.empty()) continue;
    if (auto n = names.find(p.uid); n != names.end()) {
      p.ns = n->second.ns;
      p.pod = n->second.pod;
    }
  }
  auto holder_label = [&](const std::string& uid) {
    auto it = pods.find(uid);
    return it == pods.end() ? absl::StrCat("uid ", uid) : PodLabel(it->second);
  };

  const std::string problem = WindowProblem(w);
  std::map<std::string, Delta> deltas;
  auto delta_of = [&](const std::string& device) -> const Delta& {
    auto it = deltas.find(device);
    if (it == deltas.end()) it = deltas.emplace(device, DeviceDelta(w.samples, device)).first;
    return it->second;
  };
  const double secs = w.bounds.seconds;

  for (auto& [key, p] : pods) {
    PodObservation po;
    po.ns = SanitizeUtf8(p.ns);
    po.pod = SanitizeUtf8(p.pod);
    po.pod_uid = SanitizeUtf8(p.uid);

    // The Pod's own network bytes: the same for all its containers.
    // From the first sample of the window that shows the Pod: a Pod that
    // started within the window moved all its bytes after that.
    const PodNet* net_first = nullptr;
    const PodNet* net_last = nullptr;
    for (const Sample* s : w.samples) {
      if (net_first || p.uid.empty()) break;
      for (const PodNet& n : s->pods) {
        if (n.pod_uid == p.uid) net_first = &n;
      }
    }
    for (const PodNet& n : newest.pods) {
      if (!p.uid.empty() && n.pod_uid == p.uid) net_last = &n;
    }
    const bool visible = net_last != nullptr;
    po.host_network = net_last && net_last->host_network;
    std::optional<uint64_t> other;
    std::string other_why;
    if (!visible) {
      other_why = "no process of the Pod is visible";
    } else if (po.host_network) {
      other_why = "hostNetwork";
    } else if (!net_first) {
      other_why = "the Pod's network namespace was not read at the window's start";
    } else if (!net_first->readable || !net_last->readable) {
      const PodNet* bad = !net_last->readable ? net_last : net_first;
      other_why = absl::StrCat("the Pod's network bytes are unreadable (through pid ", bad->pid,
                               "): ", SanitizeUtf8(bad->error));
    } else {
      const uint64_t a = net_first->rx_bytes + net_first->tx_bytes;
      const uint64_t b = net_last->rx_bytes + net_last->tx_bytes;
      if (b < a) {
        other_why = "the Pod's network byte counters went down in the window (a reset)";
      } else {
        other = b - a;
      }
    }

    for (auto& [cname, c] : p.containers) {
      ContainerObservation co;
      co.name = SanitizeUtf8(cname);
      for (const std::string& id : c.ids) co.container_ids.push_back(SanitizeUtf8(id));
      co.granted = c.granted;
      co.host_network = po.host_network;
      co.other_bytes = other;
      std::vector<std::string>& ev = co.evidence;
      if (cname.empty()) {
        for (const std::string& id : c.ids) {
          ev.push_back(absl::StrCat("container ", SanitizeUtf8(ShortId(id)),
                                    " is not named by the runtime and the Pod has no single "
                                    "granted container to attribute it to"));
        }
      }

      bool any_packets_only = false, any_bytes_device = false;
      bool fabric_over = false, efa_over = false;
      bool owns_any = false;
      uint64_t fab_bytes = 0, fab_packets = 0;
      Attribution over_attr = Attribution::kNone, owned_attr = Attribution::kNone;
      std::string unknown_counters;
      for (auto& [dev, d] : c.devices) {
        const Delta& delta = delta_of(dev);
        DeviceObservation o;
        o.device = SanitizeUtf8(dev);
        o.resource = SanitizeUtf8(d.resource);
        o.kind = delta.seen ? delta.kind
                            : (d.resource == "vpc.amazonaws.com/efa" ? DeviceKind::kEfa
                                                                     : DeviceKind::kRdma);
        o.granted = d.granted;
        o.owned = d.owned;
        o.pids.assign(d.pids.begin(), d.pids.end());
        o.counts_packets = delta.packets_only;
        o.counters_known = delta.known;
        o.fabric_bytes = delta.packets_only ? std::nullopt : delta.bytes;
        o.fabric_packets = delta.packets;
        const std::set<std::string>& holders = holders_by_device[dev];
        for (const std::string& uid : holders) o.holders.push_back(SanitizeUtf8(holder_label(uid)));
        const bool owns = d.owned.any();
        owns_any = owns_any || owns;
        if (d.exclusive) {
          o.attribution = Attribution::kExclusive;
        } else if (owns) {
          o.attribution =
              holders.size() <= 1 ? Attribution::kSoleOwner : Attribution::kSharedAmbiguous;
        }
        if (delta.packets_only) {
          any_packets_only = true;
        } else {
          any_bytes_device = true;
        }

        if (owns) {
          ev.push_back(absl::StrCat("owns ", OwnedText(d.owned), " on ", o.device, " (pid ",
                                    absl::StrJoin(o.pids, ", "), ")"));
          owned_attr = Weaker(owned_attr, o.attribution);
        } else if (d.granted) {
          ev.push_back(absl::StrCat("granted ", o.device, " (", o.resource, ", ",
                                    d.exclusive ? "exclusive" : "shared",
                                    ") but no process of the container owns resources on it"));
        }
        std::string moved;
        if (!delta.known) {
          moved = delta.why;
          if (d.granted || owns) unknown_counters = delta.why;
        } else if (delta.packets_only) {
          moved = absl::StrCat(o.device, " moved ", HumanCount(*delta.packets), " packets in ",
                               Seconds(secs), " (it counts packets, not bytes: floor ",
                               HumanCount(result.floor_packets), " packets)");
        } else {
          moved =
              absl::StrCat(o.device, " moved ", HumanBytes(*delta.bytes), " in ", Seconds(secs));
        }
        const bool over =
            delta.known && (delta.packets_only ? *delta.packets >= result.floor_packets
                                               : *delta.bytes >= result.floor_bytes);
        if (owns && delta.known) {
          if (delta.packets_only) {
            fab_packets += *delta.packets;
          } else {
            fab_bytes += *delta.bytes;
          }
          if (over) {
            fabric_over = true;
            efa_over = efa_over || o.kind == DeviceKind::kEfa;
            over_attr = Weaker(over_attr, o.attribution);
          }
        } else if (delta.known && over) {
          absl::StrAppend(&moved, " (not attributed: the container owns nothing on it)");
        }
        ev.push_back(moved);
        if (o.attribution == Attribution::kSharedAmbiguous) {
          ev.push_back(absl::StrCat(o.device,
                                    " is shared: its counters are the device total, held by ",
                                    absl::StrJoin(o.holders, ", ")));
        }
        std::vector<std::string> others;
        for (const auto& [pid, h] : host_by_device[dev]) {
          others.push_back(
              absl::StrCat("host pid ", pid, " (", h.comm, ") owns ", OwnedText(h.owned)));
        }
        if (auto k = kernel_by_device.find(dev); k != kernel_by_device.end() && k->second.any()) {
          // PID 0: kernel-owned, or an owner the agent's PID namespace does
          // not show (or that exited).
          others.push_back(absl::StrCat("the kernel (or owners not visible to the agent) owns ",
                                        OwnedText(k->second)));
        }
        if (!others.empty()) {
          ev.push_back(absl::StrCat("also on ", o.device, ": ", absl::StrJoin(others, "; "),
                                    " (not Pods, not counted as holders)"));
        }
        co.devices.push_back(std::move(o));
      }
      co.fabric_bytes =
          any_bytes_device || !any_packets_only ? std::optional<uint64_t>(fab_bytes) : std::nullopt;
      if (any_packets_only) co.fabric_packets = fab_packets;
      if (!owns_any) {
        ev.push_back(p.owns_any ? "no fabric resources owned by any process of the container"
                                : "no fabric resources owned by any process of the Pod");
      }
      if (po.host_network) {
        ev.push_back(
            "hostNetwork Pod: its non-fabric bytes are the node's and are not counted "
            "(other_bytes null)");
      } else if (other) {
        ev.push_back(absl::StrCat("the Pod's network namespace moved ", HumanBytes(*other),
                                  " (rx+tx, lo excluded) in ", Seconds(secs)));
      }
      if (w.bounds.shorter && w.samples.size() >= 2) {
        ev.push_back(absl::StrCat("the ring reaches back only ", Seconds(secs), " of the ",
                                  absl::ToInt64Seconds(window_length), " s asked"));
      }
      if (unidentified > 0) {
        ev.push_back(absl::StrCat(unidentified,
                                  " resource owner(s) exited before they could be identified"));
      }

      // The rules, in order.
      co.attribution = owned_attr;
      if (!problem.empty()) {
        co.verdict = Verdict::kUnknown;
        co.reason = problem;
      } else if (!visible) {
        co.verdict = Verdict::kUnknown;
        co.reason = p.uid.empty()
                        ? "the kubelet gives no Pod UID and no runtime record names this Pod, "
                          "so none of its processes can be found"
                        : "no process of the Pod is visible (not started or ended, or the agent "
                          "does not see the host PID namespace)";
      } else if (fabric_over) {
        co.verdict = efa_over ? Verdict::kEfa : Verdict::kRdma;
        co.attribution = over_attr;
      } else if (!unknown_counters.empty()) {
        co.verdict = Verdict::kUnknown;
        co.reason = unknown_counters;
      } else if (!other) {
        co.verdict = Verdict::kUnknown;
        co.reason = po.host_network
                        ? "hostNetwork Pod with no fabric traffic over the floor: its non-fabric "
                          "bytes cannot be told from the node's, so tcp and idle look alike"
                        : other_why;
      } else if (*other >= result.floor_bytes) {
        co.verdict = Verdict::kTcp;
        co.fallback = c.granted;
        if (owns_any) {
          ev.push_back(
              "resources are owned on the fabric but its traffic is under the floor while the "
              "Pod's network bytes are over it: the bytes go over TCP");
        }
      } else {
        co.verdict = Verdict::kIdle;
      }
      po.containers.push_back(std::move(co));
    }
    result.pods.push_back(std::move(po));
  }
  std::sort(result.pods.begin(), result.pods.end(),
            [](const PodObservation& a, const PodObservation& b) {
              return std::tie(a.ns, a.pod, a.pod_uid) < std::tie(b.ns, b.pod, b.pod_uid);
            });
  return result;
}

}  // namespace fabric::observe
