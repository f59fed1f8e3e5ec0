// SampleRing: what the transport verdicts read of the last 10 minutes of
// samples, in small, constant memory (issue 26).
//
// A Sample is what the sampler saw: every counter with its name, every Pod's
// names and grants as strings. The verdicts need much less: per device and
// sample the fabric totals; per container and device the resources owned;
// per Pod the network bytes; the identities, which change rarely. So the ring
// keeps, per sample, a small header (times, whether observation worked, the
// grants: shared with the previous sample while they are the same), and per
// entity (a device, a container's use of a device, a host process's, a kernel
// owner's, a Pod) its identity once and one small value per ring slot. A
// window is a range of slots; an entity's value in a slot counts only when it
// was written by that slot's sample (a stamp), so an entity absent from a
// sample reads as absent. An entity no slot refers to any more is dropped.
//
// Memory: about `capacity` x (24 B per device + 16 B per Pod + 24 B per
// (container, device) with resources + 24 B per other owner) plus each
// entity's identity once (kBytesPerSlotValue, MemoryBytes()).
//
// Not thread-safe: the sampler appends under its lock, readers read under it
// (Sampler::ReadRing).
#ifndef FABRIC_AGENT_SAMPLER_SAMPLE_RING_H_
#define FABRIC_AGENT_SAMPLER_SAMPLE_RING_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/time/time.h"
#include "agent/model/device.h"
#include "agent/sampler/sample.h"

namespace fabric::sampler {

// One value per ring slot, valid only for the sample that wrote it. Stamps
// and values are kept apart so a value carries no padding for its stamp.
template <class V>
class Series {
 public:
  explicit Series(size_t slots = 0) : stamps_(slots, 0), values_(slots) {}
  void Put(size_t slot, uint64_t seq, const V& v) {
    stamps_[slot] = Stamp(seq);
    values_[slot] = v;
  }
  // The value the sample `seq` (in `slot`) wrote; null when it wrote none.
  const V* At(size_t slot, uint64_t seq) const {
    return stamps_[slot] == Stamp(seq) ? &values_[slot] : nullptr;
  }
  size_t slots() const { return values_.size(); }
  static constexpr size_t kBytesPerSlot = sizeof(uint32_t) + sizeof(V);

 private:
  // Sample numbers start at 1, so 0 is "never written"; 32 bits wrap after
  // 680 years of 5 s rounds.
  static uint32_t Stamp(uint64_t seq) { return static_cast<uint32_t>(seq); }
  std::vector<uint32_t> stamps_;
  std::vector<V> values_;
};

// The values below are packed (no padding in the ring). Read a field by value
// (uint64_t{v.bytes}) where a template would take it by reference: a reference
// to a packed field is misaligned, which UBSan reports.
// A device's fabric totals in one sample (DeviceTraffic without the names).
struct __attribute__((packed)) TrafficValue {
  uint64_t bytes = 0, packets = 0;
  uint8_t readable : 1 = 0, has_bytes : 1 = 0, has_packets : 1 = 0;
  uint8_t dump_failed : 1 = 0;  // its resource dump failed this sample
};

// Resources owned, as the rules read them (Owned, in 16-bit counts that
// saturate: a count that high says the same to every rule).
struct __attribute__((packed)) OwnedValue {
  uint64_t mr_bytes = 0;
  uint16_t qp = 0, qp_active = 0, cq = 0, mr = 0, pd = 0, adopted = 0;
  static OwnedValue Of(const Owned& o);
  Owned ToOwned() const;
};

// A Pod's own network bytes in one sample (PodNet without the strings).
struct __attribute__((packed)) NetValue {
  uint64_t bytes = 0;  // rx + tx
  uint8_t readable : 1 = 0, host_network : 1 = 0;
};

struct DeviceEntity {
  DeviceKind kind = DeviceKind::kRdma;
  Series<TrafficValue> traffic;
  // The samples whose counters were unreadable, and whose resource dump of
  // the device failed, with why (rare: kept apart from the series).
  std::map<uint64_t, std::string> unreadable, dump_failed;
  uint64_t last_seq = 0;  // the newest sample that listed it
};

// A container's, a host process's, a kernel owner's or the unidentified
// owners' resources on one device.
struct OwnerEntity {
  Series<OwnedValue> owned;
  std::map<uint32_t, uint64_t> pids;  // a container's processes -> the newest sample with them
  std::string comm;                   // a host process's
  uint64_t last_seq = 0;
};

struct PodEntity {
  Series<NetValue> net;
  uint32_t pid = 0;                          // the newest bytes were read through it
  std::map<uint64_t, std::string> errors;    // samples whose bytes were unreadable, with why
  std::vector<std::string> live_containers;  // of the newest sample that saw a process
  uint64_t live_seq = 0;
  PodNames names;                             // merged over the kept samples that named the Pod
  std::map<std::string, uint64_t> named_seq;  // container ID -> the newest sample naming it
  uint64_t last_seq = 0;
};

// Per sample: when, whether observation worked, the grants.
struct SampleHeader {
  uint64_t seq = 0;  // the ring's number for it: 1, 2, ... in the order appended
  absl::Time mono, wall;
  bool resources_ok = false, procs_ok = false, holds_complete = true;
  std::string resources_error, procs_error, holds_incomplete_reason;
  uint32_t owners_exited = 0, owners_unreadable = 0;
  std::string owner_error;
  std::shared_ptr<const std::vector<Grant>> grants;  // shared while unchanged
};

class SampleRing {
 public:
  // (pod UID, container ID, device); (host pid as text, "", device) for host
  // processes; ("", kern_name, device) for kernel owners; ("", "", device)
  // for owners that cannot be identified.
  using OwnerKey = std::tuple<std::string, std::string, std::string>;

  explicit SampleRing(size_t capacity);
  size_t capacity() const { return capacity_; }

  // Takes what windows read from `s`, the newest; drops the oldest sample
  // when full, and every entity no kept sample refers to.
  void Append(const Sample& s);

  // The kept samples' slots, oldest first.
  std::vector<size_t> Slots() const;
  size_t size() const { return size_; }
  const SampleHeader& header(size_t slot) const { return headers_[slot]; }

  const std::map<std::string, DeviceEntity>& devices() const { return devices_; }
  const std::map<OwnerKey, OwnerEntity>& containers() const { return containers_; }
  const std::map<OwnerKey, OwnerEntity>& others() const { return others_; }
  const std::map<std::string, PodEntity>& pods() const { return pods_; }

  // Heap held, estimated from the sizes above (fabric_sampler_ring_bytes).
  size_t MemoryBytes() const;

 private:
  size_t SlotOf(uint64_t seq) const { return seq % capacity_; }
  void Forget(uint64_t oldest_seq);

  const size_t capacity_;
  std::vector<SampleHeader> headers_;
  size_t size_ = 0;
  uint64_t newest_seq_ = 0;
  std::map<std::string, DeviceEntity> devices_;
  std::map<OwnerKey, OwnerEntity> containers_;
  std::map<OwnerKey, OwnerEntity> others_;
  std::map<std::string, PodEntity> pods_;
};

}  // namespace fabric::sampler

#endif  // FABRIC_AGENT_SAMPLER_SAMPLE_RING_H_
