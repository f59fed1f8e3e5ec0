// Three doctors in one process, on 127.0.0.1, over the tcp provider: the
// whole path (control channel, fabric probes, verdicts) without namespaces.
// The network-fault cases (iptables DROP, link down) are in test/doctor/run.sh.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <thread>

#include "agent/doctor/doctor.h"
#include "agent/doctor/protocol.h"

namespace fabric::doctor {
namespace {

using namespace std::chrono_literals;

class LoopbackDoctors : public ::testing::Test {
 protected:
  void SetUp() override {
    peers_ = ::testing::TempDir() + "/doctor_loopback_peers_" + std::to_string(getpid());
    std::ofstream(peers_) << "";
    for (int i = 0; i < 3; ++i) {
      DoctorOptions o;
      o.enabled = true;
      o.peers = "file:" + peers_;
      o.provider = "tcp";
      o.address = "127.0.0.1:0";
      o.period = absl::Milliseconds(400);
      o.node_name = "node-" + std::string(1, static_cast<char>('a' + i));
      std::vector<LocalDeviceSpec> devices = {{"dev0", "tcp", "", "127.0.0.1"},
                                              {"dev1", "tcp", "", "127.0.0.1"}};
      doctors_.push_back(std::make_unique<Doctor>(o, devices));
      absl::Status s = doctors_.back()->Start();
      ASSERT_TRUE(s.ok()) << s;
    }
    std::ofstream f(peers_);
    for (auto& d : doctors_) f << "127.0.0.1:" << d->control_port() << "\n";
  }
  void TearDown() override {
    for (auto& d : doctors_) d->Stop();
    std::remove(peers_.c_str());
  }
  // Polls until `pred` holds on the snapshot of doctor i (or the deadline).
  bool WaitFor(size_t i, const std::function<bool(const Report&)>& pred,
               std::chrono::milliseconds within) {
    auto deadline = std::chrono::steady_clock::now() + within;
    while (std::chrono::steady_clock::now() < deadline) {
      if (pred(doctors_[i]->Snapshot())) return true;
      std::this_thread::sleep_for(50ms);
    }
    return false;
  }
  static Verdict Overall(const Report& r) { return OverallVerdict(r.pairs, r.peers > 0); }
  static uint64_t Counter(const Report& r, const std::string& k) {
    auto it = r.counters.find(k);
    return it == r.counters.end() ? 0 : it->second;
  }

  std::string peers_;
  std::vector<std::unique_ptr<Doctor>> doctors_;
};

TEST_F(LoopbackDoctors, AllPairsReachableThenPeerDownWhenANodeStops) {
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(WaitFor(
        i,
        [](const Report& r) {
          if (r.peers != 2 || r.pairs.empty() || Overall(r) != Verdict::kOk) return false;
          for (const PairStatus& p : r.pairs) {
            if (!p.reachable || p.rtt_seconds <= 0 || p.peer_device.empty()) return false;
          }
          return true;
        },
        5s))
        << doctors_[i]->PeersJson();
  }
  // Both peers and both of their devices show up (2 devices, K=2: all covered).
  Report a = doctors_[0]->Snapshot();
  std::set<std::string> nodes;
  for (const PairStatus& p : a.pairs) nodes.insert(p.peer_node);
  EXPECT_EQ(nodes, (std::set<std::string>{"node-b", "node-c"}));
  EXPECT_GT(Counter(a, "probes_sent"), 0u);
  EXPECT_GT(Counter(a, "replies_sent"), 0u);

