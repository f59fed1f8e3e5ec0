#include "tools/fabricctl/doctor_cmd.h"

#include <gtest/gtest.h>

#include <set>

namespace fabric::fabricctl {
namespace {

using doctor::PairStatus;
using doctor::Verdict;

doctor::PeersDocument Doc() {
  doctor::PeersDocument d;
  d.node = "node-a";
  d.verdict = Verdict::kFabricUnreachable;
  PairStatus ok{"node-b", "10.0.0.2:7946", "efa0", "efa1", "efa", true, true, 0.000012, "", 0, 0};
  PairStatus bad{"node-c",
                 "10.0.0.3:7946",
                 "efa0",
                 "efa3",
                 "efa",
                 false,
                 true,
                 -1,
                 "fabric_timeout: no reply within the probe timeout",
                 0,
                 0};
  d.pairs = {ok, bad};
  return d;
}

TEST(DoctorCmd, ParsesFlags) {
  auto c = ParseCommandLine({"doctor", "--agent", "10.0.0.1:9435", "-o", "json"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->kind, Command::Kind::kDoctor);
  EXPECT_EQ(c->doctor.agent, "http://10.0.0.1:9435");
  EXPECT_EQ(c->doctor.format, OutputFormat::kJson);
  auto b = ParseCommandLine({"doctor", "--bench", "node-b:18515", "--provider", "efa"});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->doctor.bench_peer, "node-b:18515");
  EXPECT_EQ(b->doctor.provider, "efa");
  EXPECT_FALSE(ParseCommandLine({"doctor", "--nonsense"}).ok());
}

TEST(DoctorCmd, DistinctExitCodePerVerdict) {
  std::set<int> codes;
  for (Verdict v : {Verdict::kOk, Verdict::kFabricUnreachable, Verdict::kPeerDown,
                    Verdict::kNoPeers, Verdict::kNotProbed}) {
    codes.insert(DoctorExitCode(v));
  }
  EXPECT_EQ(codes.size(), 5u);
  EXPECT_EQ(DoctorExitCode(Verdict::kOk), 0);
  // None collides with the generic error/usage codes or check/bench's.
  for (int c : {1, 2, 3, 4, 5, 6, 7, 8}) EXPECT_EQ(codes.count(c), 0u);
}

TEST(DoctorCmd, JsonHasExactlyTheDocumentedKeys) {
  auto j = DoctorJson(Doc());
  std::vector<std::string> top;
  for (auto& [k, v] : j.items()) top.push_back(k);
  EXPECT_EQ(top, (std::vector<std::string>{"verdict", "pairs"}));
  EXPECT_EQ(j["verdict"], "fabric-unreachable");
  std::vector<std::string> keys;
  for (auto& [k, v] : j["pairs"][0].items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"peer_node", "local_device", "peer_device", "provider",
                                            "reachable", "control_reachable", "rtt_seconds",
                                            "last_error", "not_probed"}));
  EXPECT_TRUE(j["pairs"][1]["rtt_seconds"].is_null());
  EXPECT_EQ(j["pairs"][1]["control_reachable"], true);
}

TEST(DoctorCmd, TextNamesTheFailingPairAndTheLikelyCause) {
  std::string t = DoctorText(Doc());
  EXPECT_NE(t.find("fabric-unreachable (1 of 2 pair(s) failing)"), std::string::npos) << t;
  EXPECT_NE(t.find("node-c"), std::string::npos);
  EXPECT_NE(t.find("likely cause (fabric-unreachable): control channel answers"),
            std::string::npos);
  EXPECT_EQ(t.find("likely cause (peer-down)"), std::string::npos);
}

// Issue 19: a pair that was never probed (provider mismatch) is its own
// verdict, and never gets the security-group advice.
TEST(DoctorCmd, NotProbedPairsGetTheirOwnCauseNotTheSecurityGroup) {
  doctor::PeersDocument d;
  d.node = "node-a";
  PairStatus p;
  p.peer_node = "node-b";
  p.local_device = "rdmap0";
  p.peer_device = "mlx5_0";
  p.provider = "efa";
  p.control_reachable = true;
  p.not_probed = "provider_mismatch";
  p.last_error = "provider mismatch: local efa, peer verbs;ofi_rxm";
  d.pairs = {p};
  d.verdict = doctor::OverallVerdict(d.pairs, true);
  EXPECT_EQ(d.verdict, Verdict::kNotProbed);
  EXPECT_EQ(DoctorExitCode(d.verdict), 13);
  std::string t = DoctorText(d);
  EXPECT_NE(t.find("likely cause (not-probed)"), std::string::npos) << t;
  EXPECT_EQ(t.find("security group"), std::string::npos) << t;
  EXPECT_EQ(DoctorJson(d)["pairs"][0]["not_probed"], "provider_mismatch");
}

}  // namespace
}  // namespace fabric::fabricctl
