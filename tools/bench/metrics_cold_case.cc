// Case "metrics-cold": /metrics at the production scrape interval (issue 17).
// Prometheus scrapes every 15-30 s, so every scrape finds the agent idle since
// the last one: its render cache (1 s) expired long ago, and its pages, the
// sysfs dentries and the CPU caches have gone cold. The back-to-back loop of
// the "metrics" case keeps all of that hot and hides the difference.
//
// Node: 40 EFA devices (FakeSysfs, counters of realistic width) and 40 Pods,
// one EFA each (fake PodResources). The agent runs with its production options
// (render cache 1 s, its default sampling). Every --scrape-interval:
//   interval/2 idle, GET /healthz (the kubelet probes it about as often),
//   interval/2 idle, GET /metrics on a fresh connection (cold).
// Same-run baselines: the cold /healthz; the pre-sampler path, cold (every
// counter file opened, read and closed, then the render: what a scrape did
// before the sampler, in process, without HTTP), timed a quarter interval
// before the /healthz; and back-to-back /metrics on a second agent over the
// same tree with the render cache off (hot, the "metrics" case's method),
// plus MetricsText() alone back to back.
#include <sys/stat.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agent/http/get.h"
#include "agent/metrics/metrics.h"
#include "agent/sampler/sampler.h"
#include "fmt/format.h"
#include "test/fakes/fake_podresources_server.h"
#include "test/testing/fake_sysfs.h"
#include "tools/bench/agent_harness.h"
#include "tools/bench/cases.h"
#include "tools/bench/fake_node.h"

namespace fabric::bench {
namespace {

constexpr int kColdDevices = 40;
constexpr double kTargetColdP50Ms = 2;
constexpr char kCase[] = "metrics-cold";

// An agent over `sysfs` with one Pod per device in PodResources, started and
// waited for until /metrics shows the Pods' labels.
struct ColdAgent {
  std::unique_ptr<podresources::FakePodResourcesServer> pods;
  std::unique_ptr<AgentHarness> h;
  int port = 0;

