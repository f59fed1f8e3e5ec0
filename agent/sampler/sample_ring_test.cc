#include "agent/sampler/sample_ring.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace fabric::sampler {
namespace {

using ::testing::ElementsAre;

// A node of `devices` EFAs and `pods` Pods, Pod i owning QPs on device
// i % devices and holding a grant of it: what one round samples.
Sample Round(int devices, int pods, uint64_t round) {
  Sample s;
  s.seq = round;
  s.mono = absl::UnixEpoch() + absl::Seconds(5 * round);
  s.wall = s.mono;
  s.resources_ok = s.procs_ok = true;
  for (int d = 0; d < devices; ++d) {
    DeviceTraffic t;
    t.device = absl::StrCat("rdmap", 79 + d, "s0");
    t.kind = DeviceKind::kEfa;
    t.readable = true;
    t.bytes = round * 1000 * (d + 1);
    t.packets = round * 10;
    s.traffic.push_back(t);
  }
  for (int p = 0; p < pods; ++p) {
    const std::string uid = absl::StrCat("0a1b2c3d-0000-4000-8000-", 100000000000 + p);
    const std::string cid = std::string(56, 'c') + absl::StrCat(10000000 + p);
    const std::string dev = absl::StrCat("rdmap", 79 + p % devices, "s0");
    ContainerOwned o;
    o.pod_uid = uid;
    o.container_id = cid;
    o.device = dev;
    o.owned = Owned{.qp = 4, .cq = 4, .mr = 2, .pd = 1, .qp_active = 4, .mr_bytes = 1 << 30};
    o.pids = {static_cast<uint32_t>(10000 + p)};
    s.owned.push_back(o);
    PodNet n;
    n.pod_uid = uid;
    n.pid = 9000 + p;
    n.readable = true;
    n.rx_bytes = round * 4096;
    n.container_ids = {std::string(64, 's'), cid};
    s.pods.push_back(n);
    s.names[uid] = PodNames{"bench", absl::StrCat("pod-", p), {{cid, "engine"}}, {}};
    Grant g;
    g.hold = PodDeviceHold{"bench", absl::StrCat("pod-", p), "engine", "vpc.amazonaws.com/efa", dev,
                           uid};
    g.exclusive = pods <= devices;
    s.grants.push_back(g);
  }
  s.kernel_owned["rdmap79s0"]["ib_core"] = Owned{.qp = 1, .cq = 1, .pd = 1};
  return s;
}

// The bound of issue 26 holds by construction: a full ring at 32 devices and
// 256 Pods is under 2 MiB, and a second fill adds nothing.
TEST(SampleRingTest, AFullRingIsSmallAndStaysSo) {
  SampleRing ring(122);
  for (uint64_t r = 1; r <= 122; ++r) ring.Append(Round(32, 256, r));
  const size_t full = ring.MemoryBytes();
  EXPECT_LT(full, 2u << 20) << full;
  // What the rules need per slot, times the slots, is most of it.
  const size_t per_slot =
      32 * Series<TrafficValue>::kBytesPerSlot +
      256 * (Series<OwnedValue>::kBytesPerSlot + Series<NetValue>::kBytesPerSlot);
  EXPECT_GT(full, 122 * per_slot);
  for (uint64_t r = 123; r <= 244; ++r) ring.Append(Round(32, 256, r));
  EXPECT_EQ(ring.MemoryBytes(), full);
  EXPECT_EQ(ring.size(), 122u);
  // ib_core's management resources say nothing to the rules: not kept.
  EXPECT_TRUE(ring.others().empty());
  // One grant set, shared by every sample while it did not change.
  const std::vector<size_t> slots = ring.Slots();
  EXPECT_EQ(ring.header(slots.front()).grants.get(), ring.header(slots.back()).grants.get());
}

// A value counts only for the sample that wrote it: an entity absent from a
// sample reads absent there, and one no kept sample refers to is dropped.
TEST(SampleRingTest, EntitiesAreStampedAndAgeOut) {
  SampleRing ring(3);
  ring.Append(Round(2, 2, 1));
  Sample second = Round(2, 1, 2);  // Pod 1 gone
  ring.Append(second);
  const std::string gone = "0a1b2c3d-0000-4000-8000-100000000001";
  std::vector<size_t> slots = ring.Slots();
  ASSERT_EQ(slots.size(), 2u);
  const PodEntity& p = ring.pods().at(gone);
  EXPECT_NE(p.net.At(slots[0], ring.header(slots[0]).seq), nullptr);
  EXPECT_EQ(p.net.At(slots[1], ring.header(slots[1]).seq), nullptr);
  ring.Append(Round(2, 1, 3));
  ring.Append(Round(2, 1, 4));  // the last sample with Pod 1 drops out
  EXPECT_EQ(ring.pods().count(gone), 0u);
  EXPECT_EQ(ring.containers().size(), 1u);
  slots = ring.Slots();
  ASSERT_EQ(slots.size(), 3u);
  EXPECT_EQ(ring.header(slots.front()).seq, 2u);
  // The grants changed with the Pod; the later samples share theirs.
  EXPECT_NE(ring.header(slots[0]).grants.get(), nullptr);
  EXPECT_EQ(ring.header(slots[1]).grants.get(), ring.header(slots[2]).grants.get());
}

// Rare detail is kept apart and ages with the ring: unreadable counters,
// failed dumps, a restarted container's old name.
TEST(SampleRingTest, ReasonsAndNamesAgeWithTheRing) {
  SampleRing ring(2);
  Sample s = Round(1, 1, 1);
  s.traffic[0].readable = false;
  s.traffic[0].error = "EIO";
  s.resources_failed["rdmap79s0"] = "QP dump: EIO";
  const std::string uid = s.pods[0].pod_uid;
  s.names[uid].containers["old-instance"] = "engine";
  ring.Append(s);
  const DeviceEntity& d = ring.devices().at("rdmap79s0");
  EXPECT_THAT(d.unreadable, ElementsAre(::testing::Pair(1u, "EIO")));
  EXPECT_THAT(d.dump_failed, ElementsAre(::testing::Pair(1u, "QP dump: EIO")));
  EXPECT_EQ(ring.pods().at(uid).names.containers.count("old-instance"), 1u);
  ring.Append(Round(1, 1, 2));
  ring.Append(Round(1, 1, 3));
  EXPECT_TRUE(d.unreadable.empty());
  EXPECT_TRUE(d.dump_failed.empty());
  EXPECT_EQ(ring.pods().at(uid).names.containers.count("old-instance"), 0u);
  EXPECT_EQ(ring.pods().at(uid).names.containers.size(), 1u);
}

TEST(SampleRingTest, CountsSaturateInsteadOfWrapping) {
  const Owned big{.qp = 70000, .cq = 3, .qp_active = 70000, .mr_bytes = UINT64_MAX};
  const OwnedValue v = OwnedValue::Of(big);
  EXPECT_EQ(v.qp, 65535u);
  EXPECT_EQ(v.ToOwned().qp_active, 65535u);
  EXPECT_EQ(v.ToOwned().mr_bytes, UINT64_MAX);
  EXPECT_EQ(v.ToOwned().cq, 3u);
}

}  // namespace
}  // namespace fabric::sampler
