#include "agent/sampler/sample_ring.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace fabric::sampler {
namespace {

uint16_t Saturated(uint32_t n) {
  return static_cast<uint16_t>(std::min<uint32_t>(n, std::numeric_limits<uint16_t>::max()));
}

template <class K, class V>
void EraseStale(std::map<K, V>& m, uint64_t oldest_seq) {
  for (auto it = m.begin(); it != m.end();) {
    it = it->second.last_seq < oldest_seq ? m.erase(it) : std::next(it);
  }
}

void EraseBefore(std::map<uint64_t, std::string>& by_seq, uint64_t oldest_seq) {
  by_seq.erase(by_seq.begin(), by_seq.lower_bound(oldest_seq));
}

size_t StringBytes(const std::string& s) {
  return s.capacity() > 15 ? s.capacity() + 1 : 0;  // beyond the small-string buffer
}

// A std::map node: the value, its key and the tree's links.
constexpr size_t kMapNodeBytes = 48;

}  // namespace

OwnedValue OwnedValue::Of(const Owned& o) {
  OwnedValue v;
  v.mr_bytes = o.mr_bytes;
  v.qp = Saturated(o.qp);
  v.qp_active = Saturated(o.qp_active);
  v.cq = Saturated(o.cq);
  v.mr = Saturated(o.mr);
  v.pd = Saturated(o.pd);
  v.adopted = Saturated(o.adopted);
  return v;
}

Owned OwnedValue::ToOwned() const {
  Owned o;
  o.qp = qp;
  o.qp_active = qp_active;
  o.cq = cq;
  o.mr = mr;
  o.pd = pd;
  o.mr_bytes = mr_bytes;
  o.adopted = adopted;
  return o;
}

SampleRing::SampleRing(size_t capacity)
    : capacity_(std::max<size_t>(capacity, 1)), headers_(capacity_) {}

std::vector<size_t> SampleRing::Slots() const {
  std::vector<size_t> slots;
  slots.reserve(size_);
  for (uint64_t seq = newest_seq_ + 1 - size_; seq <= newest_seq_ && size_ > 0; ++seq) {
    slots.push_back(SlotOf(seq));
  }
  return slots;
}

void SampleRing::Append(const Sample& s) {
  const uint64_t seq = newest_seq_ + 1;
  const size_t slot = SlotOf(seq);
  const SampleHeader* previous = size_ > 0 ? &headers_[SlotOf(newest_seq_)] : nullptr;
  SampleHeader h;
  h.seq = seq;
  h.mono = s.mono;
  h.wall = s.wall;
  h.resources_ok = s.resources_ok;
  h.procs_ok = s.procs_ok;
  h.holds_complete = s.holds_complete;
  h.resources_error = s.resources_error;
  h.procs_error = s.procs_error;
  h.holds_incomplete_reason = s.holds_incomplete_reason;
  h.owners_exited = s.owners_exited;
  h.owners_unreadable = s.owners_unreadable;
  h.owner_error = s.owner_error;
  // Grants change when a Pod comes or goes: the samples between share them.
  if (previous && previous->grants && *previous->grants == s.grants) {
    h.grants = previous->grants;
  } else {
    h.grants = std::make_shared<const std::vector<Grant>>(s.grants);
  }
  headers_[slot] = std::move(h);
  newest_seq_ = seq;
  size_ = std::min(size_ + 1, capacity_);

  for (const DeviceTraffic& t : s.traffic) {
    DeviceEntity& d = devices_.try_emplace(t.device).first->second;
    if (d.traffic.slots() == 0) d.traffic = Series<TrafficValue>(capacity_);
    d.kind = t.kind;
    TrafficValue v;
    v.readable = t.readable;
    v.has_bytes = t.bytes.has_value();
    v.bytes = t.bytes.value_or(0);
    v.has_packets = t.packets.has_value();
    v.packets = t.packets.value_or(0);
    d.traffic.Put(slot, seq, v);
    if (!t.readable) d.unreadable[seq] = t.error;
    d.last_seq = seq;
  }
  for (const auto& [dev, why] : s.resources_failed) {
    DeviceEntity& d = devices_.try_emplace(dev).first->second;
    if (d.traffic.slots() == 0) d.traffic = Series<TrafficValue>(capacity_);
    d.dump_failed[seq] = why;
    d.last_seq = seq;
  }

  auto put_owner = [&](std::map<OwnerKey, OwnerEntity>& into, OwnerKey key,
                       const Owned& o) -> OwnerEntity& {
    OwnerEntity& e = into.try_emplace(std::move(key)).first->second;
    if (e.owned.slots() == 0) e.owned = Series<OwnedValue>(capacity_);
    e.owned.Put(slot, seq, OwnedValue::Of(o));
    e.last_seq = seq;
    return e;
  };
  for (const ContainerOwned& c : s.owned) {
    OwnerEntity& e = put_owner(containers_, {c.pod_uid, c.container_id, c.device}, c.owned);
    for (uint32_t pid : c.pids) e.pids[pid] = seq;
  }
  for (const HostOwned& h : s.host_owned) {
    put_owner(others_, {absl::StrCat(h.pid), "", h.device}, h.owned).comm = h.comm;
  }
  for (const auto& [dev, by_owner] : s.kernel_owned) {
    for (const auto& [kern, o] : by_owner) {
      // Only a kernel user that can move bytes says anything to the rules:
      // ib_core's management QPs on every device are not kept 122 times.
      if (o.active()) put_owner(others_, {"", kern, dev}, o);
    }
  }
  for (const auto& [dev, o] : s.unattributed) put_owner(others_, {"", "", dev}, o);

  for (const PodNet& n : s.pods) {
    PodEntity& p = pods_.try_emplace(n.pod_uid).first->second;
    if (p.net.slots() == 0) p.net = Series<NetValue>(capacity_);
    NetValue v;
    v.bytes = n.rx_bytes + n.tx_bytes;
    v.readable = n.readable;
    v.host_network = n.host_network;
    p.net.Put(slot, seq, v);
    p.pid = n.pid;
    if (!n.readable) p.errors[seq] = n.error;
    p.live_containers = n.container_ids;
    p.live_seq = seq;
    p.last_seq = seq;
  }
  for (const auto& [uid, n] : s.names) {
    PodEntity& p = pods_.try_emplace(uid).first->second;
    if (p.net.slots() == 0) p.net = Series<NetValue>(capacity_);
    if (!n.ns.empty()) p.names.ns = n.ns;
    if (!n.pod.empty()) p.names.pod = n.pod;
    for (const auto& [id, name] : n.containers) {
      p.names.containers[id] = name;
      p.named_seq[id] = seq;
    }
    for (const std::string& id : n.sandboxes) {
      p.names.sandboxes.insert(id);
      p.named_seq[id] = seq;
    }
    p.last_seq = seq;
  }
  Forget(newest_seq_ + 1 - size_);
}