  doctors_[2]->Stop();
  ASSERT_TRUE(WaitFor(
      0,
      [](const Report& r) {
        bool c_down = false;
        for (const PairStatus& p : r.pairs) {
          if (p.peer_node == "node-c" && PairVerdict(p) == Verdict::kPeerDown) c_down = true;
          if (p.peer_node == "node-b" && !p.reachable) return false;
        }
        return c_down && Overall(r) == Verdict::kPeerDown;
      },
      3s))
      << doctors_[0]->PeersJson();
}

TEST_F(LoopbackDoctors, GarbageOnBothChannelsIsCountedAndIgnored) {
  ASSERT_TRUE(WaitFor(
      0, [](const Report& r) { return Overall(r) == Verdict::kOk && r.peers == 2; }, 5s));
  const std::string b_name = doctors_[1]->prober().names()[0].name;
  FabricProber& a = doctors_[0]->prober();
  // Not a probe at all; a probe of an unknown version; a valid probe from a
  // sender nobody introduced (must not be answered).
  ASSERT_TRUE(a.SendRaw(0, b_name, "this is not a probe").ok());
  char buf[kMaxProbeMessage];
  size_t n = EncodeProbe({ProbeKind::kProbe, 7, "intruder"}, buf);
  std::string wrong_version(buf, n);
  wrong_version[4] = 99;
  ASSERT_TRUE(a.SendRaw(0, b_name, wrong_version).ok());
  ASSERT_TRUE(a.SendRaw(0, b_name, std::string(buf, n)).ok());
  // Control channel: junk, an oversized length prefix, a half frame.
  for (std::string junk : {std::string("GET / HTTP/1.0\r\n\r\n"),
                           std::string("\xff\xff\xff\xff", 4), Frame("FDOC\x01\x01truncated")}) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(doctors_[1]->control_port());
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
    ASSERT_EQ(write(fd, junk.data(), junk.size()), static_cast<ssize_t>(junk.size()));
    shutdown(fd, SHUT_WR);
    char sink[64];
    while (read(fd, sink, sizeof(sink)) > 0) {
    }
    close(fd);
  }
  ASSERT_TRUE(WaitFor(
      1,
      [](const Report& r) {
        return Counter(r, "garbage_fabric") >= 2 && Counter(r, "unknown_sender") >= 1 &&
               Counter(r, "garbage_control") >= 3;
      },
      3s))
      << doctors_[1]->PeersJson();
  // ... and B keeps working: a later round is still all ok.
  uint64_t rounds = doctors_[1]->rounds();
  ASSERT_TRUE(WaitFor(
      1,
      [&](const Report& r) {
        return doctors_[1]->rounds() > rounds + 1 && Overall(r) == Verdict::kOk;
      },
      3s));
}

TEST_F(LoopbackDoctors, ControlAnswersButFabricSilentIsFabricUnreachable) {
  ASSERT_TRUE(WaitFor(
      0, [](const Report& r) { return Overall(r) == Verdict::kOk && r.peers == 2; }, 5s));
  // C's fabric endpoints close; its control channel still answers with the
  // old names: the shape of a security group that lets TCP through only.
  doctors_[2]->prober().Stop();
  ASSERT_TRUE(WaitFor(
      0,
      [](const Report& r) {
        for (const PairStatus& p : r.pairs) {
          if (p.peer_node == "node-c" && PairVerdict(p) == Verdict::kFabricUnreachable) {
            return Overall(r) == Verdict::kFabricUnreachable && !p.last_error.empty();
          }
        }
        return false;
      },
      3s))
      << doctors_[0]->PeersJson();
}

TEST(Doctor, NoPeersVerdictWithAnEmptyList) {
  std::string peers = ::testing::TempDir() + "/doctor_nopeers_" + std::to_string(getpid());
  std::ofstream(peers) << "# nobody\n";
  DoctorOptions o;
  o.peers = "file:" + peers;
  o.address = "127.0.0.1:0";
  o.period = absl::Milliseconds(100);
  Doctor d(o, {{"dev0", "tcp", "", "127.0.0.1"}});
  absl::Status s = d.Start();
  ASSERT_TRUE(s.ok()) << s;
  std::this_thread::sleep_for(300ms);
  Report r = d.Snapshot();
  EXPECT_EQ(OverallVerdict(r.pairs, r.peers > 0), Verdict::kNoPeers);
  EXPECT_NE(d.PeersJson().find("\"verdict\": \"no-peers\""), std::string::npos);
  d.Stop();
  std::remove(peers.c_str());
}

