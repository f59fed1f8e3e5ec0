#include "agent/inventory/inventory.h"

#include <unistd.h>

#include <cstdio>

#include "agent/base/file_util.h"
#include "agent/base/utf8.h"
#include "agent/sysfs/sysfs_discovery.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/fake_sysfs.h"
#include "test/testing/netns_fake_sysfs.h"
#include "test/testing/status_matchers.h"

namespace fabric {
namespace {

using ::testing::ElementsAre;
using testing::FakeSysfs;
using ::testing::IsEmpty;
using ::testing::SizeIs;

std::vector<std::string> Names(const NodeInventory& inv) {
  std::vector<std::string> out;
  for (const auto& d : inv.devices) out.push_back(d.name);
  return out;
}

class FakeAttachments : public AttachmentSource {
 public:
  absl::StatusOr<std::map<std::string, std::string>> MovedDevices() const override { return moved; }
  std::map<std::string, std::string> moved;
};

TEST(InventoryTest, HotPlugIsRediscoveredAndPublished) {
  FakeSysfs fs;
  fs.AddEfa("rdmap79s0", "0000:4f:00.0", {});
  Inventory inv(fs.paths(), {}, nullptr);
  int published = 0;
  ASSERT_OK(inv.Discover());
  absl::Time t = absl::FromUnixSeconds(1000);
  EXPECT_FALSE(inv.Poll(t));  // nothing changed: no walk, nothing published
  fs.AddEfa("rdmap80s0", "0000:50:00.0", {});
  ASSERT_TRUE(inv.Poll(t += absl::Milliseconds(200)));
  EXPECT_THAT(Names(inv.snapshot()), ElementsAre("rdmap79s0", "rdmap80s0"));
  fs.RemoveDevice("rdmap79s0");
  ASSERT_TRUE(inv.Poll(t += absl::Milliseconds(200)));
  EXPECT_THAT(Names(inv.snapshot()), ElementsAre("rdmap80s0"));
  EXPECT_EQ(published, 0);  // Poll publishes only once Start() installed a sink
}

std::vector<int> GidIndexes(const NodeInventory& inv) {
  std::vector<int> out;
  for (const GidEntry& e : inv.devices.at(0).ports.at(0).gids) out.push_back(e.index);
  return out;
}

// An address added to or removed from a RoCE netdev changes the GID table,
// not the class listings: the poll still sees it and publishes.
TEST(InventoryTest, GidTableChangesArePublishedWithoutAListingChange) {
  FakeSysfs fs;
  fs.AddRxe("rxe0", "eth0");
  fs.SetGidTableLength("rxe0", 1, 1024);
  InventoryOptions options;
  options.gid_full_scan = absl::Seconds(30);
  Inventory inv(fs.paths(), options, nullptr);
  ASSERT_OK(inv.Discover());
  EXPECT_THAT(GidIndexes(inv.snapshot()), ElementsAre(0, 1));
  absl::Time t = absl::FromUnixSeconds(1000);
  EXPECT_FALSE(inv.Poll(t));  // the first full scan: the same table
  fs.SetGid("rxe0", 1, 2, FakeSysfs::Ipv4Gid("10.0.3.15"), "RoCE v2", "eth0");
  ASSERT_TRUE(inv.Poll(t += absl::Milliseconds(200)));  // a bounded scan sees the lowest free slot
  EXPECT_THAT(GidIndexes(inv.snapshot()), ElementsAre(0, 1, 2));
  fs.ClearGid("rxe0", 1, 1);  // 10.0.2.15 removed
  ASSERT_TRUE(inv.Poll(t += absl::Milliseconds(200)));
  EXPECT_THAT(GidIndexes(inv.snapshot()), ElementsAre(0, 2));
  EXPECT_EQ(inv.snapshot().devices[0].ports[0].gids[1].gid,
            "0000:0000:0000:0000:0000:ffff:0a00:030f");
  EXPECT_FALSE(inv.Poll(t += absl::Milliseconds(200)));
  // A slot far past the populated ones: only the periodic full scan reads it.
  fs.SetGid("rxe0", 1, 700, FakeSysfs::Ipv4Gid("10.0.4.15"), "RoCE v2", "eth0");
  EXPECT_FALSE(inv.Poll(t += absl::Milliseconds(200)));
  ASSERT_TRUE(inv.Poll(t += absl::Seconds(30)));
  EXPECT_THAT(GidIndexes(inv.snapshot()), ElementsAre(0, 2, 700));
}

// IB and EFA GIDs are the port's own: no polling of their tables.
TEST(InventoryTest, InfinibandAndEfaTablesAreNotPolled) {
  FakeSysfs fs;
  fs.AddMlx5("mlx5_0", "0000:3b:00.0", {});
  Inventory inv(fs.paths(), {}, nullptr);
  ASSERT_OK(inv.Discover());
  fs.SetGid("mlx5_0", 1, 1, "fe80:0000:0000:0000:0000:0000:0000:0001", "IB/RoCE v1", "");
  absl::Time t = absl::FromUnixSeconds(1000);
  EXPECT_FALSE(inv.Poll(t));
  EXPECT_FALSE(inv.Poll(t += absl::Minutes(5)));
}

// The poll thread publishes a hot-plug while readers take snapshots (TSan).
TEST(InventoryTest, PollThreadPublishesHotPlug) {
  FakeSysfs fs;
  fs.AddEfa("rdmap79s0", "0000:4f:00.0", {});
  Inventory inv(fs.paths(), {}, nullptr);
  ASSERT_OK(inv.Discover());
  std::mutex mu;
  std::vector<std::string> last;
  inv.Start(absl::Milliseconds(10), [&](const NodeInventory& n) {
    std::lock_guard<std::mutex> lock(mu);
    last = Names(n);
  });
  fs.AddEfa("rdmap80s0", "0000:50:00.0", {});
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  size_t seen = 0;
  while (absl::Now() < deadline) {
    seen = inv.snapshot().devices.size();  // concurrent with the poll thread
    {
      std::lock_guard<std::mutex> lock(mu);
      if (last.size() == 2) break;
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  inv.Stop();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_THAT(last, ElementsAre("rdmap79s0", "rdmap80s0"));
  EXPECT_GE(seen, 1u);
}

// Issue 11 item 2: a failed rediscovery keeps the last good list and is
// retried with backoff, without waiting for another change in sysfs.
TEST(InventoryTest, FailedRediscoveryKeepsTheLastGoodListAndRetriesWithBackoff) {
  FakeSysfs fs;
  fs.AddEfa("rdmap79s0", "0000:4f:00.0", {});
  fs.AddEfa("rdmap80s0", "0000:50:00.0", {});
  int walks = 0, failures_left = 0;
  InventoryOptions o;
  o.retry_initial = absl::Milliseconds(200);
  o.retry_max = absl::Milliseconds(800);
  o.walk = [&](const HostPaths& p) -> absl::StatusOr<NodeInventory> {
    ++walks;
    if (failures_left > 0) {
      --failures_left;
      return absl::ResourceExhaustedError("opendir " + p.sysfs_root +
                                          "/class/infiniband_verbs: Too many open files");
    }
    return DiscoverNode(p);
  };
  Inventory inv(fs.paths(), o, nullptr);
  ASSERT_OK(inv.Discover());
  const absl::Time t0 = absl::FromUnixSeconds(1000);

  fs.AddEfa("rdmap81s0", "0000:51:00.0", {});  // hot-plug, while reads fail
  failures_left = 3;
  walks = 0;
  EXPECT_FALSE(inv.Poll(t0));
  EXPECT_TRUE(inv.retrying());
  EXPECT_THAT(Names(inv.snapshot()), ElementsAre("rdmap79s0", "rdmap80s0"));
  // Backoff: 200 ms, then 400, then 800 (the cap).
  EXPECT_FALSE(inv.Poll(t0 + absl::Milliseconds(100)));
  EXPECT_EQ(walks, 1) << "retried before the backoff";
  EXPECT_FALSE(inv.Poll(t0 + absl::Milliseconds(200)));
  EXPECT_EQ(walks, 2);
  EXPECT_FALSE(inv.Poll(t0 + absl::Milliseconds(500)));
  EXPECT_EQ(walks, 2);
  EXPECT_FALSE(inv.Poll(t0 + absl::Milliseconds(600)));
  EXPECT_EQ(walks, 3);
  EXPECT_THAT(Names(inv.snapshot()), ElementsAre("rdmap79s0", "rdmap80s0"));
  EXPECT_FALSE(inv.Poll(t0 + absl::Milliseconds(1300)));
  EXPECT_EQ(walks, 3);
  // The fault cleared; nothing in sysfs changed since: the retry alone finds it.
  ASSERT_TRUE(inv.Poll(t0 + absl::Milliseconds(1400)));
  EXPECT_EQ(walks, 4);
  EXPECT_FALSE(inv.retrying());
  EXPECT_EQ(inv.failed_attempts(), 3u);
  EXPECT_THAT(Names(inv.snapshot()), ElementsAre("rdmap79s0", "rdmap80s0", "rdmap81s0"));
  EXPECT_FALSE(inv.Poll(t0 + absl::Milliseconds(1600)));  // settled
  EXPECT_EQ(walks, 4);
}

// Found by test/hostile (flapping sysfs), fixed first in the old health
// monitor: a device skipped during a rediscovery because one of its files read
// garbage for a moment stayed "removed" for good once the file healed, since
// only a change of the class listing triggered the next rediscovery. A walk
// that skipped a device is retried, 1 s doubling to 10 s; a retry that finds
// the same devices publishes nothing.
TEST(InventoryTest, DeviceSkippedForAGarbageFileIsRediscoveredWhenItHeals) {
  for (const char* file : {"/device/numa_node", "/ports/1/state"}) {
    SCOPED_TRACE(file);
    FakeSysfs fs;
    fs.AddEfa("rdmap79s0", "0000:4f:00.0", {});
    int walks = 0;
    InventoryOptions o;
    o.walk = [&](const HostPaths& p) {
      ++walks;
      return DiscoverNode(p);
    };
    Inventory inv(fs.paths(), o, nullptr);
    ASSERT_OK(inv.Discover());
    const std::string path = fs.IbDevicePath("rdmap79s0") + file;
    auto good = ReadFile(path);
    ASSERT_OK(good);
    absl::Time t = absl::FromUnixSeconds(1000);
    fs.AddEfa("rdmap80s0", "0000:50:00.0", {});     // the listing changes...
    ASSERT_OK(WriteFileAtomic(path, "garbage\n"));  // ...while a file reads garbage
    ASSERT_TRUE(inv.Poll(t += absl::Milliseconds(200)));
    ASSERT_THAT(Names(inv.snapshot()), ElementsAre("rdmap80s0"));  // skipped, with a warning
    EXPECT_THAT(inv.snapshot().skipped, ElementsAre("rdmap79s0"));

    // While the file stays bad: retried with a bounded backoff (1+2+4+8+10+10...
    // s: 6 walks in 40 s, not one per poll), and the same devices publish nothing.
    walks = 0;
    for (int i = 0; i < 200; ++i) EXPECT_FALSE(inv.Poll(t += absl::Milliseconds(200)));
    EXPECT_GE(walks, 5);
    EXPECT_LE(walks, 8);

    // Healed: back within the 10 s cap plus one poll, with no listing change.
    ASSERT_OK(WriteFileAtomic(path, *good));
    const absl::Time healed = t;
    while (t - healed < absl::Seconds(30) && inv.snapshot().Find("rdmap79s0") == nullptr) {
      inv.Poll(t += absl::Milliseconds(200));
    }
    EXPECT_THAT(Names(inv.snapshot()), ElementsAre("rdmap79s0", "rdmap80s0"))
        << "never rediscovered";
    EXPECT_LE(t - healed, absl::Seconds(10) + absl::Milliseconds(200));
    EXPECT_THAT(inv.snapshot().skipped, IsEmpty());

    // Nothing skipped any more: no further walks, nothing published.
    walks = 0;
    for (int i = 0; i < 300; ++i) EXPECT_FALSE(inv.Poll(t += absl::Seconds(1)));
    EXPECT_EQ(walks, 0);
  }
}

// The same through the fake tree: class/infiniband_verbs cannot be listed
// (ELOOP here; EMFILE or ENOMEM on a real node). Every device stays.
TEST(InventoryTest, UnreadableVerbsClassRemovesNothing) {
  FakeSysfs fs;
  fs.AddEfa("rdmap79s0", "0000:4f:00.0", {});
  fs.AddEfa("rdmap80s0", "0000:50:00.0", {});
  Inventory inv(fs.paths(), {}, nullptr);
  ASSERT_OK(inv.Discover());
  const std::string verbs = fs.sys_root() + "/class/infiniband_verbs";
  ASSERT_EQ(std::rename(verbs.c_str(), (verbs + ".away").c_str()), 0);
  ASSERT_EQ(::symlink("infiniband_verbs", verbs.c_str()), 0);
  absl::Time t = absl::FromUnixSeconds(1000);
  for (int i = 0; i < 5; ++i) {
    EXPECT_FALSE(inv.Poll(t += absl::Seconds(1)));
    EXPECT_THAT(inv.snapshot().devices, SizeIs(2));
  }
  ASSERT_EQ(::unlink(verbs.c_str()), 0);
  ASSERT_EQ(std::rename((verbs + ".away").c_str(), verbs.c_str()), 0);
  ASSERT_TRUE(inv.Poll(t += absl::Seconds(31)));
  EXPECT_FALSE(inv.retrying());
  EXPECT_THAT(Names(inv.snapshot()), ElementsAre("rdmap79s0", "rdmap80s0"));
}

// Issue 19: a netdev or RDMA device name that is not UTF-8 made the state
// file's dump() throw (type_error.316) out of Discover: the agent died at
// start. The names are refused where they enter (discovery), and the file is
// written with DumpJson, which cannot throw on content.
TEST(InventoryStateFileTest, NamesThatAreNotUtf8NeitherThrowNorReachTheFile) {
  FakeSysfs fs;
  fs.AddMlx5("mlx5_0", "0000:3b:00.0", {.link_layer = "Ethernet", .netdev = "eth\xff"});
  fs.AddMlx5("mlx5_\xfe", "0000:3b:00.1", {});
  InventoryOptions options;
  options.state_file = fs.paths().state_dir + "/inventory/devices.json";
  Inventory inv(fs.paths(), options, nullptr);
  absl::StatusOr<NodeInventory> snap;
  ASSERT_NO_THROW(snap = inv.Discover());
  ASSERT_OK(snap);
  EXPECT_THAT(Names(*snap), ElementsAre("mlx5_0"));
  auto text = ReadFile(options.state_file);
  ASSERT_OK(text);
  EXPECT_TRUE(IsValidUtf8(*text));
  EXPECT_NE(text->find("\"mlx5_0\""), std::string::npos) << *text;
}

// Issue 11 item 1: a device the CNI part moved into a Pod netns vanishes from
// the host sysfs; the inventory keeps it listed, described as last seen, both
// while running and after a restart.
class MovedDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs_.AddMlx5("mlx5_0", "0000:3b:00.0",
                {.numa_node = 1, .link_layer = "Ethernet", .netdev = "ens1f0np0"});
    fs_.AddMlx5("mlx5_1", "0000:3b:00.1",
                {.numa_node = 1, .link_layer = "Ethernet", .netdev = "ens1f1np1"});
    options_.state_file = fs_.paths().state_dir + "/inventory/devices.json";
  }
  void MoveToPod() {
    // What CniService::Add does: record first, then move.
    attachments_.moved["mlx5_0"] = "default/pod-a";
    ASSERT_OK(netlink_.MoveDevice("mlx5_0", "", kNetns));
    ASSERT_FALSE(IsDirectory(fs_.IbDevicePath("mlx5_0"))) << "the fake must hide it";
  }
  void ExpectHeld(const NodeInventory& inv) {
    EXPECT_THAT(Names(inv), ElementsAre("mlx5_0", "mlx5_1"));
    EXPECT_EQ(inv.in_pod_netns.count("mlx5_0"), 1u);
    const RdmaDevice* d = inv.Find("mlx5_0");
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->pci->address, "0000:3b:00.0");
    EXPECT_EQ(d->uverbs.rel_path, "infiniband/uverbs0");
    EXPECT_EQ(d->numa_node(), 1);
  }
  static constexpr char kNetns[] = "/var/run/netns/cni-pod-a";
  FakeSysfs fs_;
  testing::NetnsFakeSysfs netlink_{&fs_, {"mlx5_0", "mlx5_1"}};
  FakeAttachments attachments_;
  InventoryOptions options_;
};

TEST_F(MovedDeviceTest, StaysListedWhileRunning) {
  Inventory inv(fs_.paths(), options_, &attachments_);
  ASSERT_OK(inv.Discover());
  MoveToPod();
  absl::Time t = absl::FromUnixSeconds(1000);
  ASSERT_TRUE(inv.Poll(t += absl::Milliseconds(200)));
  ExpectHeld(inv.snapshot());
  EXPECT_EQ(inv.snapshot().Find("mlx5_0")->LinkLayer(), "Ethernet");
  EXPECT_EQ(inv.snapshot().Find("mlx5_0")->PrimaryNetdev(), "ens1f0np0");
  // The move re-registers the device: its verbs node numbers are re-read from
  // the host's (untagged) class/infiniband_verbs at the next rediscovery.
  fs_.WriteFile("sys/class/infiniband_verbs/uverbs0/dev", "231:200\n");
  fs_.MoveOutOfHostNetns("mlx5_1");  // any listing change
  ASSERT_TRUE(inv.Poll(t += absl::Milliseconds(200)));
  EXPECT_EQ(inv.snapshot().Find("mlx5_0")->uverbs.minor, 200u);
  EXPECT_THAT(Names(inv.snapshot()), ElementsAre("mlx5_0"));  // mlx5_1 has no record
  fs_.ReturnToHostNetns("mlx5_1");
  ASSERT_TRUE(inv.Poll(t += absl::Milliseconds(200)));

  // DEL moves it back and removes the record: listed as found in sysfs again.
  ASSERT_OK(netlink_.MoveDevice("mlx5_0", kNetns, ""));
  attachments_.moved.clear();
  ASSERT_TRUE(inv.Poll(t += absl::Milliseconds(200)));
  EXPECT_THAT(Names(inv.snapshot()), ElementsAre("mlx5_0", "mlx5_1"));
  EXPECT_THAT(inv.snapshot().in_pod_netns, IsEmpty());

  // Without a record, a vanished device is gone (hot-unplug).
  fs_.RemoveDevice("mlx5_0");
  ASSERT_TRUE(inv.Poll(t += absl::Milliseconds(200)));
  EXPECT_THAT(Names(inv.snapshot()), ElementsAre("mlx5_1"));
}

TEST_F(MovedDeviceTest, StaysListedAfterARestart) {
  {
    Inventory first(fs_.paths(), options_, &attachments_);
    ASSERT_OK(first.Discover());
  }
  MoveToPod();  // while the agent is down, or just before it died
  Inventory second(fs_.paths(), options_, &attachments_);
  auto inv = second.Discover();
  ASSERT_OK(inv);
  ExpectHeld(*inv);
  // Described as last listed, ports included (selectors match link types).
  EXPECT_EQ(inv->Find("mlx5_0")->LinkLayer(), "Ethernet");
}

TEST_F(MovedDeviceTest, WithoutSavedStateTheHostsRemainingViewDescribesIt) {
  MoveToPod();
  Inventory inv(fs_.paths(), options_, &attachments_);
  auto snap = inv.Discover();
  ASSERT_OK(snap);
  ExpectHeld(*snap);
  EXPECT_EQ(snap->Find("mlx5_0")->kind, DeviceKind::kRdma);
  EXPECT_EQ(snap->Find("mlx5_0")->pci->driver, "mlx5_core");
}

}  // namespace
}  // namespace fabric