void SampleRing::Forget(uint64_t oldest_seq) {
  EraseStale(devices_, oldest_seq);
  EraseStale(containers_, oldest_seq);
  EraseStale(others_, oldest_seq);
  EraseStale(pods_, oldest_seq);
  for (auto& [dev, d] : devices_) {
    EraseBefore(d.unreadable, oldest_seq);
    EraseBefore(d.dump_failed, oldest_seq);
  }
  for (auto& [key, c] : containers_) {
    std::erase_if(c.pids, [&](const auto& p) { return p.second < oldest_seq; });
  }
  for (auto& [uid, p] : pods_) {
    EraseBefore(p.errors, oldest_seq);
    // A container restarted many times (CrashLoopBackOff) leaves a name per
    // instance: those no kept sample names go.
    for (auto it = p.named_seq.begin(); it != p.named_seq.end();) {
      if (it->second >= oldest_seq) {
        ++it;
        continue;
      }
      p.names.containers.erase(it->first);
      p.names.sandboxes.erase(it->first);
      it = p.named_seq.erase(it);
    }
  }
}

size_t SampleRing::MemoryBytes() const {
  size_t bytes = sizeof(*this) + headers_.capacity() * sizeof(SampleHeader);
  std::set<const std::vector<Grant>*> grant_sets;
  for (const SampleHeader& h : headers_) {
    bytes += StringBytes(h.resources_error) + StringBytes(h.procs_error) +
             StringBytes(h.holds_incomplete_reason) + StringBytes(h.owner_error);
    if (h.grants && grant_sets.insert(h.grants.get()).second) {
      bytes += h.grants->capacity() * sizeof(Grant);
      for (const Grant& g : *h.grants) {
        for (const std::string* f : {&g.hold.ns, &g.hold.pod, &g.hold.container, &g.hold.resource,
                                     &g.hold.device, &g.hold.pod_uid}) {
          bytes += StringBytes(*f);
        }
      }
    }
  }
  for (const auto& [name, d] : devices_) {
    bytes += kMapNodeBytes + sizeof(d) + StringBytes(name) +
             capacity_ * Series<TrafficValue>::kBytesPerSlot +
             (d.unreadable.size() + d.dump_failed.size()) * kMapNodeBytes;
  }
  for (const auto* m : {&containers_, &others_}) {
    for (const auto& [key, e] : *m) {
      bytes += kMapNodeBytes + sizeof(e) + StringBytes(std::get<0>(key)) +
               StringBytes(std::get<1>(key)) + StringBytes(std::get<2>(key)) + StringBytes(e.comm) +
               capacity_ * Series<OwnedValue>::kBytesPerSlot + e.pids.size() * kMapNodeBytes;
    }
  }
  for (const auto& [uid, p] : pods_) {
    bytes += kMapNodeBytes + sizeof(p) + StringBytes(uid) +
             capacity_ * Series<NetValue>::kBytesPerSlot + p.errors.size() * kMapNodeBytes +
             p.live_containers.capacity() * sizeof(std::string) + StringBytes(p.names.ns) +
             StringBytes(p.names.pod) +
             (p.names.containers.size() + p.names.sandboxes.size()) * (2 * kMapNodeBytes + 80);
  }
  return bytes;
}

}  // namespace fabric::sampler
