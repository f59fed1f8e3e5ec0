// fabric-bench: the agent's performance against baselines measured in the
// same run (see docs/performance.md). Prints one table; with --check exits 1
// when a case produced no number (the ctest smoke test).
//
//   fabric-bench
//   [--cases=alloc,health,rereg,footprint,metrics,discovery,cni,metrics-cold,sampler,scale]
//                [--quick] [--check] [--json=FILE] [--footprint-seconds=60]
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "agent/base/command_line.h"
#include "agent/base/file_util.h"
#include "agent/base/logging.h"
#include "tools/bench/cases.h"

ABSL_FLAG(std::string, cases,
          "alloc,health,rereg,footprint,discovery,metrics,cni,metrics-cold,sampler,scale",
          "Comma-separated cases to run, in this order");
ABSL_FLAG(bool, quick, false, "Short runs (smoke test): a few iterations per case");
ABSL_FLAG(bool, check, false,
          "Exit 1 if any case produced no number, or a guarded count (not a time) is over");
ABSL_FLAG(std::string, json, "", "Also write the rows as JSON to this file");
ABSL_FLAG(std::string, testdata, "",
          "test/testdata dir (default: $FABRIC_TESTDATA, else the source tree)");
ABSL_FLAG(std::string, generated_nodes, FABRIC_BENCH_GENERATED_NODES,
          "Where the build generated the sample trees that are not checked in (p5-128)");
ABSL_FLAG(std::string, agent_binary, "",
          "fabric-agent executable (default: the one built with this)");
ABSL_FLAG(std::string, compare_agent_binary, "",
          "A second fabric-agent measured in the same footprint window (default: the "
          "dynamically linked twin a FABRIC_STATIC build makes; 'none': off)");
ABSL_FLAG(std::string, log_file, "", "Where agent and simulator logs go (default: a file in /tmp)");
ABSL_FLAG(int, alloc_iterations, 2000,
          "Allocate calls measured per round (and as many floor calls)");
ABSL_FLAG(int, alloc_rounds, 5, "Rounds of --alloc-iterations calls");
ABSL_FLAG(int, health_changes, 30, "Health changes injected per kind");
ABSL_FLAG(int, restarts, 20, "Kubelet restarts");
ABSL_FLAG(int, footprint_seconds, 60, "Footprint sampling window in seconds");
ABSL_FLAG(int, discovery_runs, 200, "DiscoverNode runs per node");
ABSL_FLAG(int, metrics_scrapes, 300, "/metrics scrapes per node size");
ABSL_FLAG(int, cni_runs, 200, "VERSION execs per CNI plugin");
ABSL_FLAG(absl::Duration, scrape_interval, absl::Seconds(15),
          "metrics-cold: time between two /metrics scrapes (Prometheus: 15-30 s); --quick: 300ms");
ABSL_FLAG(int, cold_scrapes, 16, "metrics-cold: /metrics scrapes at --scrape-interval");
ABSL_FLAG(int, sampler_rounds, 40, "sampler: measured rounds per node size (and per reader mode)");
ABSL_FLAG(absl::Duration, sampler_short_period, absl::Milliseconds(100),
          "sampler: the period of the sampler's own thread in the threaded cross-check");
ABSL_FLAG(int, scale_pods, 256, "scale: Pods admitted (at most 256: 32 devices x 8 tokens)");
ABSL_FLAG(int, scale_seconds, 60, "scale: the window in which nobody queries the agents");
ABSL_FLAG(absl::Duration, scale_period, absl::Seconds(5), "scale: the agents' --sample-period");
ABSL_FLAG(int, scale_queries, 200, "scale: requests per /v1/pods path (and /healthz)");
ABSL_FLAG(std::string, cni_binary, "", "fabric-cni executable (default: the one built with this)");
ABSL_FLAG(std::string, extra_rows, "",
          "TSV rows to append to the table (case, metric, value, unit, baseline, "
          "baseline name, target, note); an empty value means not measured");
ABSL_FLAG(std::string, serve_floor, "",
          "Internal: serve the floor service on this socket and wait");

