// The fabric-bench cases. Each returns table rows; a case that cannot run
// returns rows without a value and a note saying why.
#ifndef FABRIC_TOOLS_BENCH_CASES_H_
#define FABRIC_TOOLS_BENCH_CASES_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tools/bench/bench_util.h"

namespace fabric::bench {

struct BenchOptions {
  std::string testdata;              // <repo>/test/testdata
  std::string generated_nodes;       // <build>/test/testdata/nodes: the trees not checked in
  std::string agent_binary;          // the fabric-agent executable (footprint case)
  std::string compare_agent_binary;  // optional: the same agent linked dynamically
  std::string cni_binary;            // fabric-cni (cni case)
  std::string self_binary;           // this executable (re-exec'd as the floor server)
  std::string log_file;              // where agent/simulator log lines go
  int alloc_iterations = 2000;       // per round
  int alloc_rounds = 5;
  int health_changes = 30;
  int restarts = 20;
  int footprint_seconds = 60;
  int discovery_runs = 200;
  int metrics_scrapes = 300;
  int cni_runs = 200;
  // metrics-cold: scrapes spaced like Prometheus's (the agent idle between).
  absl::Duration scrape_interval = absl::Seconds(15);
  int cold_scrapes = 16;
  // sampler: measured rounds per size (and rounds of its own thread at
  // sampler_short_period).
  int sampler_rounds = 40;
  absl::Duration sampler_short_period = absl::Milliseconds(100);
  absl::Duration sampler_max_window = absl::Minutes(10);  // the ring's capacity
  // scale: the kubelet-sim run of the real agent with --observe.
  int scale_pods = 256;
  int scale_seconds = 60;                          // the window nobody asks anything in
  absl::Duration scale_period = absl::Seconds(5);  // --sample-period
  int scale_queries = 200;                         // per /v1/pods path
};

std::vector<Row> RunAllocateCase(const BenchOptions& o);
std::vector<Row> RunHealthCase(const BenchOptions& o);
std::vector<Row> RunReRegistrationCase(const BenchOptions& o);
std::vector<Row> RunFootprintCase(const BenchOptions& o);
std::vector<Row> RunMetricsCase(const BenchOptions& o);
std::vector<Row> RunDiscoveryCase(const BenchOptions& o);
std::vector<Row> RunCniCase(const BenchOptions& o);
std::vector<Row> RunMetricsColdCase(const BenchOptions& o);
std::vector<Row> RunSamplerCase(const BenchOptions& o);
std::vector<Row> RunScaleCase(const BenchOptions& o);

// The floor server's body when this binary is re-executed with
// --serve-floor=SOCKET: serves an empty DevicePlugin until SIGTERM.
int ServeFloor(const std::string& socket_path);

}  // namespace fabric::bench

#endif  // FABRIC_TOOLS_BENCH_CASES_H_
