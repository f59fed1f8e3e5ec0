#include "tools/fabricctl/bench.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rdma/fabric.h>
#include <sys/socket.h>

#include "test/testing/status_matchers.h"
#include "tools/fabricctl/bench_protocol.h"

namespace fabric::fabricctl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ProviderGuardTest, CoreNameBeforeSemicolonIsTheProvider) {
  EXPECT_THAT(CheckOpenedProvider("tcp", "tcp;ofi_rxm"), IsOk());
  EXPECT_THAT(CheckOpenedProvider("verbs", "verbs;ofi_rxm"), IsOk());
  EXPECT_THAT(CheckOpenedProvider("shm", "shm"), IsOk());
  EXPECT_THAT(CheckOpenedProvider("efa", "efa"), IsOk());
  absl::Status s = CheckOpenedProvider("efa", "tcp;ofi_rxm");
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(s.message()), HasSubstr("requested provider 'efa'"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("opened 'tcp;ofi_rxm'"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("silent-fallback guard"));
  // A utility provider name is not the provider: ofi_rxm runs over tcp here.
  EXPECT_THAT(CheckOpenedProvider("ofi_rxm", "tcp;ofi_rxm"),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(CheckOpenedProvider("sockets", "tcp;ofi_rxm"),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(ProviderGuardTest, IpAddressedProviders) {
  for (const char* p : {"tcp", "sockets", "udp", "verbs", "net"}) {
    EXPECT_TRUE(ProviderUsesIpAddressing(p)) << p;
  }
  for (const char* p : {"efa", "shm", "psm2", "ofi_rxm"}) {
    EXPECT_FALSE(ProviderUsesIpAddressing(p)) << p;
  }
}

TEST(MrModeNamesTest, ListsSetBits) {
  EXPECT_THAT(MrModeNames(0), ElementsAre());
  EXPECT_THAT(MrModeNames(FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY),
              ElementsAre("FI_MR_LOCAL", "FI_MR_VIRT_ADDR", "FI_MR_ALLOCATED", "FI_MR_PROV_KEY"));
  EXPECT_THAT(MrModeNames(FI_MR_ENDPOINT), ElementsAre("FI_MR_ENDPOINT"));
}

TEST(BenchResultTest, JsonShapeAndRates) {
  BenchResult r;
  r.provider_requested = "tcp";
  r.provider = "tcp;ofi_rxm";
  r.fabric = "127.0.0.1/32";
  r.domain = "lo";
  r.peer_provider = "tcp;ofi_rxm";
  r.peer_domain = "lo";
  r.mr_mode = {"FI_MR_LOCAL"};
  r.size = 1 << 20;
  r.batch = 16;
  r.threads = 2;
  r.duration_s = 5;
  r.write = {4'000'000'000, 3815, 2.0};
  r.read = {1'000'000'000, 953, 4.0};
  auto j = BenchResultToJson(r);
  EXPECT_EQ(j.begin().key(), "provider");
  EXPECT_EQ(j["provider"], "tcp;ofi_rxm");
  EXPECT_EQ(j["provider_core"], "tcp");
  EXPECT_EQ(j["provider_requested"], "tcp");
  EXPECT_DOUBLE_EQ(j["write_gbytes_per_s"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["read_gbytes_per_s"].get<double>(), 0.25);
  EXPECT_EQ(j["write"]["ops"], 3815);
  EXPECT_EQ(j["read"]["bytes"], 1'000'000'000);
  EXPECT_EQ(j["size_bytes"], 1 << 20);
  EXPECT_EQ(j["threads"], 2);
  EXPECT_EQ(j["mr_mode"][0], "FI_MR_LOCAL");
  std::string text = BenchResultToText(r);
  EXPECT_THAT(text, HasSubstr("write     2.000 GB/s"));
  EXPECT_THAT(text, HasSubstr("read      0.250 GB/s"));
  EXPECT_DOUBLE_EQ(PhaseResult{}.GBytesPerSecond(), 0);
}

TEST(BenchProtocolTest, HelloRoundTrip) {
  Hello h{"efa",
          1 << 20,
          16,
          2,
          "efa",
          "rdmap79s0-rdm",
          {std::string("\0\x01"
                       "abc",
                       5),
           "x"}};
  EXPECT_THAT(DecodeHello(EncodeHello(h)), IsOkAndHolds(h));
}

TEST(BenchProtocolTest, WelcomeRoundTrip) {
  Welcome w{0,
            "",
            "tcp;ofi_rxm",
            "127.0.0.1/32",
            "lo",
            {{"name0", 0x7f0000001000, 42}, {"name1", 0, ~0ull}}};
  EXPECT_THAT(DecodeWelcome(EncodeWelcome(w)), IsOkAndHolds(w));
}

TEST(BenchProtocolTest, RejectsTruncatedWrongTypeAndHugeCounts) {
  std::string hello = EncodeHello(Hello{"tcp", 4096, 1, 1, "tcp;ofi_rxm", "lo", {"n"}});
  for (size_t cut = 0; cut < hello.size(); ++cut) {
    EXPECT_THAT(DecodeHello(hello.substr(0, cut)), StatusIs(absl::StatusCode::kDataLoss)) << cut;
  }
  EXPECT_THAT(DecodeHello(hello + "x"), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(DecodeWelcome(hello), StatusIs(absl::StatusCode::kDataLoss));
  std::string welcome = EncodeWelcome(Welcome{});
  welcome[welcome.size() - 4] = '\x7f';  // buffer count ~2^30 with no bytes behind it
  EXPECT_THAT(DecodeWelcome(welcome), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(ExpectEmpty(EncodeEmpty(FrameType::kDone), FrameType::kDone), IsOk());
  EXPECT_THAT(ExpectEmpty(EncodeEmpty(FrameType::kDone), FrameType::kBye),
              StatusIs(absl::StatusCode::kDataLoss));
}

TEST(BenchSocketTest, FramesOverLoopback) {
  auto listener = ListenTcp(HostPort{"127.0.0.1", 0});
  ASSERT_THAT(listener, IsOk());
  auto port = BoundPort(listener->get());
  ASSERT_THAT(port, IsOk());
  EXPECT_NE(*port, 0);
  auto client = ConnectTcp(HostPort{"127.0.0.1", *port}, 5);
  ASSERT_THAT(client, IsOk());
  auto server = AcceptOne(listener->get(), 5);
  ASSERT_THAT(server, IsOk());
  EXPECT_THAT(LocalAddress(client->get()), IsOkAndHolds(std::string("127.0.0.1")));
  EXPECT_FALSE(Readable(server->get()));
  std::string big(300000, 'z');
  ASSERT_THAT(SendFrame(client->get(), big), IsOk());
  EXPECT_THAT(RecvFrame(server->get(), 5), IsOkAndHolds(big));
  // Nothing more: a short timeout, then EOF once the client closes.
  EXPECT_THAT(RecvFrame(server->get(), 0.05), StatusIs(absl::StatusCode::kDeadlineExceeded));
  *client = ScopedFd();
  EXPECT_TRUE(Readable(server->get()));
  EXPECT_THAT(RecvFrame(server->get(), 5), StatusIs(absl::StatusCode::kUnavailable));
}

TEST(BenchSocketTest, ConnectTimesOutWhenNobodyListens) {
  auto listener = ListenTcp(HostPort{"127.0.0.1", 0});
  ASSERT_THAT(listener, IsOk());
  uint16_t port = *BoundPort(listener->get());
  *listener = ScopedFd();  // port now closed
  EXPECT_THAT(ConnectTcp(HostPort{"127.0.0.1", port}, 0.2),
              StatusIs(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace fabric::fabricctl