namespace fabric::bench {
namespace {

// Rows measured outside this binary (run.sh: fabricctl vs fi_pingpong).
std::vector<Row> ReadExtraRows(const std::string& path) {
  std::vector<Row> rows;
  auto text = ReadFile(path);
  if (!text.ok()) {
    rows.push_back({.case_name = "extra", .metric = path, .note = "cannot read"});
    return rows;
  }
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipWhitespace())) {
    std::vector<std::string> f = absl::StrSplit(line, '\t');
    f.resize(8);
    Row r{.case_name = f[0],
          .metric = f[1],
          .unit = f[3],
          .baseline_name = f[5],
          .target = f[6],
          .note = f[7]};
    double v = 0, b = 0;
    if (absl::SimpleAtod(f[2], &v)) r.value = v;
    if (absl::SimpleAtod(f[4], &b)) r.baseline = b;
    if (r.value && r.baseline && *r.baseline > 0) r.ratio = *r.value / *r.baseline;
    if (!r.baseline) r.baseline_name.clear();
    rows.push_back(r);
  }
  return rows;
}

std::string SelfPath() {
  auto p = ReadLink("/proc/self/exe");
  return p.ok() ? *p : std::string();
}

int Main() {
  BenchOptions o;
  o.testdata = absl::GetFlag(FLAGS_testdata);
  if (o.testdata.empty()) {
    const char* env = std::getenv("FABRIC_TESTDATA");
    o.testdata = env ? env : FABRIC_BENCH_TESTDATA;
  }
  o.generated_nodes = absl::GetFlag(FLAGS_generated_nodes);
  o.agent_binary = absl::GetFlag(FLAGS_agent_binary);
  if (o.agent_binary.empty()) o.agent_binary = FABRIC_BENCH_AGENT_BINARY;
  o.compare_agent_binary = absl::GetFlag(FLAGS_compare_agent_binary);
#ifdef FABRIC_BENCH_DYNAMIC_AGENT_BINARY
  if (o.compare_agent_binary.empty()) o.compare_agent_binary = FABRIC_BENCH_DYNAMIC_AGENT_BINARY;
#endif
  if (o.compare_agent_binary == "none") o.compare_agent_binary.clear();
  o.cni_binary = absl::GetFlag(FLAGS_cni_binary);
  if (o.cni_binary.empty()) o.cni_binary = FABRIC_BENCH_CNI_BINARY;
  o.self_binary = SelfPath();
  o.log_file = absl::GetFlag(FLAGS_log_file);
  if (o.log_file.empty()) o.log_file = "/tmp/fabric-bench-" + std::to_string(getpid()) + ".log";
  o.alloc_iterations = absl::GetFlag(FLAGS_alloc_iterations);
  o.alloc_rounds = absl::GetFlag(FLAGS_alloc_rounds);
  o.health_changes = absl::GetFlag(FLAGS_health_changes);
  o.restarts = absl::GetFlag(FLAGS_restarts);
  o.footprint_seconds = absl::GetFlag(FLAGS_footprint_seconds);
  o.discovery_runs = absl::GetFlag(FLAGS_discovery_runs);
  o.metrics_scrapes = absl::GetFlag(FLAGS_metrics_scrapes);
  o.cni_runs = absl::GetFlag(FLAGS_cni_runs);
  o.scrape_interval = absl::GetFlag(FLAGS_scrape_interval);
  o.cold_scrapes = absl::GetFlag(FLAGS_cold_scrapes);
  o.sampler_rounds = absl::GetFlag(FLAGS_sampler_rounds);
  o.sampler_short_period = absl::GetFlag(FLAGS_sampler_short_period);
  o.scale_pods = absl::GetFlag(FLAGS_scale_pods);
  o.scale_seconds = absl::GetFlag(FLAGS_scale_seconds);
  o.scale_period = absl::GetFlag(FLAGS_scale_period);
  o.scale_queries = absl::GetFlag(FLAGS_scale_queries);
  if (absl::GetFlag(FLAGS_quick)) {
    o.alloc_iterations = std::min(o.alloc_iterations, 200);
    o.alloc_rounds = std::min(o.alloc_rounds, 2);
    o.health_changes = std::min(o.health_changes, 4);
    o.restarts = std::min(o.restarts, 3);
    o.footprint_seconds = std::min(o.footprint_seconds, 3);
    o.discovery_runs = std::min(o.discovery_runs, 10);
    o.metrics_scrapes = std::min(o.metrics_scrapes, 20);
    o.cni_runs = std::min(o.cni_runs, 10);
    o.scrape_interval = std::min(o.scrape_interval, absl::Milliseconds(300));
    o.cold_scrapes = std::min(o.cold_scrapes, 4);
    o.sampler_rounds = std::min(o.sampler_rounds, 5);
    o.sampler_max_window = absl::Minutes(1);
    o.scale_pods = std::min(o.scale_pods, 16);
    o.scale_seconds = std::min(o.scale_seconds, 2);
    o.scale_period = std::min(o.scale_period, absl::Milliseconds(200));
    o.scale_queries = std::min(o.scale_queries, 10);
  }

  const std::map<std::string, std::function<std::vector<Row>(const BenchOptions&)>> cases = {
      {"alloc", RunAllocateCase},
      {"health", RunHealthCase},
      {"rereg", RunReRegistrationCase},
      {"footprint", RunFootprintCase},
      {"metrics", RunMetricsCase},
      {"discovery", RunDiscoveryCase},
      {"cni", RunCniCase},
      {"metrics-cold", RunMetricsColdCase},
      {"sampler", RunSamplerCase},
      {"scale", RunScaleCase}};
  std::vector<Row> rows;
  for (absl::string_view name :
       absl::StrSplit(absl::GetFlag(FLAGS_cases), ',', absl::SkipEmpty())) {
    auto it = cases.find(std::string(name));
    if (it == cases.end()) {
      std::fprintf(stderr, "fabric-bench: unknown case '%s'\n", std::string(name).c_str());
      return 2;
    }
    std::fprintf(stderr, "fabric-bench: running %s ...\n", it->first.c_str());
    std::vector<Row> got;
    {
      // Agent and simulator log lines (one per Allocate at info level) go to
      // the log file, so the table stays readable.
      StderrToFile redirect(o.log_file);
      got = it->second(o);
    }
    for (const Row& r : got) {
      if (!r.value)
        std::fprintf(stderr, "fabric-bench: %s: %s: not measured: %s\n", r.case_name.c_str(),
                     r.metric.c_str(), r.note.c_str());
    }
    rows.insert(rows.end(), got.begin(), got.end());
  }
  if (!absl::GetFlag(FLAGS_extra_rows).empty()) {
    auto extra = ReadExtraRows(absl::GetFlag(FLAGS_extra_rows));
    rows.insert(rows.end(), extra.begin(), extra.end());
  }
  PrintTable(rows);
  std::printf("(agent and simulator logs: %s)\n", o.log_file.c_str());
  if (!absl::GetFlag(FLAGS_json).empty() && !WriteJson(rows, absl::GetFlag(FLAGS_json))) {
    std::fprintf(stderr, "fabric-bench: cannot write %s\n", absl::GetFlag(FLAGS_json).c_str());
    return 1;
  }
  if (absl::GetFlag(FLAGS_check)) {
    int missing = 0, guards = 0;
    for (const Row& r : rows) {
      missing += !r.value;
      if (r.guard && r.verdict == Verdict(false)) {
        std::fprintf(stderr, "fabric-bench: guard missed: %s = %g (%s)\n", r.metric.c_str(),
                     r.value.value_or(-1), r.target.c_str());
        ++guards;
      }
    }
    if (missing > 0) std::fprintf(stderr, "fabric-bench: %d row(s) without a number\n", missing);
    if (missing > 0 || guards > 0) return 1;
  }
  return 0;
}

}  // namespace
}  // namespace fabric::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "fabric-bench: agent latency and footprint against same-run baselines");
  fabric::ParseCommandLine(argc, argv);
  // The cases write to pipes and sockets of processes they start; one that
  // exits before reading (fabric-cni answers VERSION without reading stdin)
  // must fail a write with EPIPE, not kill the bench.
  signal(SIGPIPE, SIG_IGN);
  if (!absl::GetFlag(FLAGS_serve_floor).empty()) {
    return fabric::bench::ServeFloor(absl::GetFlag(FLAGS_serve_floor));
  }
  return fabric::bench::Main();
}