TEST(Doctor, RefusesAnotherProviderThanAsked) {
  DoctorOptions o;
  o.peers = "file:/dev/null";
  o.address = "127.0.0.1:0";
  Doctor d(o, {{"dev0", "no-such-provider", "", ""}});
  absl::Status s = d.Start();
  EXPECT_FALSE(s.ok());
  d.Stop();
}

}  // namespace
}  // namespace fabric::doctor

namespace fabric::doctor {
namespace {

// The scheme at the scale this machine holds: 16 nodes x 4 devices, K = 1.
// Every node pair must be covered within ceil(ceil(15/4)/1) = 4 periods, and
// no node may send more than D*(K+1) = 8 probes per period whatever n is.
TEST(DoctorScale, SixteenNodesCoverEveryNodePairWithinTheBound) {
#ifdef __SANITIZE_THREAD__
  GTEST_SKIP() << "16 doctors (80 threads) outgrow TSan's memory here; the other cases cover races";
#endif
  constexpr int kNodes = 16, kDevices = 4, kSample = 1;
  const auto period = absl::Milliseconds(1000);
  std::string peers = ::testing::TempDir() + "/doctor_scale_peers_" + std::to_string(getpid());
  std::ofstream(peers) << "";
  std::vector<std::unique_ptr<Doctor>> doctors;
  for (int i = 0; i < kNodes; ++i) {
    DoctorOptions o;
    o.peers = "file:" + peers;
    o.address = "127.0.0.1:0";
    o.period = period;
    o.sample = kSample;
    o.node_name = "n" + std::to_string(i);
    std::vector<LocalDeviceSpec> devices;
    for (int d = 0; d < kDevices; ++d) {
      devices.push_back({"dev" + std::to_string(d), "tcp", "", "127.0.0.1"});
    }
    doctors.push_back(std::make_unique<Doctor>(o, devices));
    absl::Status s = doctors.back()->Start();
    ASSERT_TRUE(s.ok()) << s;
  }
  {
    std::ofstream f(peers);
    for (auto& d : doctors) f << "127.0.0.1:" << d->control_port() << "\n";
  }
  // Rounds that saw the full list: count from the first one.
  std::vector<uint64_t> start(kNodes);
  for (int i = 0; i < kNodes; ++i) start[i] = doctors[i]->rounds();
  const int bound = 4;
  std::this_thread::sleep_for(std::chrono::milliseconds(1000 * (bound + 2)));
  for (int i = 0; i < kNodes; ++i) {
    Report r = doctors[i]->Snapshot();
    std::set<std::string> reached;
    for (const PairStatus& p : r.pairs) {
      if (p.reachable) reached.insert(p.peer_node);
    }
    EXPECT_EQ(reached.size(), static_cast<size_t>(kNodes - 1))
        << "node " << i << " after " << doctors[i]->rounds() - start[i] << " rounds";
    const uint64_t rounds = r.counters["rounds"];
    ASSERT_GT(rounds, 0u);
    // +1: the round in progress has sent some of its probes already.
    EXPECT_LE(r.counters["probes_sent"], (rounds + 1) * kDevices * (kSample + 1)) << "node " << i;
  }
  Report r0 = doctors[0]->Snapshot();
  std::printf(
      "MEASURE scale nodes=%d devices=%d K=%d rounds=%lu probes_sent=%lu "
      "probes_per_round=%.1f\n",
      kNodes, kDevices, kSample, static_cast<unsigned long>(r0.counters["rounds"]),
      static_cast<unsigned long>(r0.counters["probes_sent"]),
      static_cast<double>(r0.counters["probes_sent"]) / r0.counters["rounds"]);
  for (auto& d : doctors) d->Stop();
  std::remove(peers.c_str());
}

}  // namespace
}  // namespace fabric::doctor
