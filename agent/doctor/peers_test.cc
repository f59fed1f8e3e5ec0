#include "agent/doctor/peers.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace fabric::doctor {
namespace {

TEST(Peers, ParsesAddresses) {
  EXPECT_EQ(*ParsePeerAddress("10.0.0.1:7946"), (PeerAddress{"10.0.0.1", 7946}));
  EXPECT_EQ(*ParsePeerAddress("[fe80::1]:7"), (PeerAddress{"fe80::1", 7}));
  EXPECT_EQ(ParsePeerAddress("[fe80::1]:7")->ToString(), "[fe80::1]:7");
  EXPECT_FALSE(ParsePeerAddress("10.0.0.1").ok());
  EXPECT_FALSE(ParsePeerAddress("fe80::1:7").ok());
  EXPECT_FALSE(ParsePeerAddress("h:0").ok());
  EXPECT_FALSE(ParsePeerAddress("h:70000").ok());
  EXPECT_EQ(*ParseListenAddress(":7946"), (PeerAddress{"", 7946}));
  EXPECT_EQ(*ParseListenAddress("7946"), (PeerAddress{"", 7946}));
}

TEST(Peers, ParsesSpecs) {
  auto f = ParsePeerSpec("file:/etc/peers");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->kind, PeerSpec::Kind::kFile);
  EXPECT_EQ(f->target, "/etc/peers");
  auto d = ParsePeerSpec("dns:fabric-doctor.kube-system.svc:7000");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->kind, PeerSpec::Kind::kDns);
  EXPECT_EQ(d->target, "fabric-doctor.kube-system.svc");
  EXPECT_EQ(d->port, 7000);
  EXPECT_EQ(ParsePeerSpec("dns:svc")->port, 0);
  EXPECT_FALSE(ParsePeerSpec("svc").ok());
  EXPECT_FALSE(ParsePeerSpec("file:").ok());
  EXPECT_FALSE(ParsePeerSpec("dns:svc:x").ok());
}

TEST(Peers, ListSkipsCommentsAndNamesTheBadLine) {
  auto l = ParsePeerList("# peers\n10.0.0.1:1\n\n  10.0.0.2:2  # two\n");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->size(), 2u);
  auto bad = ParsePeerList("10.0.0.1:1\nnonsense\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 2"), std::string::npos);
}

TEST(Peers, ResolvesFileAndDnsSortedUnique) {
  std::string path = ::testing::TempDir() + "/doctor_peers.txt";
  std::ofstream(path) << "10.0.0.3:5\n10.0.0.1:5\n10.0.0.3:5\n";
  auto f = ResolvePeers(*ParsePeerSpec("file:" + path), 9);
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(f->size(), 2u);
  EXPECT_EQ((*f)[0].host, "10.0.0.1");
  auto lookup = [](const std::string& name) -> absl::StatusOr<std::vector<std::string>> {
    if (name != "svc") return absl::NotFoundError(name);
    return std::vector<std::string>{"10.1.0.2", "10.1.0.1"};
  };
  auto d = ResolvePeers(*ParsePeerSpec("dns:svc"), 7946, lookup);
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(d->size(), 2u);
  EXPECT_EQ((*d)[0], (PeerAddress{"10.1.0.1", 7946}));
  EXPECT_FALSE(ResolvePeers(*ParsePeerSpec("dns:other"), 1, lookup).ok());
  EXPECT_FALSE(ResolvePeers(*ParsePeerSpec("file:/nonexistent/peers"), 1).ok());
  std::remove(path.c_str());
}

TEST(Peers, LocalAddresses) {
  EXPECT_TRUE(IsLocalAddress("127.0.0.1"));
  EXPECT_FALSE(IsLocalAddress("192.0.2.254"));  // TEST-NET-1, never ours here
}

}  // namespace
}  // namespace fabric::doctor
