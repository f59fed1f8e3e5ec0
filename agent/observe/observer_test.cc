#include "agent/observe/observer.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <shared_mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "agent/observe/document.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "test/testing/test_dirs.h"

namespace fabric::observe {
namespace {

using sampler::Grant;
using sampler::PodNet;
using sampler::Sample;
using sampler::SamplePtr;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kUid[] = "0a1b2c3d-0000-4000-8000-00000000000a";
constexpr char kCid[] = "aaaaaaaaaaaa0000000000000000000000000000000000000000000000000001";
constexpr uint64_t kMebibyte = 1024 * 1024;
const absl::Time kMonoStart = absl::UnixEpoch() + absl::Hours(100);
const absl::Time kWallStart = absl::FromUnixSeconds(1796169600);  // 2026-12-02T00:00:00Z

// A sampler stand-in: one sample per 5 s period into a ring of 122 (10 min),
// with the Pod's traffic per period set by the test; the observer reads the
// ring as the daemon wires it (under the ring's read lock).
class FakeSampler {
 public:
  // The ring reader the daemon gives the observer (Sampler::ReadRing).
  RingReader Reader() {
    return [this](absl::FunctionRef<void(const sampler::SampleRing&)> read) {
      std::shared_lock<std::shared_mutex> lock(mu_);
      read(ring_);
    };
  }
  // The sampler's hook after a round.
  void Publish(TransportObserver& obs) {
    std::shared_lock<std::shared_mutex> lock(mu_);
    obs.OnSample(ring_);
  }
  // Per period: rxe0 packets, the Pod's netns bytes.
  void Round(uint64_t packets, uint64_t net_bytes, bool host_network = false) {
    packets_ += packets;
    net_ += net_bytes;
    auto s = std::make_shared<Sample>();
    s->seq = seq_ + 1;
    s->mono = kMonoStart + absl::Seconds(5 * seq_);
    s->wall = kWallStart + absl::Seconds(5 * seq_);
    ++seq_;
    s->resources_ok = s->procs_ok = true;
    Grant g;
    g.hold =
        PodDeviceHold{"ml", "member-0", "engine", "device.gpustack.ai/rdma.shared", "rxe0", kUid};
    s->grants = {g};
    sampler::DeviceTraffic t;
    t.device = "rxe0";
    t.readable = true;
    t.packets = packets_;
    s->traffic = {t};
    PodNet n;
    n.pod_uid = kUid;
    n.pid = 166;
    n.readable = !host_network;
    n.host_network = host_network;
    n.rx_bytes = net_;
    s->pods = {n};
    sampler::ContainerOwned o;
    o.pod_uid = kUid;
    o.container_id = kCid;
    o.device = "rxe0";
    o.owned.qp = o.owned.qp_active = 2;
    o.pids = {166};
    s->owned = {o};
    s->names[kUid] = sampler::PodNames{"ml", "member-0", {{kCid, "engine"}}, {}};
    std::unique_lock<std::shared_mutex> lock(mu_);
    ring_.Append(*s);
    wall_of_last_ = s->wall;
  }
  absl::Time wall_of_last() const { return wall_of_last_; }

