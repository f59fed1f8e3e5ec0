#include "agent/holds/holds_watcher.h"

#include <unistd.h>

#include <fstream>
#include <map>
#include <mutex>

#include "agent/pools/pool_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "test/testing/status_matchers.h"
#include "test/testing/test_dirs.h"

namespace fabric::holds {
namespace {

using podresources::PodDevices;
using ::testing::HasSubstr;

constexpr char kRdma[] = "device.gpustack.ai/rdma";
constexpr char kSharedPool[] = "device.gpustack.ai/rdma.shared";

// The kubelet's List as a test sets it: entries, or an error.
class FakeSource : public podresources::PodResourcesSource {
 public:
  absl::StatusOr<std::vector<PodDevices>> GetPodDevices(const std::string&,
                                                        const std::string&) override {
    return absl::UnimplementedError("not used");
  }
  absl::StatusOr<std::vector<PodDevices>> ListPodDevices() override {
    std::lock_guard<std::mutex> lock(mu);
    return list;
  }
  void Set(absl::StatusOr<std::vector<PodDevices>> l) {
    std::lock_guard<std::mutex> lock(mu);
    list = std::move(l);
  }
  std::mutex mu;
  absl::StatusOr<std::vector<PodDevices>> list = std::vector<PodDevices>{};
};

class HoldsWatcherTest : public ::testing::Test {
 protected:
  HoldsWatcherTest() : dir_("holds") {
    socket_ = dir_.path() + "/kubelet.sock";
    checkpoint_ = dir_.path() + "/kubelet_internal_checkpoint";
  }

  void NewWatcher(std::function<void(const KubeletView&)> sink = {}) {
    HoldsWatcherOptions o;
    o.podresources_socket = socket_;
    o.checkpoint_path = checkpoint_;
    o.restart_settle = absl::Seconds(30);
    o.list_failure_bound = absl::Minutes(5);
    o.clock = [this] { return now_; };
    if (!sink) sink = [this](const KubeletView& v) { views_.push_back(v); };
    watcher_ = std::make_unique<HoldsWatcher>(o, &source_, sink, [this] { ++no_source_; });
  }
  // The kubelet (re)creates its socket: a new file.
  void KubeletStarts() {
    unlink(socket_.c_str());
    std::ofstream(socket_) << "";
  }
  void WriteCheckpoint(const std::vector<PodDevices>& entries) {
    nlohmann::json list = nlohmann::json::array();
    for (const PodDevices& e : entries) {
      list.push_back({{"PodUID", e.pod_uid},
                      {"ContainerName", e.container},
                      {"ResourceName", e.resource},
                      {"DeviceIDs", {{"-1", e.device_ids}}},
                      {"AllocResp", ""}});
    }
    std::ofstream(checkpoint_ + ".tmp")
        << nlohmann::json{{"Data", {{"PodDeviceEntries", list}}}, {"Checksum", 0}}.dump();
    std::rename((checkpoint_ + ".tmp").c_str(), checkpoint_.c_str());
  }

