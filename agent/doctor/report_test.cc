#include "agent/doctor/report.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "agent/base/utf8.h"

namespace fabric::doctor {
namespace {

PairStatus Pair(bool fabric, bool control) {
  PairStatus p;
  p.peer_node = "node-b";
  p.local_device = "rdmap0";
  p.peer_device = "rdmap1";
  p.provider = "efa";
  p.reachable = fabric;
  p.control_reachable = control;
  return p;
}

TEST(Verdict, PairTable) {
  EXPECT_EQ(PairVerdict(Pair(true, true)), Verdict::kOk);
  EXPECT_EQ(PairVerdict(Pair(true, false)), Verdict::kOk);  // control down, fabric fine
  EXPECT_EQ(PairVerdict(Pair(false, true)), Verdict::kFabricUnreachable);
  EXPECT_EQ(PairVerdict(Pair(false, false)), Verdict::kPeerDown);
}

TEST(Verdict, OverallPrecedence) {
  EXPECT_EQ(OverallVerdict({}, false), Verdict::kNoPeers);
  EXPECT_EQ(OverallVerdict({}, true), Verdict::kNoPeers);  // not probed yet
  EXPECT_EQ(OverallVerdict({Pair(true, true)}, true), Verdict::kOk);
  EXPECT_EQ(OverallVerdict({Pair(true, true), Pair(false, false)}, true), Verdict::kPeerDown);
  EXPECT_EQ(OverallVerdict({Pair(false, false), Pair(false, true)}, true),
            Verdict::kFabricUnreachable);
  for (Verdict v :
       {Verdict::kOk, Verdict::kFabricUnreachable, Verdict::kPeerDown, Verdict::kNoPeers}) {
    EXPECT_EQ(*ParseVerdict(VerdictName(v)), v);
  }
  EXPECT_FALSE(ParseVerdict("fine").ok());
}

TEST(Report, MetricsCarryTheIssueLabelsAndHistogram) {
  Report r;
  r.peers = 1;
  r.now_unix = 100;
  PairStatus p = Pair(false, true);
  p.last_probe_unix = 99;
  p.last_success_unix = 70;
  r.pairs.push_back(p);
  r.rtt[{"rdmap0", "efa"}].Observe(0.0003);
  r.rtt[{"rdmap0", "efa"}].Observe(7);
  r.failures["fabric_timeout"] = 3;
  r.counters["garbage_fabric"] = 2;
  std::string m = RenderMetrics(r);
  EXPECT_NE(
      m.find(
          R"(fabric_peer_reachable{peer_node="node-b",local_device="rdmap0",peer_device="rdmap1",provider="efa"} 0)"),
      std::string::npos)
      << m;
  EXPECT_NE(m.find("fabric_peer_seconds_since_success{peer_node=\"node-b\",local_device=\"rdmap0\","
                   "peer_device=\"rdmap1\",provider=\"efa\"} 30"),
            std::string::npos);
  EXPECT_NE(
      m.find(
          R"(fabric_peer_rtt_seconds_bucket{local_device="rdmap0",provider="efa",le="0.0005"} 1)"),
      std::string::npos);
  EXPECT_NE(
      m.find(R"(fabric_peer_rtt_seconds_bucket{local_device="rdmap0",provider="efa",le="+Inf"} 2)"),
      std::string::npos);
  EXPECT_NE(m.find(R"(fabric_peer_probe_failures_total{reason="fabric_timeout"} 3)"),
            std::string::npos);
  EXPECT_NE(m.find(R"(fabric_doctor_verdict{verdict="fabric-unreachable"} 1)"), std::string::npos);
}

// Issue 19: a label value that is not clean UTF-8 (or carries a newline or a
// quote) must not break the whole scrape.
TEST(Report, MetricsLabelValuesAreAlwaysSafe) {
  Report r;
  r.peers = 1;
  PairStatus p = Pair(true, true);
  p.peer_node = "bad\xff\xfe";
  p.local_device = "a\"b\\c\nd\re";
  p.peer_device = std::string("nul\0x", 5);
  r.pairs.push_back(p);
  r.rtt[{"dev\xc3", "efa"}].Observe(0.001);
  r.failures["reason\x80"] = 1;
  r.counters["event\n"] = 1;
  const std::string m = RenderMetrics(r);
  EXPECT_TRUE(IsValidUtf8(m));
  EXPECT_EQ(m.find('\0'), std::string::npos);
  EXPECT_EQ(m.find('\r'), std::string::npos);
  // Every line is a comment or `name{labels} value`: no value leaked a newline.
  for (absl::string_view line : absl::StrSplit(m, '\n', absl::SkipEmpty())) {
    if (line[0] == '#') continue;
    EXPECT_TRUE(absl::StartsWith(line, "fabric_")) << line;
    EXPECT_NE(line.find("} "), absl::string_view::npos) << line;
  }
  // The three escapes of the text format; other controls become U+FFFD.
  EXPECT_NE(m.find("local_device=\"a\\\"b\\\\c\\nd\xEF\xBF\xBD"
                   "e\""),
            std::string::npos)
      << m;
}

TEST(Report, JsonHasTheDocumentedShapeAndParsesBack) {
  Report r;
  r.peers = 2;
  r.node = "node-a";
  PairStatus ok = Pair(true, true);
  ok.rtt_seconds = 0.001;
  r.pairs = {ok, Pair(false, false)};
  auto j = RenderPeersJson(r);
  EXPECT_EQ(j["verdict"], "peer-down");
  ASSERT_EQ(j["pairs"].size(), 2u);
  for (const char* key : {"peer_node", "local_device", "peer_device", "provider", "reachable",
                          "control_reachable", "rtt_seconds", "last_error"}) {
    EXPECT_TRUE(j["pairs"][0].contains(key)) << key;
  }
  EXPECT_TRUE(j["pairs"][1]["rtt_seconds"].is_null());
  auto doc = ParsePeersJson(j.dump());
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ(doc->verdict, Verdict::kPeerDown);
  ASSERT_EQ(doc->pairs.size(), 2u);
  EXPECT_DOUBLE_EQ(doc->pairs[0].rtt_seconds, 0.001);
  EXPECT_FALSE(ParsePeersJson("[]").ok());
  EXPECT_FALSE(ParsePeersJson(R"({"verdict":"meh","pairs":[]})").ok());
}

}  // namespace
}  // namespace fabric::doctor
