#include "agent/health/health_monitor.h"

#include <filesystem>

#include "agent/sampler/sampler.h"
#include "agent/sysfs/sysfs_discovery.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/fake_sysfs.h"
#include "test/testing/status_matchers.h"

namespace fabric {
namespace {

using testing::FakeSysfs;
using ::testing::HasSubstr;

class HealthMonitorTest : public ::testing::Test {
 protected:
  // The monitor reads EFA error counters from the sampler's latest sample;
  // the sampler here reads the fake tree's devices on the test's clock.
  void StartMonitor(HealthConfig cfg = DefaultConfig().health) {
    cfg.port_hold_down_ms = 2000;
    cfg.efa.check_interval_ms = 1000;
    cfg.efa.quiet_period_ms = 60000;
    sampler::SamplerOptions so;
    so.paths = fs_.paths();
    so.clock = [this] { return t_; };
    sampler::SamplerInputs in;
    in.devices = [this] {
      auto inv = DiscoverNode(fs_.paths());
      return inv.ok() ? inv->devices : std::vector<RdmaDevice>{};
    };
    sampler_ = std::make_unique<sampler::Sampler>(so, in, nullptr, nullptr);
    monitor_ = std::make_unique<HealthMonitor>(
        fs_.paths(), cfg, [this] { return sampler_->Latest(); },
        [this](const NodeInventory& inv, const auto& h) {
          published_++;
          last_inv_ = inv;
          last_health_ = h;
        });
    auto inv = DiscoverNode(fs_.paths());
    ASSERT_OK(inv);
    sampler_->TakeNow();
    last_health_ = monitor_->Prime(*inv, t_);
  }
  void Advance(absl::Duration d) { t_ += d; }
  // A sample, then a health poll (as the agent's two threads would).
  bool Tick() {
    sampler_->TakeNow();
    return monitor_->Tick(t_);
  }
  DeviceHealth H(const std::string& name) { return last_health_[name]; }

