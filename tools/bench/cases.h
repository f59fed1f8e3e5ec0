// The fabric-bench cases. Each returns table rows; a case that cannot run
// returns rows without a value and a note saying why.
#ifndef FABRIC_TOOLS_BENCH_CASES_H_
#define FABRIC_TOOLS_BENCH_CASES_H_

#include <string>
#include <vector>

#include "tools/bench/bench_util.h"

namespace fabric::bench {

struct BenchOptions {
  std::string testdata;              // <repo>/test/testdata
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
};

std::vector<Row> RunAllocateCase(const BenchOptions& o);
std::vector<Row> RunHealthCase(const BenchOptions& o);
std::vector<Row> RunReRegistrationCase(const BenchOptions& o);
std::vector<Row> RunFootprintCase(const BenchOptions& o);
std::vector<Row> RunMetricsCase(const BenchOptions& o);
std::vector<Row> RunDiscoveryCase(const BenchOptions& o);
std::vector<Row> RunCniCase(const BenchOptions& o);

// The floor server's body when this binary is re-executed with
// --serve-floor=SOCKET: serves an empty DevicePlugin until SIGTERM.
int ServeFloor(const std::string& socket_path);

}  // namespace fabric::bench

#endif  // FABRIC_TOOLS_BENCH_CASES_H_
