// Case 5: /metrics scrape time with Pods holding devices (fake PodResources
// server), at 32 devices (p5.48xlarge) and 128 (p5-128). Both agents run at
// once in this process and are scraped interleaved, so noise hits both sizes
// alike. The agent's render cache is off (metrics_cache = 0): a Prometheus
// scrape every 15-30 s always misses a 1 s cache, so every scrape here pays
// the render, as it does in production. Baseline: /healthz on the same server.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "agent/http/get.h"
#include "agent/sysfs/sysfs_discovery.h"
#include "fmt/format.h"
#include "test/fakes/fake_podresources_server.h"
#include "tools/bench/agent_harness.h"
#include "tools/bench/cases.h"

namespace fabric::bench {
namespace {

constexpr double kTargetP99Ms = 5;

double TvMillis(const timeval& tv) {
  return static_cast<double>(tv.tv_sec) * 1000 + static_cast<double>(tv.tv_usec) / 1000;
}

struct Instance {
  std::string node;
  size_t devices = 0;
  size_t pod_count = 0;
  std::unique_ptr<podresources::FakePodResourcesServer> pods;
  std::unique_ptr<AgentHarness> h;
  int port = 0;
  bool pod_labels = false;
  size_t bytes = 0;
  Samples metrics_ms, healthz_ms, render_ms;
  double render_cpu_ms = 0;                      // this thread's CPU in direct renders
  double render_user_ms = 0, render_sys_ms = 0;  // getrusage's sampled split of it
  int failures = 0;
};

// Two Pods per device: one holding that EFA, one holding a GPU (a resource
// the agent must skip).
std::string Start(const BenchOptions& o, Instance& in) {
  AgentOptions opts = SampleNodeOptions(o, in.node);
  auto inv = DiscoverNode(opts.paths);
  if (!inv.ok()) return std::string(inv.status().message());
  in.devices = inv->devices.size();
  std::vector<podresources::FakePod> pods;
  for (size_t i = 0; i < inv->devices.size(); ++i) {
    const RdmaDevice& d = inv->devices[i];
    std::vector<int64_t> numa;
    if (d.numa_node() >= 0) numa.push_back(d.numa_node());
    pods.push_back({"bench",
                    fmt::format("bench-pod-{}", 2 * i),
                    {{"main", {{std::string(kEfa), d.name, numa}}}}});
    pods.push_back({"bench",
                    fmt::format("bench-pod-{}", 2 * i + 1),
                    {{"main", {{"nvidia.com/gpu", fmt::format("GPU-{}", i), numa}}}}});
  }
  in.pod_count = pods.size();
  in.h = std::make_unique<AgentHarness>();
  in.pods = std::make_unique<podresources::FakePodResourcesServer>();
  in.pods->SetPods(std::move(pods));
  mkdir((in.h->root() + "/pod-resources").c_str(), 0750);
  if (absl::Status s = in.pods->Start(in.h->root() + "/pod-resources/kubelet.sock"); !s.ok()) {
    return std::string(s.message());
  }
  opts.metrics_address = "127.0.0.1:0";
  opts.metrics_cache = absl::ZeroDuration();
  if (absl::Status s = in.h->Start(opts); !s.ok()) return std::string(s.message());
  in.port = in.h->agent().metrics_port();
  if (in.port <= 0) return "the agent serves no HTTP endpoint";
  // Pod labels appear once PodResources has been listed (every 2 s).
  const auto deadline = Clock::now() + std::chrono::seconds(15);
  while (Clock::now() < deadline) {
    HttpResponse r = LocalGet(in.port, "/metrics");
    if (r.status == 200 && r.body.find("\"bench-pod-0\"") != std::string::npos) {
      in.pod_labels = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return "";
}

}  // namespace

std::vector<Row> RunMetricsCase(const BenchOptions& o) {
  std::vector<Row> rows;
  auto fail = [&](const std::string& why) {
    rows.push_back({.case_name = "metrics",
                    .metric = "/metrics scrape p99, 32 devices, 64 Pods",
                    .unit = "ms",
                    .target = "<= 5 ms",
                    .note = why});
    rows.push_back({.case_name = "metrics",
                    .metric = "/metrics p50 128 devices / 32 devices",
                    .unit = "x",
                    .target = "linear: ~4x",
                    .note = why});
    return rows;
  };
  Instance small{.node = "p5.48xlarge"}, large{.node = "p5-128"};
  for (Instance* in : {&small, &large}) {
    std::string err = Start(o, *in);
    if (!err.empty()) return fail(in->node + ": " + err);
  }
  const int warmup = 5;
  for (int i = 0; i < o.metrics_scrapes + warmup; ++i) {
    for (Instance* in : {&small, &large}) {
      for (const char* path : {"/metrics", "/healthz"}) {
        const auto t0 = Clock::now();
        HttpResponse r = LocalGet(in->port, path);
        const double ms = MillisBetween(t0, Clock::now());
        if (r.status != 200) {
          in->failures++;
          continue;
        }
        if (i < warmup) continue;
        if (std::string(path) == "/metrics") {
          in->metrics_ms.Add(ms);
          in->bytes = r.body.size();
        } else {
          in->healthz_ms.Add(ms);
        }
      }
      // The render alone, without HTTP, and whether its CPU goes to the
      // kernel (sysfs file reads) or to user space (building the text).
      rusage r0{}, r1{};
      getrusage(RUSAGE_THREAD, &r0);
      const double cpu0 = ThreadCpuMillis();
      const auto t0 = Clock::now();
      std::string text = in->h->agent().MetricsText();
      const auto t1 = Clock::now();
      const double cpu1 = ThreadCpuMillis();
      getrusage(RUSAGE_THREAD, &r1);
      if (i >= warmup && !text.empty()) {
        in->render_ms.Add(MillisBetween(t0, t1));
        in->render_cpu_ms += cpu1 - cpu0;
        in->render_user_ms += TvMillis(r1.ru_utime) - TvMillis(r0.ru_utime);
        in->render_sys_ms += TvMillis(r1.ru_stime) - TvMillis(r0.ru_stime);
      }
    }
  }
  for (Instance* in : {&small, &large}) {
    if (in->metrics_ms.empty() || in->healthz_ms.empty()) {
      return fail(fmt::format("{}: /metrics or /healthz never answered 200", in->node));
    }
  }
  for (Instance* in : {&small, &large}) {
    const std::string label = fmt::format("{} devices, {} Pods", in->devices, in->pod_count);
    std::string note = in->pod_labels ? "" : "no Pod label seen in /metrics";
    if (in->failures) {
      note += fmt::format("{}{} failed requests", note.empty() ? "" : "; ", in->failures);
    }
    const double h50 = in->healthz_ms.Percentile(0.5), h99 = in->healthz_ms.Percentile(0.99);
    const double m50 = in->metrics_ms.Percentile(0.5), m99 = in->metrics_ms.Percentile(0.99);
    rows.push_back({.case_name = "metrics",
                    .metric = "/metrics p50, " + label,
                    .value = m50,
                    .unit = "ms",
                    .baseline = h50,
                    .baseline_name = "/healthz p50",
                    .ratio = m50 / h50,
                    .note = note});
    Row r{.case_name = "metrics",
          .metric = "/metrics p99, " + label,
          .value = m99,
          .unit = "ms",
          .baseline = h99,
          .baseline_name = "/healthz p99",
          .ratio = m99 / h99,
          .note = note};
    if (in == &small) {
      r.target = "<= 5 ms";
      r.verdict = Verdict(m99 <= kTargetP99Ms);
    }
    rows.push_back(r);
    rows.push_back({.case_name = "metrics",
                    .metric = "  MetricsText() render only p50, " + label,
                    .value = in->render_ms.empty() ? 0 : in->render_ms.Percentile(0.5),
                    .unit = "ms"});
    if (!in->render_ms.empty()) {
      rows.push_back({.case_name = "metrics",
                      .metric = "  render CPU time per render (thread clock), " + label,
                      .value = in->render_cpu_ms / static_cast<double>(in->render_ms.size()),
                      .unit = "ms"});
    }
    const double cpu = in->render_user_ms + in->render_sys_ms;
    if (cpu > 0) {
      rows.push_back({.case_name = "metrics",
                      .metric = "  render CPU spent in the kernel (sysfs reads), " + label,
                      .value = 100 * in->render_sys_ms / cpu,
                      .unit = "%"});
    }
    rows.push_back({.case_name = "metrics",
                    .metric = "  /metrics body, " + label,
                    .value = static_cast<double>(in->bytes) / 1024,
                    .unit = "KiB"});
  }
  // Wall-time ratios are inflated for the bigger node on a loaded machine (a
  // longer render is preempted more often); the CPU time per render is not,
  // so linearity is judged on it.
  rows.push_back({.case_name = "metrics",
                  .metric = "/metrics p50 (wall), 128 devices / 32 devices",
                  .value = large.metrics_ms.Percentile(0.5) / small.metrics_ms.Percentile(0.5),
                  .unit = "x"});
  if (!small.render_ms.empty() && !large.render_ms.empty()) {
    rows.push_back({.case_name = "metrics",
                    .metric = "render p50 (wall), 128 devices / 32 devices",
                    .value = large.render_ms.Percentile(0.5) / small.render_ms.Percentile(0.5),
                    .unit = "x"});
  }
  const double small_cpu = small.render_cpu_ms;
  const double large_cpu = large.render_cpu_ms;
  if (small_cpu > 0 && small.render_ms.size() == large.render_ms.size()) {
    const double ratio = large_cpu / small_cpu;
    rows.push_back({.case_name = "metrics",
                    .metric = "render CPU time, 128 devices / 32 devices",
                    .value = ratio,
                    .unit = "x",
                    .target = "linear: ~4x",
                    .verdict = Verdict(ratio <= 4.0 * 1.25)});
  } else {
    rows.push_back({.case_name = "metrics",
                    .metric = "render CPU time, 128 devices / 32 devices",
                    .unit = "x",
                    .target = "linear: ~4x",
                    .note = "no CPU time recorded"});
  }
  rows.push_back({.case_name = "metrics",
                  .metric = "/metrics body, 128 devices / 32 devices",
                  .value = static_cast<double>(large.bytes) / static_cast<double>(small.bytes),
                  .unit = "x"});
  for (Instance* in : {&small, &large}) {
    in->h.reset();
    in->pods->Stop();
  }
  return rows;
}

}  // namespace fabric::bench
