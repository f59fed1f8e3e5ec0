#include "agent/netns/netns_path.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <future>

#include "agent/netns/rdma_netlink_mnl.h"
#include "test/testing/status_matchers.h"

namespace fabric::netns {
namespace {

using ::testing::HasSubstr;

class NetnsPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/netnspathXXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  // Runs `f` on another thread; if it has not returned after 5 s it is
  // blocked in open(): a writer is opened on `fifo` to release it, and the
  // call counts as blocked.
  template <typename F>
  auto RunUnblocking(F f, const std::string& fifo, bool* blocked) {
    auto fut = std::async(std::launch::async, f);
    *blocked = fut.wait_for(std::chrono::seconds(5)) != std::future_status::ready;
    if (*blocked) {
      int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      fut.wait();
      if (w >= 0) ::close(w);
    }
    return fut.get();
  }

  std::string dir_;
};

TEST_F(NetnsPathTest, OwnNetworkNamespaceIsAccepted) {
  EXPECT_OK(CheckNetnsPath("/proc/self/ns/net"));
  auto fd = OpenNetnsFd("/proc/thread-self/ns/net");
  ASSERT_OK(fd.status());
  ::close(*fd);
}

TEST_F(NetnsPathTest, OtherNamespaceTypeIsRefused) {
  absl::Status s = CheckNetnsPath("/proc/self/ns/uts");
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(s.message()), HasSubstr("CLONE_NEWNET"));
}

TEST_F(NetnsPathTest, RegularFileMissingAndRelativePathsAreRefused) {
  std::string file = dir_ + "/not-a-netns";
  std::ofstream(file) << "x";
  absl::Status s = CheckNetnsPath(file);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(s.message()), HasSubstr("not nsfs"));
  EXPECT_THAT(std::string(s.message()), HasSubstr(file));
  EXPECT_THAT(CheckNetnsPath(dir_ + "/missing"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(CheckNetnsPath("proc/self/ns/net"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(NetnsPathTest, FifoIsRefusedWithoutBlocking) {
  std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  bool blocked = false;
  absl::Status s = RunUnblocking([&] { return CheckNetnsPath(fifo); }, fifo, &blocked);
  EXPECT_FALSE(blocked);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
}

// The real netlink opens a netns path for every list and move: a FIFO given
// as CNI_NETNS (or left in a record) must not wedge it.
TEST_F(NetnsPathTest, RealNetlinkDoesNotBlockOnFifoNetns) {
  auto nl = MnlRdmaNetlink::Create();
  if (!nl.ok()) GTEST_SKIP() << "cannot capture own netns: " << nl.status();
  std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  bool blocked = false;
  auto links = RunUnblocking([&] { return (*nl)->ListDevices(fifo); }, fifo, &blocked);
  EXPECT_FALSE(blocked);
  EXPECT_THAT(links, StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace fabric::netns
