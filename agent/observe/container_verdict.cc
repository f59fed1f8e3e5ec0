// Steps 2 and 3 of a window's evaluation (window_facts.h): whose each
// device's bytes are, for one container, and the container's verdict.
#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/base/utf8.h"
#include "agent/observe/window_facts.h"

namespace fabric::observe::window {
namespace {

using sampler::Owned;

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

std::string ShortId(const std::string& id) { return id.substr(0, 12); }

// Users of `users`' device other than the Pod `uid` that can move bytes:
// other Pods, host processes, kernel ULPs and owners not known, as evidence
// phrases. Everything but the stack's own QPs counts.
struct Others {
  std::vector<std::string> movers;  // own a QP that can move bytes
  std::vector<std::string> idle;    // own resources, none that move bytes
};
Others OthersOn(const Facts& facts, const DeviceUsers& users, const std::string& uid) {
  Others o;
  for (const std::string& pod : users.pods) {
    if (pod != uid) o.movers.push_back(SanitizeUtf8(PodLabel(facts, pod)));
  }
  for (const auto& [pid, h] : users.hosts) {
    std::string text = absl::StrCat("host pid ", pid, " (", h.comm, ") owns ", OwnedText(h.owned));
    (h.owned.active() ? o.movers : o.idle).push_back(std::move(text));
  }
  for (const auto& [kern, owned] : users.kernel) {
    if (owned.active()) {
      o.movers.push_back(
          absl::StrCat("the kernel's ", SanitizeUtf8(kern), " owns ", OwnedText(owned)));
    }
  }
  if (users.unattributed.any()) {
    std::string text = absl::StrCat(
        OwnedText(users.unattributed),
        " whose owner cannot be identified (created by a thread that has exited, by a process "
        "outside the agent's PID namespace, or by one that exited or could not be read)");
    (users.unattributed.active() ? o.movers : o.idle).push_back(std::move(text));
  }
  return o;
}

// What the container's devices add up to, for the verdict.
struct Reading {
  bool fabric_over = false, efa_over = false;  // owns a moving QP on a device over the floor
  bool owns_active = false;                    // on any device
  // Owns a moving QP on an EFA device whose counters are known and under the
  // floor: its peers, if on this node, are reached through shared memory.
  bool efa_quiet = false;
  bool any_packets_only = false, any_bytes_device = false;
  uint64_t fab_bytes = 0, fab_packets = 0;
  Attribution over_attr = Attribution::kNone, owned_attr = Attribution::kNone;
  std::string unknown;  // why a granted or owned device leaves the verdict unknown
};

const DeviceUsers& UsersOf(const Facts& facts, const std::string& device) {
  static const DeviceUsers kNobody;
  auto it = facts.users.find(device);
  return it == facts.users.end() ? kNobody : it->second;
}

// Step 2, one device of the container: its observation and evidence.
DeviceObservation AttributeDevice(Facts& facts, const PodFacts& pod, const std::string& dev,
                                  const DeviceFacts& d, uint64_t floor_packets,
                                  uint64_t floor_bytes, Reading* r, std::vector<std::string>* ev) {
  const Delta& delta = DeltaOf(facts, dev);
  const DeviceUsers& users = UsersOf(facts, dev);
  const double secs = facts.window.bounds.seconds;
  DeviceObservation o;
  o.device = SanitizeUtf8(dev);
  o.resource = SanitizeUtf8(d.resource);
  o.kind = delta.seen
               ? delta.kind
               : (d.resource == "vpc.amazonaws.com/efa" ? DeviceKind::kEfa : DeviceKind::kRdma);
  o.granted = d.granted;
  o.owned = d.owned;
  o.pids.assign(d.pids.begin(), d.pids.end());
  o.counts_packets = delta.packets_only;
  o.counters_known = delta.known;
  o.fabric_bytes = delta.packets_only ? std::nullopt : delta.bytes;
  o.fabric_packets = delta.packets;
  for (const std::string& uid : users.pods) {
    o.holders.push_back(SanitizeUtf8(PodLabel(facts, uid)));
  }
  const Others others = OthersOn(facts, users, pod.uid);
  const bool active = d.owned.active();
  if (active) {
    // Alone only when nobody else used it, as far as every sample can tell.
    const bool alone = others.movers.empty() && users.dump_failed.empty();
    o.attribution = !alone        ? Attribution::kSharedAmbiguous
                    : d.exclusive ? Attribution::kExclusive
                                  : Attribution::kSoleOwner;
  }
  (delta.packets_only ? r->any_packets_only : r->any_bytes_device) = true;

  const std::string pids = absl::StrJoin(o.pids, ", ");
  // Resources whose creating thread exited are the container's through their
  // PD or device context (sampler): say so, the kernel named no owner.
  const std::string adopted =
      d.owned.adopted == 0
          ? ""
          : absl::StrCat("; ", d.owned.adopted,
                         " of them created by a thread that has exited, found through the owner "
                         "of their protection domain or device context");
  if (active) {
    ev->push_back(
        absl::StrCat("owns ", OwnedText(d.owned), " on ", o.device, " (pid ", pids, ")", adopted));
    r->owns_active = true;
    r->owned_attr = Weaker(r->owned_attr, o.attribution);
  } else if (d.owned.qp > 0) {
    ev->push_back(absl::StrCat(
        "owns ", OwnedText(d.owned), " on ", o.device, " (pid ", pids,
        ") but no QP that can move bytes: its QPs are in RESET or INIT (never connected, as a "
        "library's probe of the device leaves them: libfabric's fi_getinfo creates one) or ERR; "
        "not a user of the fabric there",
        adopted));
  } else if (d.owned.any()) {
    ev->push_back(absl::StrCat("opened ", o.device, " but created no QP (owns ", OwnedText(d.owned),
                               ", pid ", pids, "): not a user of the fabric there"));
  } else if (d.granted) {
    ev->push_back(absl::StrCat("granted ", o.device, " (", o.resource, ", ",
                               d.exclusive ? "exclusive" : "shared",
                               ") but no process of the container owns resources on it"));
  }
  const bool over = delta.known && (delta.packets_only ? *delta.packets >= floor_packets
                                                       : *delta.bytes >= floor_bytes);
  std::string moved;
  if (!delta.known) {
    moved = delta.why;
    if ((d.granted || active) && r->unknown.empty()) r->unknown = delta.why;
  } else if (delta.packets_only) {
    moved = absl::StrCat(o.device, " moved ", HumanCount(*delta.packets), " packets in ",
                         Seconds(secs), " (it counts packets, not bytes: floor ",
                         HumanCount(floor_packets), " packets)");
  } else {
    moved = absl::StrCat(o.device, " moved ", HumanBytes(*delta.bytes), " in ", Seconds(secs));
  }
  if (active && delta.known) {
    (delta.packets_only ? r->fab_packets : r->fab_bytes) +=
        delta.packets_only ? *delta.packets : *delta.bytes;
    if (over) {
      r->fabric_over = true;
      r->efa_over = r->efa_over || o.kind == DeviceKind::kEfa;
      r->over_attr = Weaker(r->over_attr, o.attribution);
    } else if (o.kind == DeviceKind::kEfa) {
      r->efa_quiet = true;
    }
  } else if (over) {
    absl::StrAppend(&moved,
                    " (not attributed: the container owns no QP that can move bytes on it)");
  }
  ev->push_back(moved);
  if (o.attribution == Attribution::kSharedAmbiguous && !others.movers.empty()) {
    ev->push_back(absl::StrCat(
        o.device, " is shared: its counters are the device total, and others use it too: ",
        absl::StrJoin(others.movers, "; ")));
  }
  std::vector<std::string> listed = others.idle;
  if (!active) listed.insert(listed.begin(), others.movers.begin(), others.movers.end());
  if (!listed.empty()) {
    ev->push_back(absl::StrCat("also on ", o.device, ": ", absl::StrJoin(listed, "; ")));
  }
  if (!users.dump_failed.empty() && (d.granted || d.owned.any())) {
    const std::string why = absl::StrCat(
        "who owns resources on ", o.device,
        " is unknown in part of the window: its dump failed: ", SanitizeUtf8(users.dump_failed));
    ev->push_back(why);
    if (r->unknown.empty()) r->unknown = why;
  }
  if (!d.gid_gone.empty()) {
    ev->push_back(absl::StrCat(SanitizeUtf8(d.gid_gone),
                               ": the container's variables cannot change, so its engine's "
                               "next RoCE connections on ",
                               o.device,
                               " fail (\"GID is NULL\") or use another address; "
                               "restart the container to get the current index"));
  }
  if (d.granted && !active && over && users.unattributed.active() && r->unknown.empty()) {
    r->unknown = absl::StrCat(
        "a user whose owner cannot be identified moved bytes on ", o.device, " (",
        users.unattributed.qp_active,
        " QP created by a thread that has exited, or by a process the agent cannot see): they "
        "may be this container's");
  }
  return o;
}

// Other Pods that owned a QP that can move bytes on an EFA device of this
// node in the window: a container's EFA peers, if it talks to them, reach it
// through libfabric's shared-memory provider (EFA has no loopback path).
std::vector<std::string> EfaPeersOnNode(Facts& facts, const std::string& uid) {
  std::set<std::string> peers;
  for (const auto& [dev, users] : facts.users) {
    const Delta& delta = DeltaOf(facts, dev);
    if (!delta.seen || delta.kind != DeviceKind::kEfa) continue;
    for (const std::string& pod : users.pods) {
      if (pod != uid) peers.insert(SanitizeUtf8(PodLabel(facts, pod)));
    }
  }
  return std::vector<std::string>(peers.begin(), peers.end());
}

}  // namespace

ContainerObservation Evaluate(Facts& facts, const PodFacts& pod, const std::string& name,
                              const ContainerFacts& c, const TransportOptions& options) {
  const uint64_t floor_packets = options.PacketFloor();
  const double secs = facts.window.bounds.seconds;
  ContainerObservation co;
  co.name = SanitizeUtf8(name);
  for (const std::string& id : c.ids) co.container_ids.push_back(SanitizeUtf8(id));
  co.granted = c.granted;
  co.host_network = pod.net.host_network;
  co.other_bytes = pod.net.bytes;
  std::vector<std::string>& ev = co.evidence;
  if (name.empty()) {
    for (const std::string& id : c.ids) {
      ev.push_back(absl::StrCat("container ", SanitizeUtf8(ShortId(id)),
                                " is not named by the runtime and the Pod has no single "
                                "granted container to attribute it to"));
    }
  }

  // Step 2: each device.
  Reading r;
  for (const auto& [dev, d] : c.devices) {
    co.devices.push_back(
        AttributeDevice(facts, pod, dev, d, floor_packets, options.floor_bytes, &r, &ev));
  }
  co.fabric_bytes = r.any_bytes_device || !r.any_packets_only ? std::optional<uint64_t>(r.fab_bytes)
                                                              : std::nullopt;
  if (r.any_packets_only) co.fabric_packets = r.fab_packets;
  if (!r.owns_active) {
    ev.push_back(pod.owns_any ? "no QP that can move bytes owned by any process of the container"
                              : "no fabric resources owned by any process of the Pod");
  }
  if (pod.net.host_network) {
    ev.push_back(
        "hostNetwork Pod: its non-fabric bytes are the node's and are not counted "
        "(other_bytes null)");
  } else if (pod.net.bytes) {
    ev.push_back(absl::StrCat("the Pod's network namespace moved ", HumanBytes(*pod.net.bytes),
                              " (rx+tx, lo excluded) in ", Seconds(secs)));
  }
  const WindowBounds& bounds = facts.window.bounds;
  if (bounds.shorter && facts.window.size() >= 2) {
    ev.push_back(absl::StrCat("the ring reaches back only ", Seconds(secs), " of the ",
                              absl::ToInt64Seconds(bounds.requested), " s asked"));
  }
  if (facts.owners_exited > 0) {
    ev.push_back(absl::StrCat(facts.owners_exited,
                              " resource owner(s) exited before they could be identified"));
  }
  if (facts.owners_unreadable > 0) {
    ev.push_back(absl::StrCat(
        facts.owners_unreadable,
        " resource owner(s) could not be identified: ", SanitizeUtf8(facts.owner_error)));
  }
  const bool init_unknown = c.init_container && c.liveness == Liveness::kUnknown;
  if (init_unknown) {
    ev.push_back(
        "an init container: whether it still runs cannot be told without the runtime's records "
        "(--runtime-state-dir), so no verdict of it is a fallback");
  }

  // Step 3: the rules, in order (docs/observe.md).
  co.attribution = r.owned_attr;
  if (!facts.problem.empty()) {
    co.verdict = Verdict::kUnknown;
    co.reason = facts.problem;
  } else if (!pod.net.visible) {
    co.verdict = Verdict::kUnknown;
    co.reason = pod.uid.empty()
                    ? "the kubelet gives no Pod UID and no runtime record names this Pod, "
                      "so none of its processes can be found"
                    : "no process of the Pod is visible (not started or ended, or the agent "
                      "does not see the host PID namespace)";
  } else if (r.fabric_over) {
    co.verdict = r.efa_over ? Verdict::kEfa : Verdict::kRdma;
    co.attribution = r.over_attr;
  } else if (c.liveness == Liveness::kNotRunning) {
    co.verdict = Verdict::kIdle;
    ev.push_back(
        "no process of this container is running (an init container that finished, or one that "
        "exited): the Pod's network bytes are not its, and it is no fallback");
  } else if (!r.unknown.empty()) {
    co.verdict = Verdict::kUnknown;
    co.reason = r.unknown;
  } else if (!pod.net.bytes) {
    co.verdict = Verdict::kUnknown;
    co.reason = pod.net.host_network
                    ? "hostNetwork Pod with no fabric traffic over the floor: its non-fabric "
                      "bytes cannot be told from the node's, so tcp and idle look alike"
                    : pod.net.why;
  } else if (const std::vector<std::string> peers =
                 r.efa_quiet ? EfaPeersOnNode(facts, pod.uid) : std::vector<std::string>();
             !peers.empty()) {
    // Same-node EFA peers (issue 32, item 18): their transfers go through
    // shared memory, which no counter shows. With network bytes too, tcp
    // cannot be told from a local transfer; without, nothing was seen.
    const std::string why = absl::StrCat(
        "its EFA peers on this node (", absl::StrJoin(peers, ", "),
        ") own QPs on EFA too: EFA has no loopback, so libfabric's shared-memory provider "
        "(FI_EFA_ENABLE_SHM_TRANSFER, on by default) carries their transfers, which no counter the "
        "agent reads shows");
    if (*pod.net.bytes >= options.floor_bytes) {
      co.verdict = Verdict::kUnknown;
      co.reason = absl::StrCat(why, "; the Pod's network moved ", HumanBytes(*pod.net.bytes),
                               ", which may be other traffic: whether the engine fell back "
                               "cannot be told (its EFA peers on this node use shared memory)");
    } else {
      co.verdict = Verdict::kIdle;
      ev.push_back(absl::StrCat(why,
                                ": idle means no fabric or network bytes were seen, not that "
                                "the engines exchanged nothing"));
    }
  } else if (*pod.net.bytes >= options.floor_bytes) {
    co.verdict = Verdict::kTcp;
    co.fallback = c.granted && !init_unknown;
    if (r.owns_active) {
      ev.push_back(
          "QPs are owned on the fabric but its traffic is under the floor while the Pod's "
          "network bytes are over it: the bytes go over TCP");
    }
  } else {
    co.verdict = Verdict::kIdle;
  }
  return co;
}

}  // namespace fabric::observe::window