  FakeSysfs fs_;
  std::unique_ptr<sampler::Sampler> sampler_;
  std::unique_ptr<HealthMonitor> monitor_;
  absl::Time t_ = absl::FromUnixSeconds(1000000);
  int published_ = 0;
  NodeInventory last_inv_;
  std::map<std::string, DeviceHealth> last_health_;
};

TEST_F(HealthMonitorTest, LinkDownUnhealthyWithReasonThenHealthyAfterHoldDown) {
  fs_.AddMlx5("mlx5_0", "0000:3b:00.0", {.link_layer = "Ethernet", .netdev = "eth2"});
  StartMonitor();
  EXPECT_TRUE(H("mlx5_0").healthy);
  EXPECT_FALSE(Tick());  // nothing changed: nothing published

  fs_.SetPortState("mlx5_0", 1, "1: DOWN", "3: Disabled");
  Advance(absl::Milliseconds(200));
  ASSERT_TRUE(Tick());
  EXPECT_FALSE(H("mlx5_0").healthy);
  EXPECT_EQ(H("mlx5_0").reason, "port 1 DOWN/Disabled");

  fs_.SetPortState("mlx5_0", 1, "4: ACTIVE", "5: LinkUp");
  Advance(absl::Milliseconds(200));
  Tick();
  EXPECT_FALSE(H("mlx5_0").healthy) << "held down";
  EXPECT_EQ(H("mlx5_0").reason, "port 1 DOWN/Disabled");
  Advance(absl::Milliseconds(1000));
  Tick();
  EXPECT_FALSE(H("mlx5_0").healthy);
  Advance(absl::Milliseconds(1000));
  ASSERT_TRUE(Tick());
  EXPECT_TRUE(H("mlx5_0").healthy);
  EXPECT_EQ(H("mlx5_0").reason, "");
}

TEST_F(HealthMonitorTest, FlappingLinkStaysUnhealthy) {
  fs_.AddMlx5("mlx5_0", "0000:3b:00.0", {});
  StartMonitor();
  int published_before = 0;
  for (int i = 0; i < 10; ++i) {
    if (i == 1) published_before = published_;
    fs_.SetPortState("mlx5_0", 1, i % 2 ? "4: ACTIVE" : "1: DOWN",
                     i % 2 ? "5: LinkUp" : "2: Polling");
    Advance(absl::Milliseconds(500));
    Tick();
    EXPECT_FALSE(H("mlx5_0").healthy) << i;
  }
  // Flapping within the hold-down publishes nothing after the first drop.
  EXPECT_EQ(published_, published_before);
}

TEST_F(HealthMonitorTest, PortDownAtStartIsUnhealthyInTheFirstView) {
  fs_.AddMlx5("mlx5_0", "0000:3b:00.0", {});
  fs_.SetPortState("mlx5_0", 1, "2: INIT", "5: LinkUp");
  StartMonitor();
  EXPECT_FALSE(H("mlx5_0").healthy);
  EXPECT_EQ(H("mlx5_0").reason, "port 1 INIT/LinkUp");
}

// Descriptors of this process open on files under `dir`.
int OpenFilesUnder(const std::string& dir) {
  int n = 0;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (!ec && target.rfind(dir, 0) == 0) ++n;
  }
  return n;
}

// Issue 17: the sampler is the one reader of counter files. The monitor
// reads the error counters from the samples it is given and holds no
// descriptor under the tree, whatever the number of checks; a check on a
// sample it already used learns nothing new.
TEST(HealthMonitorSampleTest, ErrorCountersComeFromSamplesNotFiles) {
  FakeSysfs fs;
  fs.AddEfa("rdmap79s0", "0000:4f:00.0", {});
  fs.AddEfa("rdmap80s0", "0000:50:00.0", {});
  fs.SetCounter("rdmap79s0", 0, "cmds_err", 100);  // the files say 100 throughout
  auto make = [&](uint64_t seq, uint64_t cmds_err) {
    auto s = std::make_shared<sampler::Sample>();
    s->seq = seq;
    for (const char* dev : {"rdmap79s0", "rdmap80s0"}) {
      sampler::DeviceCounters c;
      c.device = dev;
      c.hw.push_back({"0", "cmds_err", std::string(dev) == "rdmap79s0" ? cmds_err : 0});
      s->counters.push_back(c);
    }
    return s;
  };
  sampler::SamplePtr latest = make(1, 0);
  HealthConfig cfg = DefaultConfig().health;
  cfg.efa.check_interval_ms = 1000;
  std::map<std::string, DeviceHealth> health;
  HealthMonitor monitor(
      fs.paths(), cfg, [&] { return latest; },
      [&](const NodeInventory&, const auto& h) { health = h; });
  auto inv = DiscoverNode(fs.paths());
  ASSERT_OK(inv);
  absl::Time t = absl::FromUnixSeconds(1000000);
  health = monitor.Prime(*inv, t);
  EXPECT_TRUE(health["rdmap79s0"].healthy);
  for (int i = 0; i < 5; ++i) {
    t += absl::Seconds(1);
    EXPECT_FALSE(monitor.Tick(t)) << "the files' 100 is never read";
  }
  latest = make(2, 3);
  t += absl::Seconds(1);
  ASSERT_TRUE(monitor.Tick(t));
  EXPECT_EQ(health["rdmap79s0"].reason, "cmds_err grew by 3 (threshold 1)");
  EXPECT_TRUE(health["rdmap80s0"].healthy);
  // A sample already used (same seq) is not compared again: had it been, the
  // 7 more would be a growth.
  latest = make(2, 10);
  t += absl::Seconds(61);
  ASSERT_TRUE(monitor.Tick(t));
  EXPECT_TRUE(health["rdmap79s0"].healthy);
  EXPECT_EQ(OpenFilesUnder(fs.root()), 0);
}

// The detection latency: a growth in the files shows only once a sample
// carries it (up to one sample period later than before).
TEST_F(HealthMonitorTest, EfaCounterGrowthShowsWithTheNextSample) {
  fs_.AddEfa("rdmap79s0", "0000:4f:00.0", {});
  StartMonitor();
  fs_.SetCounter("rdmap79s0", 0, "cmds_err", 3);
  Advance(absl::Seconds(1));
  EXPECT_FALSE(monitor_->Tick(t_)) << "no sample has it yet";
  EXPECT_TRUE(monitor_->health()["rdmap79s0"].healthy);
  Advance(absl::Seconds(1));
  ASSERT_TRUE(Tick());
  EXPECT_EQ(H("rdmap79s0").reason, "cmds_err grew by 3 (threshold 1)");
}

TEST_F(HealthMonitorTest, EfaCounterGrowthUnhealthyThenQuietPeriodHealthy) {
  fs_.AddEfa("rdmap79s0", "0000:4f:00.0", {});
  fs_.AddEfa("rdmap80s0", "0000:50:00.0", {});
  StartMonitor();
  EXPECT_TRUE(H("rdmap79s0").healthy);
  // Traffic counters grow all the time: not a health signal.
  fs_.SetCounter("rdmap79s0", 1, "tx_bytes", 123456789);
  Advance(absl::Seconds(1));
  EXPECT_FALSE(Tick());

  fs_.SetCounter("rdmap79s0", 0, "cmds_err", 3);
  Advance(absl::Seconds(1));
  ASSERT_TRUE(Tick());
  EXPECT_FALSE(H("rdmap79s0").healthy);
  EXPECT_EQ(H("rdmap79s0").reason, "cmds_err grew by 3 (threshold 1)");
  EXPECT_TRUE(H("rdmap80s0").healthy);

  // Port-level counters count too.
  fs_.SetCounter("rdmap80s0", 1, "impaired_remote_conn_events", 1);
  Advance(absl::Seconds(1));
  Tick();
  EXPECT_FALSE(H("rdmap80s0").healthy);
  EXPECT_THAT(H("rdmap80s0").reason, HasSubstr("impaired_remote_conn_events"));

  Advance(absl::Seconds(59));
  Tick();
  EXPECT_TRUE(H("rdmap79s0").healthy);
  EXPECT_FALSE(H("rdmap80s0").healthy);
  Advance(absl::Seconds(2));
  Tick();
  EXPECT_TRUE(H("rdmap80s0").healthy);
}

TEST_F(HealthMonitorTest, ConfigurableThreshold) {
  fs_.AddEfa("rdmap79s0", "0000:4f:00.0", {});
  HealthConfig cfg;
  cfg.efa.error_counters = {{"rdma_read_wr_err", 10}};
  StartMonitor(cfg);
  fs_.SetCounter("rdmap79s0", 1, "rdma_read_wr_err", 5);
  Advance(absl::Seconds(1));
  Tick();
  EXPECT_TRUE(H("rdmap79s0").healthy);
  fs_.SetCounter("rdmap79s0", 1, "rdma_read_wr_err", 20);
  Advance(absl::Seconds(1));
  Tick();
  EXPECT_FALSE(H("rdmap79s0").healthy);
}

// Issue 11 item 5: a port-state file that cannot be read (or reads garbage)
// says nothing about the port; the previous verdict stands.
TEST_F(HealthMonitorTest, UnreadablePortStateKeepsThePreviousVerdict) {
  fs_.AddMlx5("mlx5_0", "0000:3b:00.0", {.link_layer = "Ethernet", .netdev = "eth2"});
  StartMonitor();
  fs_.SetPortState("mlx5_0", 1, "1: DOWN", "3: Disabled");
  Advance(absl::Milliseconds(200));
  ASSERT_TRUE(Tick());
  ASSERT_FALSE(H("mlx5_0").healthy);
  const std::string state =
      fs_.IbDevicePath("mlx5_0").substr(fs_.root().size() + 1) + "/ports/1/state";

  fs_.Remove(state);  // unreadable: ENOENT
  for (int i = 0; i < 3; ++i) {
    Advance(absl::Seconds(3));  // past the hold-down
    EXPECT_FALSE(Tick()) << i;
    EXPECT_FALSE(monitor_->health()["mlx5_0"].healthy) << i;
    EXPECT_EQ(monitor_->health()["mlx5_0"].reason, "port 1 DOWN/Disabled");
  }
  fs_.WriteFile(state, "garbage\n");  // unparsable
  Advance(absl::Seconds(3));
  EXPECT_FALSE(Tick());
  EXPECT_FALSE(monitor_->health()["mlx5_0"].healthy);

  // Readable again and up: Healthy only after the hold-down, as usual.
  fs_.SetPortState("mlx5_0", 1, "4: ACTIVE", "5: LinkUp");
  Advance(absl::Milliseconds(200));
  Tick();
  EXPECT_FALSE(H("mlx5_0").healthy);
  Advance(absl::Seconds(3));
  ASSERT_TRUE(Tick());
  EXPECT_TRUE(H("mlx5_0").healthy);

  // And an unreadable file under a healthy port keeps it Healthy (nothing published).
  fs_.Remove(state);
  Advance(absl::Seconds(1));
  EXPECT_FALSE(Tick());
  EXPECT_TRUE(monitor_->health()["mlx5_0"].healthy);
}

// Health watches the devices the inventory gives it; it never lists sysfs.
TEST_F(HealthMonitorTest, NewDeviceListIsEvaluatedAndPublishedAtOnce) {
  fs_.AddEfa("rdmap79s0", "0000:4f:00.0", {});
  StartMonitor();
  fs_.AddEfa("rdmap80s0", "0000:50:00.0", {});
  Advance(absl::Milliseconds(200));
  EXPECT_FALSE(Tick()) << "the monitor must not rediscover by itself";
  auto inv = DiscoverNode(fs_.paths());
  ASSERT_OK(inv);
  monitor_->SetInventory(*inv, t_);
  EXPECT_NE(last_inv_.Find("rdmap80s0"), nullptr);
  EXPECT_TRUE(H("rdmap80s0").healthy);
  fs_.RemoveDevice("rdmap79s0");
  inv = DiscoverNode(fs_.paths());
  ASSERT_OK(inv);
  monitor_->SetInventory(*inv, t_);
  EXPECT_EQ(last_inv_.Find("rdmap79s0"), nullptr);
  EXPECT_EQ(last_health_.count("rdmap79s0"), 0u);
}

// A device in a Pod's netns (exclusive mode) is not visible from the host: its
// last verdict is held, whatever the host's sysfs no longer says.
TEST_F(HealthMonitorTest, DeviceInAPodNetnsKeepsItsLastVerdict) {
  fs_.AddMlx5("mlx5_0", "0000:3b:00.0", {.link_layer = "Ethernet", .netdev = "eth2"});
  fs_.AddMlx5("mlx5_1", "0000:3b:00.1", {.link_layer = "Ethernet", .netdev = "eth3"});
  StartMonitor();
  NodeInventory inv = last_inv_.devices.empty() ? *DiscoverNode(fs_.paths()) : last_inv_;
  fs_.MoveOutOfHostNetns("mlx5_0");
  inv.in_pod_netns["mlx5_0"] = "default/pod-a";
  monitor_->SetInventory(inv, t_);
  for (int i = 0; i < 5; ++i) {
    Advance(absl::Seconds(1));
    Tick();
    EXPECT_TRUE(monitor_->health()["mlx5_0"].healthy);
  }
  EXPECT_TRUE(H("mlx5_0").healthy);
}

}  // namespace
}  // namespace fabric