 private:
  uint64_t seq_ = 0, packets_ = 0, net_ = 0;
  absl::Time wall_of_last_;
  std::shared_mutex mu_;
  sampler::SampleRing ring_{122};
};

// A ring of the given samples and its reader, for tests that shape each one.
struct StaticRing {
  explicit StaticRing(const std::vector<SamplePtr>& samples) : ring(samples.size()) {
    for (const SamplePtr& s : samples) ring.Append(*s);
  }
  RingReader Reader() const {
    return [this](absl::FunctionRef<void(const sampler::SampleRing&)> read) { read(ring); };
  }
  sampler::SampleRing ring;
};

nlohmann::json Parse(const absl::StatusOr<std::string>& s) {
  EXPECT_TRUE(s.ok()) << s.status();
  return nlohmann::json::parse(s.ok() ? *s : "null");
}

std::vector<std::string> Keys(const nlohmann::ordered_json& j) {
  std::vector<std::string> k;
  for (auto& [key, v] : j.items()) k.push_back(key);
  return k;
}

TEST(Observer, NothingBeforeTheFirstSample) {
  TransportObserver obs;
  EXPECT_EQ(obs.PodsJson().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(obs.PodJson("ml", "member-0").status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(obs.ServeHttp("/v1/pods", "").status, 503);
  EXPECT_FALSE(obs.Current().has_value());
  // The families are declared, with no series.
  EXPECT_THAT(obs.MetricsText(), HasSubstr("# TYPE fabric_pod_transport gauge"));
  EXPECT_THAT(obs.MetricsText(), Not(HasSubstr("fabric_pod_transport{")));
}

TEST(Observer, KeepsTheLastNonIdleVerdictAcrossIdleWindows) {
  FakeSampler s;
  TransportObserver obs({}, s.Reader());
  for (int i = 0; i < 13; ++i) {
    s.Round(500, 0);
    s.Publish(obs);
  }
  const absl::Time busy_end = s.wall_of_last();
  auto j = Parse(obs.PodJson("ml", "member-0"));
  EXPECT_EQ(j["containers"][0]["verdict"], "rdma");
  EXPECT_EQ(j["containers"][0]["last_non_idle"]["verdict"], "rdma");
  // 20 idle periods: the 60 s window turns idle and keeps what came before.
  for (int i = 0; i < 20; ++i) {
    s.Round(0, 0);
    s.Publish(obs);
  }
  j = Parse(obs.PodJson("ml", "member-0"));
  EXPECT_EQ(j["containers"][0]["verdict"], "idle");
  EXPECT_EQ(j["containers"][0]["last_non_idle"]["verdict"], "rdma");
  // The last window that still saw the traffic ended 5 s after the traffic stopped... the
  // last rdma verdict is that of the newest window still holding > floor packets.
  const std::string at = j["containers"][0]["last_non_idle"]["at"];
  EXPECT_GE(at, Rfc3339(busy_end));
  EXPECT_LT(at, Rfc3339(s.wall_of_last()));
  // A 10-minute window on demand still reaches the traffic, and carries the
  // same remembered verdict.
  auto wide = Parse(obs.PodJson("ml", "member-0", "10m"));
  EXPECT_EQ(wide["containers"][0]["verdict"], "rdma");
  EXPECT_TRUE(wide["window"]["shorter"]);
  // Then a fallback: tcp replaces the remembered verdict.
  for (int i = 0; i < 13; ++i) {
    s.Round(0, 2 * kMebibyte);
    s.Publish(obs);
  }
  j = Parse(obs.PodJson("ml", "member-0"));
  EXPECT_EQ(j["containers"][0]["verdict"], "tcp");
  EXPECT_EQ(j["containers"][0]["fallback"], true);
  EXPECT_EQ(j["containers"][0]["last_non_idle"]["verdict"], "tcp");
}

TEST(Observer, DocumentHasTheIssuesKeys) {
  FakeSampler s;
  TransportObserver obs({}, s.Reader());
  for (int i = 0; i < 13; ++i) {
    s.Round(500, 1000);
    s.Publish(obs);
  }
  auto text = obs.PodJson("ml", "member-0", "60s");
  ASSERT_TRUE(text.ok()) << text.status();
  auto j = nlohmann::ordered_json::parse(*text);
  // The issue's keys first, in its order; additions after.
  EXPECT_THAT(Keys(j),
              ElementsAre("apiVersion", "kind", "namespace", "pod", "window_seconds", "containers",
                          "pod_uid", "host_network", "window", "floor_bytes", "floor_packets"));
  EXPECT_EQ(j["apiVersion"], "fabric.gpustack.ai/v1");
  EXPECT_EQ(j["kind"], "PodTransport");
  EXPECT_EQ(j["namespace"], "ml");
  EXPECT_EQ(j["pod"], "member-0");
  EXPECT_EQ(j["window_seconds"], 60.0);
  EXPECT_EQ(j["floor_bytes"], kMebibyte);
  EXPECT_EQ(j["floor_packets"], 256);
  EXPECT_EQ(j["window"]["start"], "2026-12-02T00:00:00.000Z");
  EXPECT_EQ(j["window"]["end"], "2026-12-02T00:01:00.000Z");
  const auto& c = j["containers"][0];
  std::vector<std::string> ck = Keys(c);
  ASSERT_GE(ck.size(), 7u);
  EXPECT_EQ(std::vector<std::string>(ck.begin(), ck.begin() + 7),
            (std::vector<std::string>{"name", "verdict", "attribution", "fabric_bytes",
                                      "other_bytes", "devices", "evidence"}));
  for (const char* extra : {"fabric_packets", "fallback", "reason", "host_network", "last_non_idle",
                            "container_ids", "granted"}) {
    EXPECT_TRUE(c.contains(extra)) << extra;
  }
  EXPECT_EQ(c["name"], "engine");
  EXPECT_EQ(c["verdict"], "rdma");
  EXPECT_EQ(c["attribution"], "sole-owner");
  EXPECT_TRUE(c["fabric_bytes"].is_null()) << "rxe counts packets";
  EXPECT_EQ(c["fabric_packets"], 6000);
  EXPECT_EQ(c["other_bytes"], 12000);
  EXPECT_TRUE(c["reason"].is_null());
  const auto& d = c["devices"][0];
  std::vector<std::string> dk = Keys(d);
  EXPECT_EQ(std::vector<std::string>(dk.begin(), dk.begin() + 5),
            (std::vector<std::string>{"device", "resource", "kind", "owned", "fabric_bytes"}));
  EXPECT_THAT(Keys(d["owned"]), ElementsAre("qp", "qp_active", "cq", "mr", "mr_bytes", "pd"));
  EXPECT_EQ(d["kind"], "rdma");
  EXPECT_EQ(d["owned"]["qp"], 2);
  EXPECT_EQ(d["holders"], nlohmann::ordered_json({"ml/member-0"}));
  EXPECT_TRUE(c["evidence"].is_array());
  EXPECT_THAT(c["evidence"].dump(), HasSubstr("owns 2 QP on rxe0 (pid 166)"));

  auto list = nlohmann::ordered_json::parse(*obs.PodsJson());
  EXPECT_EQ(list["kind"], "PodTransportList");
  EXPECT_EQ(list["apiVersion"], "fabric.gpustack.ai/v1");
  ASSERT_EQ(list["items"].size(), 1u);
  EXPECT_EQ(list["items"][0], j) << "an item is the Pod's own document";
}

TEST(Observer, HostNetworkOtherBytesIsNull) {
  FakeSampler s;
  TransportObserver obs({}, s.Reader());
  for (int i = 0; i < 13; ++i) {
    s.Round(500, 0, /*host_network=*/true);
    s.Publish(obs);
  }
  auto j = Parse(obs.PodJson("ml", "member-0"));
  EXPECT_TRUE(j["containers"][0]["other_bytes"].is_null());
  EXPECT_EQ(j["containers"][0]["host_network"], true);
  EXPECT_EQ(j["host_network"], true);
}

TEST(Observer, ErrorsNameWhatIsWrong) {
  FakeSampler s;
  TransportObserver obs({}, s.Reader());
  s.Round(0, 0);
  s.Publish(obs);
  auto nf = obs.PodJson("ml", "nope");
  EXPECT_EQ(nf.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(nf.status().message()), HasSubstr("ml/nope"));
  auto bad = obs.PodsJson("5s");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("window '5s'"));

  EXPECT_EQ(obs.ServeHttp("/v1/pods", "").status, 200);
  EXPECT_EQ(obs.ServeHttp("/v1/pods/", "window=90").status, 200);
  EXPECT_EQ(obs.ServeHttp("/v1/pods/ml/member-0", "window=60s&pretty=1").status, 200);
  HttpAnswer a = obs.ServeHttp("/v1/pods/ml/member-0", "window=11m");
  EXPECT_EQ(a.status, 400);
  EXPECT_EQ(a.content_type, "application/json");
  EXPECT_THAT(nlohmann::json::parse(a.body)["error"].get<std::string>(),
              HasSubstr("window '11m': out of range"));
  EXPECT_EQ(obs.ServeHttp("/v1/pods/ml/member-0", "window=").status, 400);
  HttpAnswer nf404 = obs.ServeHttp("/v1/pods/ml/other", "");
  EXPECT_EQ(nf404.status, 404);
  EXPECT_THAT(nlohmann::json::parse(nf404.body)["error"].get<std::string>(), HasSubstr("ml/other"));
  EXPECT_EQ(obs.ServeHttp("/v1/pods/ml", "").status, 404);
  EXPECT_EQ(obs.ServeHttp("/v1/pods/ml/a/b", "").status, 404);
  EXPECT_EQ(obs.ServeHttp("/v1/podsx", "").status, 404);
  // Hostile bytes in the path come back as valid JSON.
  HttpAnswer hostile = obs.ServeHttp("/v1/pods/\xff\"/x", "");
  EXPECT_EQ(hostile.status, 404);
  EXPECT_NO_THROW(nlohmann::json::parse(hostile.body));
}

// A Pod that mounts /dev/infiniband by hostPath holds no grant and, denied
// the device, owns nothing: not of interest, so not listed, but asked for by
// name it gets a verdict from its own network bytes.
TEST(Observer, APodAskedForByNameWithoutGrantOrResources) {
  constexpr char kHostPathUid[] = "0a1b2c3d-0000-4000-8000-00000000000b";
  constexpr char kHostPathCid[] =
      "bbbbbbbbbbbb0000000000000000000000000000000000000000000000000002";
  constexpr char kSandboxCid[] = "bbbbbbbbbbbb0000000000000000000000000000000000000000000000000003";
  std::vector<SamplePtr> ring;
  for (int i = 0; i < 4; ++i) {
    auto s = std::make_shared<Sample>();
    s->seq = i;
    s->mono = kMonoStart + absl::Seconds(5 * i);
    s->wall = kWallStart + absl::Seconds(5 * i);
    s->resources_ok = s->procs_ok = true;
    PodNet n;
    n.pod_uid = kHostPathUid;
    n.pid = 300;
    n.readable = true;
    n.tx_bytes = static_cast<uint64_t>(i) * 3 * kMebibyte;
    n.container_ids = {kHostPathCid, kSandboxCid};
    s->pods = {n};
    s->names[kHostPathUid] =
        sampler::PodNames{"ml", "hostpath", {{kHostPathCid, "sender"}}, {kSandboxCid}};
    ring.push_back(std::move(s));
  }
  StaticRing fixed(ring);
  TransportObserver obs({}, fixed.Reader());
  obs.OnSample(fixed.ring);
  nlohmann::json list = Parse(obs.PodsJson());
  EXPECT_TRUE(list["items"].empty()) << list.dump();
  nlohmann::json doc = Parse(obs.PodJson("ml", "hostpath", "15s"));
  ASSERT_EQ(doc["containers"].size(), 1u) << doc.dump();
  EXPECT_EQ(doc["containers"][0]["name"], "sender");
  EXPECT_EQ(doc["containers"][0]["verdict"], "tcp");
  EXPECT_EQ(doc["containers"][0]["fallback"], false);
  EXPECT_EQ(doc["containers"][0]["other_bytes"], 9 * kMebibyte);
  // Without a runtime record the name leads nowhere.
  EXPECT_EQ(obs.PodJson("ml", "unnamed").status().code(), absl::StatusCode::kNotFound);
}

// promtool, where installed (tools/test.sh installs it): `check metrics` on
// the render, then the alert rules and their unit tests.
std::string RunCommand(const std::string& cmd, int* rc) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  if (!p) {
    *rc = -1;
    return out;
  }
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  *rc = pclose(p);
  return out;
}

TEST(Observer, MetricsOneSeriesPerContainer) {
  FakeSampler s;
  TransportObserver obs({}, s.Reader());
  for (int i = 0; i < 13; ++i) {
    s.Round(0, 2 * kMebibyte);
    s.Publish(obs);
  }
  const std::string text = obs.MetricsText();
  EXPECT_THAT(text, HasSubstr("fabric_pod_transport{namespace=\"ml\",pod=\"member-0\","
                              "container=\"engine\",observed=\"tcp\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("fabric_pod_transport_fallback{namespace=\"ml\",pod=\"member-0\","
                              "container=\"engine\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("bounded"));
  size_t series = 0;
  for (size_t at = 0; (at = text.find("fabric_pod_transport{", at)) != std::string::npos; ++at) {
    ++series;
  }
  EXPECT_EQ(series, 1u);
  if (access("/usr/bin/promtool", X_OK) != 0) GTEST_SKIP() << "no promtool";
  testing::TempDir dir;
  const std::string file = dir.path() + "/scrape.txt";
  std::ofstream(file) << text;
  int rc = 0;
  std::string out = RunCommand("/usr/bin/promtool check metrics < " + file, &rc);
  EXPECT_THAT(out, Not(HasSubstr("parsing error"))) << out;
  EXPECT_THAT(out, Not(HasSubstr("error while linting"))) << out;
}

// Issue 27 item 12: each distinct window costs an evaluation on the worker
// that also renders /metrics. They are cached per sample, and bounded.
TEST(Observer, WindowEvaluationsAreCachedAndBoundedPerSample) {
  ObserverOptions o;
  o.max_evaluations_per_sample = 3;
  o.sample_period = absl::Seconds(5);
  FakeSampler s;
  TransportObserver obs(o, s.Reader());
  for (int i = 0; i < 30; ++i) s.Round(500, 0);
  s.Publish(obs);
  for (const char* w : {"20s", "30s", "45s"}) {
    HttpAnswer a = obs.ServeHttp("/v1/pods", absl::StrCat("window=", w));
    EXPECT_EQ(a.status, 200) << w << ": " << a.body;
  }
  // Asked again: from the cache, not evaluated, not refused.
  EXPECT_EQ(obs.ServeHttp("/v1/pods", "window=30s").status, 200);
  EXPECT_EQ(obs.ServeHttp("/v1/pods", "window=60s").status, 200) << "the default: always cached";
  HttpAnswer refused = obs.ServeHttp("/v1/pods", "window=50s");
  EXPECT_EQ(refused.status, 429);
  nlohmann::json err = Parse(refused.body);
  EXPECT_THAT(err["error"].get<std::string>(), HasSubstr("at most 3 windows"));
  EXPECT_EQ(err["retry_after_seconds"], 5);
  // A Pod asked for by name with a new window counts too.
  EXPECT_EQ(obs.ServeHttp("/v1/pods/ml/member-0", "window=2m").status, 429);
  EXPECT_EQ(obs.ServeHttp("/v1/pods/ml/member-0", "window=30s").status, 200);
  const std::string text = obs.MetricsText();
  EXPECT_THAT(text, HasSubstr("fabric_observe_window_evaluations_total 3\n"));
  EXPECT_THAT(text, HasSubstr("fabric_observe_window_evaluations_refused_total 2\n"));
  // The next sample clears the cache and the budget.
  s.Round(500, 0);
  s.Publish(obs);
  EXPECT_EQ(obs.ServeHttp("/v1/pods", "window=50s").status, 200);
}

// Issue 27 item 10: a Pod re-created under the same name shows twice while
// the old UID is in the kubelet's checkpoint; the series is the live Pod's.
TEST(Observer, MetricsOfARecreatedPodAreTheLivePods) {
  constexpr char kOld[] = "0a1b2c3d-0000-4000-8000-000000000001";  // sorts first
  constexpr char kNew[] = "ffffffff-0000-4000-8000-000000000002";
  std::vector<SamplePtr> ring;
  for (int i = 0; i < 4; ++i) {
    auto s = std::make_shared<Sample>();
    s->seq = i;
    s->mono = kMonoStart + absl::Seconds(5 * i);
    s->wall = kWallStart + absl::Seconds(5 * i);
    s->resources_ok = s->procs_ok = true;
    for (const char* uid : {kOld, kNew}) {
      Grant g;
      g.hold = PodDeviceHold{"ml", "member-0", "engine", "vpc.amazonaws.com/efa", "rdmap79s0", uid};
      g.exclusive = true;
      s->grants.push_back(g);
    }
    sampler::DeviceTraffic t;
    t.device = "rdmap79s0";
    t.kind = DeviceKind::kEfa;
    t.readable = true;
    t.bytes = static_cast<uint64_t>(i) * 100 * kMebibyte;
    s->traffic = {t};
    PodNet n;  // only the new Pod has processes
    n.pod_uid = kNew;
    n.pid = 900;
    n.readable = true;
    s->pods = {n};
    sampler::ContainerOwned o;
    o.pod_uid = kNew;
    o.container_id = kCid;
    o.device = "rdmap79s0";
    o.owned.qp = o.owned.qp_active = 4;
    o.pids = {900};
    s->owned = {o};
    ring.push_back(std::move(s));
  }
  StaticRing fixed(ring);
  TransportObserver obs({}, fixed.Reader());
  obs.OnSample(fixed.ring);
  const std::string text = obs.MetricsText();
  EXPECT_THAT(text, HasSubstr("fabric_pod_transport{namespace=\"ml\",pod=\"member-0\","
                              "container=\"engine\",observed=\"efa\"} 1\n"));
  EXPECT_THAT(text, Not(HasSubstr("observed=\"unknown\"")));
}

TEST(Observer, ConcurrentReadersAndSamples) {
  FakeSampler s;
  TransportObserver obs({}, s.Reader());
  s.Round(500, 0);
  s.Publish(obs);
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    while (!stop) {
      (void)obs.PodsJson("2m");
      (void)obs.MetricsText();
      (void)obs.ServeHttp("/v1/pods/ml/member-0", "");
    }
  });
  for (int i = 0; i < 200; ++i) {
    s.Round(500, 0);
    s.Publish(obs);
  }
  stop = true;
  reader.join();
  EXPECT_EQ(Parse(obs.PodsJson())["items"][0]["containers"][0]["verdict"], "rdma");
}

TEST(AlertRules, PromtoolChecksAndUnitTests) {
  if (access("/usr/bin/promtool", X_OK) != 0) GTEST_SKIP() << "no promtool";
  const std::string root = testing::TestDataDir() + "/../..";
  const std::string rules = root + "/deploy/prometheus/transport-alerts.yaml";
  const std::string tests = root + "/deploy/prometheus/transport-alerts.test.yaml";
  int rc = 0;
  std::string out = RunCommand("/usr/bin/promtool check rules " + rules, &rc);
  EXPECT_EQ(rc, 0) << out;
  out = RunCommand("/usr/bin/promtool test rules " + tests, &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("SUCCESS")) << out;
}

}  // namespace
}  // namespace fabric::observe
