#include "agent/podprocs/net_dev.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "test/fakes/fake_proc_tree.h"

namespace fabric::podprocs {
namespace {

using ::testing::ElementsAre;

constexpr char kHeader[] =
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs "
    "drop fifo colls carrier compressed\n";

// `cat /proc/net/dev` on the build machine (Debian 12, 6.x kernel).
constexpr char kThisMachine[] =
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs "
    "drop fifo colls carrier compressed\n"
    "    lo: 16321172244 7416053    0    0    0     0          0         0 16321172244 7416053  "
    "  0    0    0     0       0          0\n"
    "  ifb0:       0       0    0    0    0     0          0         0        0       0    0  "
    "  0    0     0       0          0\n"
    "  ifb1:       0       0    0    0    0     0          0         0        0       0    0  "
    "  0    0     0       0          0\n"
    "  eth0: 527681464   15463    0    0    0     0          0         0   736023    8466    0 "
    "   0    0     0       0          0\n";

TEST(ParseNetDev, ThisMachine) {
  absl::StatusOr<NetBytes> b = ParseNetDev(kThisMachine);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->rx_bytes, 527681464u);
  EXPECT_EQ(b->tx_bytes, 736023u);
  EXPECT_THAT(b->interfaces, ElementsAre("ifb0", "ifb1", "eth0"));  // never lo
}

TEST(ParseNetDev, LongNamesTouchColonAndNumbers) {
  // A 15-byte name has no padding; an 8-digit-plus counter touches the colon.
  const std::string text = std::string(kHeader) +
                           "efa-veth0123456:123456789012 99 0 0 0 0 0 0 42 1 0 0 0 0 0 0\n" +
                           "  eth0:12345678901    1000    0    0    0     0          0         0 "
                           "98765432109    2000    0    0    0     0       0          0\n" +
                           "    lo:       5       1    0    0    0     0          0         0 "
                           "       5       1    0    0    0     0       0          0";
  absl::StatusOr<NetBytes> b = ParseNetDev(text);  // no final newline either
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->rx_bytes, 123456789012u + 12345678901u);
  EXPECT_EQ(b->tx_bytes, 42u + 98765432109u);
  EXPECT_THAT(b->interfaces, ElementsAre("efa-veth0123456", "eth0"));
}

TEST(ParseNetDev, OnlyLoopbackIsZero) {
  absl::StatusOr<NetBytes> b = ParseNetDev(testing::FakeProcTree::NetDevText(0, 0));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->rx_bytes, 0u);
  const std::string lo_only = std::string(kHeader) + "    lo: 5 1 0 0 0 0 0 0 5 1 0 0 0 0 0 0\n";
  b = ParseNetDev(lo_only);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->rx_bytes + b->tx_bytes, 0u);
  EXPECT_TRUE(b->interfaces.empty());
}

TEST(ParseNetDev, FakeTreeText) {
  absl::StatusOr<NetBytes> b = ParseNetDev(testing::FakeProcTree::NetDevText(7 << 20, 3 << 20));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->rx_bytes, 7u << 20);
  EXPECT_EQ(b->tx_bytes, 3u << 20);
}

TEST(ParseNetDev, UncleanNameIsEscapedNotRejected) {
  const std::string text = std::string(kHeader) + "  e\xff\x01:1 0 0 0 0 0 0 0 2 0 0 0 0 0 0 0\n";
  absl::StatusOr<NetBytes> b = ParseNetDev(text);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->rx_bytes, 1u);
  ASSERT_EQ(b->interfaces.size(), 1u);
  EXPECT_EQ(b->interfaces[0], "e\\xff\\x01");
}

TEST(ParseNetDev, Hostile) {
  const std::string line16 = " 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n";
  const std::string hostile[] = {
      "",
      "eth0:" + line16,                                                      // no header
      std::string(kHeader).substr(0, 40),                                    // one header line
      std::string(kHeader) + "eth0 1 2 3\n",                                 // no colon
      std::string(kHeader) + ":" + line16,                                   // no name
      std::string(kHeader) + "sixteen-bytes-xx:" + line16,                   // over IFNAMSIZ-1
      std::string(kHeader) + "a b:" + line16,                                // space in the name
      std::string(kHeader) + "eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15\n",  // 15 fields
      std::string(kHeader) + "eth0:" + line16.substr(0, line16.size() - 1) + " 17\n",
      std::string(kHeader) + "eth0: 1 2 3 4 5 6 7 8 -9 10 11 12 13 14 15 16\n",
      std::string(kHeader) + "eth0: 1 2 3 4 5 6 7 8 0x9 10 11 12 13 14 15 16\n",
      std::string(kHeader) + "eth0: 18446744073709551616 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n",
      std::string(kHeader) + "eth0: 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n" +
          "eth1: 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n",   // the sum overflows
      std::string(kHeader) + "eth0:" + line16 + "\n",  // an empty line
      std::string(kMaxNetDevFileBytes + 1, ' '),
  };
  for (const std::string& text : hostile) {
    SCOPED_TRACE(text.substr(0, 300));
    EXPECT_EQ(ParseNetDev(text).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace fabric::podprocs
