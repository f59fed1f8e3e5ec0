#include "agent/daemon/side_files.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "agent/base/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/status_matchers.h"
#include "test/testing/test_dirs.h"

namespace fabric {
namespace {

using ::testing::HasSubstr;

constexpr char kEfa[] = "vpc.amazonaws.com/efa";

RdmaDevice Efa(const std::string& name, int uverbs) {
  RdmaDevice d;
  d.name = name;
  d.kind = DeviceKind::kEfa;
  d.pci = PciInfo{"0000:00:00.0", 0x1d0fu, 0xefa1u, "", 0, "", 0};
  d.uverbs = CharDevice{"infiniband/uverbs" + std::to_string(uverbs), 231,
                        static_cast<uint32_t>(192 + uverbs)};
  return d;
}

// Waits (bounded, only so a regression fails instead of hanging) until
// `done` holds; the writer's own thread does the retries.
bool Eventually(const std::function<bool()>& done) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!done()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// The CDI directory and the NFD file sit under a path that is a regular file
// until the test "repairs" it: every write fails with ENOTDIR, even as root.
class SideFileWriterTest : public ::testing::Test {
 protected:
  SideFileWriterTest() {
    PoolRegistryOptions ro;
    ro.cdi_kind = [](const std::string& r) { return cdi::KindForResource(r); };
    registry_ = std::make_unique<PoolRegistry>(ro);
    NodeInventory inv;
    inv.devices = {Efa("rdmap0", 0), Efa("rdmap1", 1)};
    registry_->SetNode(inv, {});
    Config c = DefaultConfig();
    registry_->ApplyConfig(c);
    blocked_ = dir_.path() + "/blocked";
    std::ofstream(blocked_) << "not a directory\n";
    options_.write_cdi = true;
    options_.cdi_dir = blocked_ + "/cdi";
    options_.cdi_state_dir = dir_.path() + "/state";
    options_.nfd_features_file = blocked_ + "/fabric-features";
    options_.retry_initial = std::chrono::milliseconds(1);
    options_.retry_max = std::chrono::milliseconds(4);
    options_.attempts_before_failing = 3;
  }

  std::string EfaKind() const { return cdi::KindForResource(kEfa); }
  SideFileHealth HealthOf(const SideFileWriter& w, const std::string& file) {
    for (const SideFileHealth& h : w.Health()) {
      if (h.file == file) return h;
    }
    ADD_FAILURE() << "no health for " << file;
    return {};
  }
  void Repair() {
    std::filesystem::remove(blocked_);
    std::filesystem::create_directories(blocked_);
  }

  testing::TempDir dir_{"sidef"};
  std::string blocked_;
  SideFileOptions options_;
  std::unique_ptr<PoolRegistry> registry_;
};

// A write that fails at start is retried by the writer's thread, with no
// further change to trigger it, until it succeeds; the failures stay counted.
TEST_F(SideFileWriterTest, FailedWritesAreRetriedUntilTheyLand) {
  SideFileWriter w(registry_.get(), options_);
  w.WriteNow();  // as the agent does before the first registration
  EXPECT_EQ(HealthOf(w, "cdi").consecutive_failures, 1);
  EXPECT_EQ(HealthOf(w, "nfd").consecutive_failures, 1);
  EXPECT_THAT(HealthOf(w, "cdi").last_error, HasSubstr(options_.cdi_dir));
  EXPECT_THAT(HealthOf(w, "nfd").last_error, HasSubstr(options_.nfd_features_file));
  w.Start();
  // No Poke: only the retry schedule can make these attempts.
  ASSERT_TRUE(Eventually([&] { return HealthOf(w, "cdi").consecutive_failures >= 3; }));
  ASSERT_TRUE(Eventually([&] { return HealthOf(w, "nfd").consecutive_failures >= 3; }));
  Repair();
  ASSERT_TRUE(Eventually([&] {
    return HealthOf(w, "cdi").consecutive_failures == 0 &&
           HealthOf(w, "nfd").consecutive_failures == 0;
  }));
  w.Stop();
  const std::string spec =
      cdi::CdiSpecWriter(options_.cdi_dir, options_.cdi_state_dir).SpecPath(EfaKind());
  EXPECT_TRUE(PathExists(spec)) << spec;
  EXPECT_TRUE(PathExists(options_.nfd_features_file));
  const SideFileHealth cdi = HealthOf(w, "cdi");
  EXPECT_GE(cdi.write_errors, 3u);
  EXPECT_FALSE(cdi.failing);
  EXPECT_EQ(cdi.last_error, "");
}

// While the spec cannot be written the pool is refused only once the retries
// are spent, with a message that says what to fix; and it is granted again as
// soon as a retry lands. The failure shows in /metrics and /readyz.
TEST_F(SideFileWriterTest, CdiSpecReadyRefusesOnlyAfterTheRetriesAndSaysWhy) {
  options_.retry_initial = std::chrono::hours(1);  // the test makes each attempt
  options_.retry_max = std::chrono::hours(1);
  SideFileWriter w(registry_.get(), options_);
  w.WriteNow();
  w.WriteNow();
  EXPECT_OK(w.CdiSpecReady(EfaKind())) << "refused before the retries were spent";
  EXPECT_EQ(w.NotReadyReason(), "");
  w.WriteNow();
  absl::Status refused = w.CdiSpecReady(EfaKind());
  EXPECT_THAT(refused, StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(refused.message(), HasSubstr(options_.cdi_dir));
  EXPECT_THAT(refused.message(), HasSubstr("--cdi-devices"));
  EXPECT_THAT(refused.message(), HasSubstr("3 attempts"));
  EXPECT_OK(w.CdiSpecReady("other.example/kind"));
  EXPECT_THAT(w.NotReadyReason(), HasSubstr("CDI specs not written"));
  EXPECT_THAT(w.NotReadyReason(), HasSubstr("NFD feature file not written"));
  const std::string metrics = w.MetricsText();
  EXPECT_THAT(metrics, HasSubstr("fabric_side_file_write_errors_total{file=\"cdi\"} 3\n"));
  EXPECT_THAT(metrics, HasSubstr("fabric_side_file_write_errors_total{file=\"nfd\"} 3\n"));
  EXPECT_THAT(metrics, HasSubstr("fabric_side_file_failing{file=\"cdi\"} 1\n"));
  Repair();
  w.WriteNow();
  EXPECT_OK(w.CdiSpecReady(EfaKind()));
  EXPECT_EQ(w.NotReadyReason(), "");
  EXPECT_THAT(w.MetricsText(), HasSubstr("fabric_side_file_failing{file=\"cdi\"} 0\n"));
  EXPECT_THAT(w.MetricsText(), HasSubstr("fabric_side_file_write_errors_total{file=\"cdi\"} 3\n"));
}

TEST_F(SideFileWriterTest, NothingToReportWithoutSideFiles) {
  SideFileWriter w(registry_.get(), SideFileOptions{});
  w.WriteNow();
  EXPECT_TRUE(w.Health().empty());
  EXPECT_EQ(w.MetricsText(), "");
  EXPECT_EQ(w.NotReadyReason(), "");
}

}  // namespace
}  // namespace fabric