  std::string Start(const testing::FakeSysfs& sysfs, const std::vector<std::string>& devices,
                    absl::Duration metrics_cache) {
    std::vector<podresources::FakePod> list;
    for (size_t i = 0; i < devices.size(); ++i) {
      list.push_back(
          {"bench",
           fmt::format("cold-pod-{}", i),
           {{"main", {{std::string(kEfa), devices[i], {i < devices.size() / 2 ? 0 : 1}}}}}});
    }
    h = std::make_unique<AgentHarness>();
    pods = std::make_unique<podresources::FakePodResourcesServer>();
    pods->SetPods(std::move(list));
    mkdir((h->root() + "/pod-resources").c_str(), 0750);
    if (absl::Status s = pods->Start(h->root() + "/pod-resources/kubelet.sock"); !s.ok()) {
      return std::string(s.message());
    }
    AgentOptions opts;
    opts.paths.sysfs_root = sysfs.sys_root();
    opts.paths.dev_root = sysfs.dev_root();
    opts.metrics_address = "127.0.0.1:0";
    opts.metrics_cache = metrics_cache;
    if (absl::Status s = h->Start(opts); !s.ok()) return std::string(s.message());
    port = h->agent().metrics_port();
    if (port <= 0) return "the agent serves no HTTP endpoint";
    const std::string last_pod = fmt::format("\"cold-pod-{}\"", devices.size() - 1);
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (Clock::now() < deadline) {
      HttpResponse r = LocalGet(port, "/metrics");
      if (r.status == 200 && r.body.find(last_pod) != std::string::npos) return "";
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return "no Pod label in /metrics within 20 s";
  }

  ~ColdAgent() {
    h.reset();
    if (pods) pods->Stop();
  }
};

}  // namespace

std::vector<Row> RunMetricsColdCase(const BenchOptions& o) {
  std::vector<Row> rows;
  const std::string label = fmt::format("{} devices, {} Pods", kColdDevices, kColdDevices);
  const std::string spacing = fmt::format("{} s apart", absl::ToDoubleSeconds(o.scrape_interval));
  auto fail = [&](const std::string& why) {
    rows.push_back({.case_name = kCase,
                    .metric = "/metrics p50, cold (" + spacing + "), " + label,
                    .unit = "ms",
                    .target = "<= 2 ms",
                    .note = why});
    return rows;
  };
  testing::FakeSysfs sysfs;
  const std::vector<std::string> devices = AddEfaDevices(sysfs, kColdDevices);

  Samples cold_ms, healthz_ms, one_shot_ms;
  size_t body_bytes = 0;
  int failures = 0;
  {
    ColdAgent agent;
    if (std::string err = agent.Start(sysfs, devices, AgentOptions{}.metrics_cache); !err.empty()) {
      return fail(err);
    }
    for (int i = 0; i < o.cold_scrapes; ++i) {
      absl::SleepFor(o.scrape_interval / 4);
      {
        MetricsInput in;
        in.devices = agent.h->agent().node().inventory.devices;
        in.holds = agent.h->agent().holds();
        const auto s0 = Clock::now();
        in.sample = sampler::SampleCountersOnce(sysfs.paths(), in.devices);
        const std::string text = RenderMetrics(in);
        if (!text.empty()) one_shot_ms.Add(MillisBetween(s0, Clock::now()));
      }
      absl::SleepFor(o.scrape_interval / 4);
      auto t0 = Clock::now();
      HttpResponse h = LocalGet(agent.port, "/healthz");
      if (h.status == 200) {
        healthz_ms.Add(MillisBetween(t0, Clock::now()));
      } else {
        ++failures;
      }
      absl::SleepFor(o.scrape_interval / 2);
      t0 = Clock::now();
      HttpResponse m = LocalGet(agent.port, "/metrics");
      if (m.status == 200) {
        cold_ms.Add(MillisBetween(t0, Clock::now()));
        body_bytes = m.body.size();
      } else {
        ++failures;
      }
    }
  }
  if (cold_ms.empty() || healthz_ms.empty()) return fail("/metrics or /healthz never answered 200");

  // Hot: the same tree, cache off, scraped back to back.
  Samples hot_ms, render_ms;
  {
    ColdAgent agent;
    if (std::string err = agent.Start(sysfs, devices, absl::ZeroDuration()); !err.empty()) {
      return fail("hot agent: " + err);
    }
    const int hot = std::max(20, o.cold_scrapes * 4);
    for (int i = 0; i < hot + 5; ++i) {
      auto t0 = Clock::now();
      HttpResponse m = LocalGet(agent.port, "/metrics");
      const double ms = MillisBetween(t0, Clock::now());
      if (m.status != 200) {
        ++failures;
        continue;
      }
      if (i >= 5) hot_ms.Add(ms);
      t0 = Clock::now();
      std::string text = agent.h->agent().MetricsText();
      if (i >= 5 && !text.empty()) render_ms.Add(MillisBetween(t0, Clock::now()));
    }
  }
  if (hot_ms.empty()) return fail("hot agent: /metrics never answered 200");

  const std::string note = failures ? fmt::format("{} failed requests", failures) : "";
  const double c50 = cold_ms.Percentile(0.5), c90 = cold_ms.Percentile(0.9);
  const double h50 = hot_ms.Percentile(0.5), h90 = hot_ms.Percentile(0.9);
  const std::string n = fmt::format("n={}", cold_ms.size());
  rows.push_back({.case_name = kCase,
                  .metric = fmt::format("/metrics p50, cold ({}), {} ({})", spacing, label, n),
                  .value = c50,
                  .unit = "ms",
                  .baseline = h50,
                  .baseline_name = "hot: back to back p50",
                  .ratio = c50 / h50,
                  .target = "<= 2 ms",
                  .verdict = Verdict(c50 <= kTargetColdP50Ms),
                  .note = note});
  rows.push_back({.case_name = kCase,
                  .metric = fmt::format("/metrics p90, cold ({}), {}", spacing, label),
                  .value = c90,
                  .unit = "ms",
                  .baseline = h90,
                  .baseline_name = "hot: back to back p90",
                  .ratio = c90 / h90});
  rows.push_back({.case_name = kCase,
                  .metric = fmt::format("/metrics p50 cold / /healthz p50 cold, {}", label),
                  .value = c50,
                  .unit = "ms",
                  .baseline = healthz_ms.Percentile(0.5),
                  .baseline_name = "/healthz cold p50",
                  .ratio = c50 / healthz_ms.Percentile(0.5)});
  if (!one_shot_ms.empty()) {
    const double s50 = one_shot_ms.Percentile(0.5);
    rows.push_back({.case_name = kCase,
                    .metric = "/metrics p50 cold / pre-sampler path p50 cold (read + render)",
                    .value = c50,
                    .unit = "ms",
                    .baseline = s50,
                    .baseline_name = "read every counter + render",
                    .ratio = c50 / s50});
  }
  rows.push_back(
      {.case_name = kCase, .metric = "  /metrics max, cold", .value = cold_ms.Max(), .unit = "ms"});
  if (!render_ms.empty()) {
    rows.push_back({.case_name = kCase,
                    .metric = "  MetricsText() render only p50, back to back",
                    .value = render_ms.Percentile(0.5),
                    .unit = "ms"});
  }
  rows.push_back({.case_name = kCase,
                  .metric = "  /metrics body, " + label,
                  .value = static_cast<double>(body_bytes) / 1024,
                  .unit = "KiB"});
  return rows;
}

}  // namespace fabric::bench