  testing::TempDir dir_;
  std::string socket_, checkpoint_;
  absl::Time now_ = absl::FromUnixSeconds(100);
  FakeSource source_;
  std::vector<KubeletView> views_;
  int no_source_ = 0;
  std::unique_ptr<HoldsWatcher> watcher_;
};

TEST_F(HoldsWatcherTest, AKubeletRestartMakesTheViewIncompleteUntilItSettles) {
  KubeletStarts();
  NewWatcher();
  source_.Set(std::vector<PodDevices>{{"ns", "a", "c", kSharedPool, {"mlx5_0.t0"}}});
  watcher_->RunRound();
  ASSERT_EQ(views_.size(), 1u);
  EXPECT_TRUE(views_.back().complete);
  KubeletStarts();
  source_.Set(std::vector<PodDevices>{});  // the pod manager is not filled yet
  now_ += absl::Seconds(1);
  watcher_->RunRound();
  EXPECT_FALSE(views_.back().complete);
  EXPECT_THAT(views_.back().incomplete_reason, HasSubstr("kubelet restarted"));
  EXPECT_EQ(watcher_->status().kubelet_restarts, 1u);
  now_ += absl::Seconds(29);
  watcher_->RunRound();
  EXPECT_FALSE(views_.back().complete);
  now_ += absl::Seconds(2);
  watcher_->RunRound();
  EXPECT_TRUE(views_.back().complete);
  EXPECT_EQ(views_.back().observed_at, now_);
}

// Seen with the real kubelet v1.20.2 (case 10): the new socket appears a
// round before the new kubelet answers List; the settle still names it.
TEST_F(HoldsWatcherTest, ARestartSeenWhileListFailsIsStillNamedARestart) {
  KubeletStarts();
  NewWatcher();
  watcher_->RunRound();
  KubeletStarts();
  source_.Set(absl::UnavailableError("connection refused"));
  now_ += absl::Seconds(2);
  watcher_->RunRound();
  source_.Set(std::vector<PodDevices>{});
  now_ += absl::Seconds(2);
  watcher_->RunRound();
  EXPECT_FALSE(views_.back().complete);
  EXPECT_THAT(views_.back().incomplete_reason, HasSubstr("kubelet restarted"));
  EXPECT_EQ(watcher_->status().kubelet_restarts, 1u);
}

TEST_F(HoldsWatcherTest, AFailingListIsBoundedAndSaysSo) {
  KubeletStarts();
  WriteCheckpoint({{"", "", "c", kSharedPool, {"mlx5_0.t0"}, "uid-a"}});
  NewWatcher();
  source_.Set(absl::UnavailableError("connection refused"));
  watcher_->RunRound();
  EXPECT_FALSE(views_.back().complete);
  EXPECT_THAT(views_.back().incomplete_reason, HasSubstr("connection refused"));
  ASSERT_EQ(views_.back().entries.size(), 1u) << "the checkpoint still counts";
  EXPECT_TRUE(watcher_->status().not_ready_reason.empty());
  now_ += absl::Minutes(5);
  watcher_->RunRound();
  EXPECT_TRUE(views_.back().complete) << "past the bound the checkpoint alone is the view";
  EXPECT_TRUE(views_.back().proves_absence);
  HoldsStatus st = watcher_->status();
  EXPECT_EQ(st.list_errors, 2u);
  EXPECT_EQ(st.list_failing_for, absl::Minutes(5));
  EXPECT_THAT(st.not_ready_reason, HasSubstr("PodResources List failing for 5m"));
  EXPECT_THAT(st.not_ready_reason, HasSubstr("kubelet checkpoint alone"));
  // However long List fails, the kubelet's record is not aged out.
  now_ += absl::Minutes(20);
  watcher_->RunRound();
  EXPECT_EQ(views_.back().entries.size(), 1u);
  now_ -= absl::Minutes(20);
  // Without a checkpoint either, grants lapse by TTL only.
  unlink(checkpoint_.c_str());
  watcher_->RunRound();
  EXPECT_TRUE(views_.back().complete);
  EXPECT_FALSE(views_.back().proves_absence);
  EXPECT_THAT(watcher_->status().not_ready_reason, HasSubstr("grants lapse after their TTL"));
  // List answers again: the kubelet may have restarted unseen, so it settles.
  source_.Set(std::vector<PodDevices>{});
  watcher_->RunRound();
  EXPECT_FALSE(views_.back().complete);
  EXPECT_TRUE(watcher_->status().not_ready_reason.empty());
}

TEST_F(HoldsWatcherTest, ANodeWithoutPodResourcesUsesTheCheckpointOrNothing) {
  NewWatcher();
  watcher_->RunRound();
  EXPECT_EQ(no_source_, 1);
  EXPECT_TRUE(views_.empty());
  WriteCheckpoint({{"", "", "c", kSharedPool, {"mlx5_0.t0"}, "uid-a"}});
  watcher_->RunRound();
  ASSERT_EQ(views_.size(), 1u);
  EXPECT_TRUE(views_.back().complete);
  EXPECT_EQ(views_.back().entries.size(), 1u);
}

// The two real-kubelet findings end to end through the registry: the view the
// watcher builds keeps the exclusive pool withdrawn (both failed before: the
// holds came from List alone and every List was trusted as complete).
class HoldsThroughRegistryTest : public HoldsWatcherTest {
 protected:
  HoldsThroughRegistryTest() {
    PoolRegistryOptions o;
    o.clock = [this] { return now_; };
    registry_ = std::make_unique<PoolRegistry>(o);
    RdmaDevice d;
    d.name = "mlx5_0";
    d.kind = DeviceKind::kRdma;
    d.pci = PciInfo{"0000:00:00.0", 0, 0, "", 0, "", 0};
    d.uverbs = CharDevice{"infiniband/uverbs0", 231, 192};
    NodeInventory inv;
    inv.devices = {d};
    registry_->SetNode(inv, {});
    Config c = DefaultConfig();
    for (PoolConfig& p : c.pools) p.tokens_per_device = 2;
    registry_->ApplyConfig(c);
    NewWatcher([this](const KubeletView& v) { registry_->SetHolds(v); });
  }
  std::unique_ptr<PoolRegistry> registry_;
};

TEST_F(HoldsThroughRegistryTest, ExclusiveAllocateRightAfterAKubeletRestartIsRefused) {
  KubeletStarts();
  const PodDevices shared_pod{"ns", "a", "c", kSharedPool, {"mlx5_0.t0"}};
  source_.Set(std::vector<PodDevices>{shared_pod});
  WriteCheckpoint({{"", "", "c", kSharedPool, {"mlx5_0.t0"}, "uid-a"}});
  watcher_->RunRound();
  ASSERT_THAT(registry_->Claim(kRdma, {"mlx5_0"}), StatusIs(absl::StatusCode::kFailedPrecondition));
  // The kubelet restarts: its first List is [].
  KubeletStarts();
  source_.Set(std::vector<PodDevices>{});
  now_ += absl::Milliseconds(500);
  watcher_->RunRound();
  EXPECT_THAT(registry_->Claim(kRdma, {"mlx5_0"}), StatusIs(absl::StatusCode::kFailedPrecondition));
  // Even once settled, the checkpoint still holds the running Pod.
  now_ += absl::Minutes(1);
  watcher_->RunRound();
  EXPECT_THAT(registry_->Claim(kRdma, {"mlx5_0"}), StatusIs(absl::StatusCode::kFailedPrecondition));
  // The Pod is gone from both: the exclusive pool opens.
  WriteCheckpoint({});
  watcher_->RunRound();
  EXPECT_OK(registry_->Claim(kRdma, {"mlx5_0"}));
}

TEST_F(HoldsThroughRegistryTest, AnInitContainersSharedGrantIsNotReleasedWhileItRuns) {
  KubeletStarts();
  watcher_->RunRound();
  ASSERT_OK(registry_->Claim(kSharedPool, {"mlx5_0.t1"}));
  // The kubelet recorded it for the init container; List shows only the app
  // container, which has no devices.
  WriteCheckpoint({{"", "", "init", kSharedPool, {"mlx5_0.t1"}, "uid-i"}});
  for (int i = 0; i < 15; ++i) {  // 30 s of 2 s rounds
    now_ += absl::Seconds(2);
    watcher_->RunRound();
    ASSERT_THAT(registry_->Claim(kRdma, {"mlx5_0"}),
                StatusIs(absl::StatusCode::kFailedPrecondition))
        << "round " << i;
  }
  EXPECT_EQ(registry_->holds().at(0).container, "init");
}

// The kubelet keeps an ended Pod's checkpoint entries until its next
// allocation. A Pod that List showed and shows no more is released at once; a
// UID List never showed is held for unlisted_hold_max at most.
TEST_F(HoldsThroughRegistryTest, EndedPodsInTheCheckpointDoNotWithdrawForever) {
  KubeletStarts();
  source_.Set(std::vector<PodDevices>{{"ns", "a", "c", kSharedPool, {"mlx5_0.t0"}}});
  WriteCheckpoint({{"", "", "c", kSharedPool, {"mlx5_0.t0"}, "uid-a"}});
  watcher_->RunRound();
  ASSERT_THAT(registry_->Claim(kRdma, {"mlx5_0"}), StatusIs(absl::StatusCode::kFailedPrecondition));
  source_.Set(std::vector<PodDevices>{});  // deleted; the checkpoint keeps it
  now_ += absl::Seconds(2);
  watcher_->RunRound();
  EXPECT_OK(registry_->Claim(kRdma, {"mlx5_0"}));
}

// Issue 32 item 17: a sidecar (an init container with restartPolicy: Always,
// 1.29+) runs for the Pod's life. A 1.29+ kubelet's List names it among the
// Pod's containers, before the app containers; the checkpoint has its grant
// and a plain init container's. The sidecar's is an app container's hold for
// as long as the Pod is listed, past the bound on unlisted entries.
TEST_F(HoldsThroughRegistryTest, ASidecarsGrantIsHeldForThePodsLife) {
  KubeletStarts();
  source_.Set(std::vector<PodDevices>{{"ns", "m", "store", kShared, {"mlx5_0.t1"}},
                                      {"ns", "m", "engine", kShared, {}}});
  WriteCheckpoint({{"", "", "fetch", kShared, {"mlx5_0.t0"}, "uid-m"},
                   {"", "", "store", kShared, {"mlx5_0.t1"}, "uid-m"}});
  for (int i = 0; i < 330; ++i) {  // 11 minutes of 2 s rounds
    now_ += absl::Seconds(2);
    watcher_->RunRound();
  }
  ASSERT_THAT(registry_->Claim(kRdma, {"mlx5_0"}), StatusIs(absl::StatusCode::kFailedPrecondition));
  std::map<std::string, bool> init_by_container;
  for (const PodDeviceHold& h : registry_->holds())
    init_by_container[h.container] = h.init_container;
  EXPECT_FALSE(init_by_container.at("store"));
  EXPECT_EQ(registry_->holds().size(), 2u);
  EXPECT_TRUE(init_by_container.at("fetch"));
}

TEST_F(HoldsThroughRegistryTest, AnUnlistedCheckpointEntryIsHeldAtMostTheBound) {
  KubeletStarts();
  WriteCheckpoint({{"", "", "init", kSharedPool, {"mlx5_0.t1"}, "uid-i"}});
  watcher_->RunRound();
  now_ += absl::Minutes(9);
  watcher_->RunRound();
  ASSERT_THAT(registry_->Claim(kRdma, {"mlx5_0"}), StatusIs(absl::StatusCode::kFailedPrecondition));
  now_ += absl::Minutes(1);
  watcher_->RunRound();
  EXPECT_OK(registry_->Claim(kRdma, {"mlx5_0"}));
}

}  // namespace
}  // namespace fabric::holds
