// Case 6: DiscoverNode on the whole node at 32 devices (p5.48xlarge) and 128
// (p5-128), interleaved run by run; the ratio of the medians shows whether
// the cost grows linearly (4.0x for 4x the devices).
#include <sys/resource.h>

#include "absl/strings/str_cat.h"
#include "agent/sysfs/sysfs_discovery.h"
#include "tools/bench/agent_harness.h"
#include "tools/bench/cases.h"

namespace fabric::bench {

std::vector<Row> RunDiscoveryCase(const BenchOptions& o) {
  std::vector<Row> rows;
  struct Node {
    std::string name;
    size_t expected;
    HostPaths paths;
    Samples ms;
  };
  std::vector<Node> nodes;
  for (auto [name, n] : {std::pair<const char*, size_t>{"p5.48xlarge", 32}, {"p5-128", 128}}) {
    AgentOptions opts = SampleNodeOptions(o, name);
    nodes.push_back({name, n, opts.paths, {}});
  }
  for (Node& n : nodes) {
    auto inv = DiscoverNode(n.paths);  // warm the page cache and dentries
    if (!inv.ok() || inv->devices.size() != n.expected) {
      rows.push_back(
          {.case_name = "discovery",
           .metric = "DiscoverNode " + n.name,
           .unit = "ms",
           .note = inv.ok() ? absl::StrCat(inv->devices.size(), " devices, expected ", n.expected)
                            : std::string(inv.status().message())});
      return rows;
    }
  }
  auto tv_ms = [](const timeval& tv) { return tv.tv_sec * 1000.0 + tv.tv_usec / 1000.0; };
  double user_ms = 0, sys_ms = 0;
  for (int i = 0; i < o.discovery_runs; ++i) {
    for (Node& n : nodes) {
      rusage r0{}, r1{};
      getrusage(RUSAGE_THREAD, &r0);
      const auto t0 = Clock::now();
      auto inv = DiscoverNode(n.paths);
      const auto t1 = Clock::now();
      getrusage(RUSAGE_THREAD, &r1);
      if (inv.ok()) n.ms.Add(MillisBetween(t0, t1));
      user_ms += tv_ms(r1.ru_utime) - tv_ms(r0.ru_utime);
      sys_ms += tv_ms(r1.ru_stime) - tv_ms(r0.ru_stime);
    }
  }
  const double p32 = nodes[0].ms.Percentile(0.5), p128 = nodes[1].ms.Percentile(0.5);
  const std::string runs = absl::StrCat(" (n=", nodes[0].ms.size(), ")");
  rows.push_back({.case_name = "discovery",
                  .metric = "DiscoverNode 32 devices p50" + runs,
                  .value = p32,
                  .unit = "ms"});
  rows.push_back({.case_name = "discovery",
                  .metric = "DiscoverNode 128 devices p50" + runs,
                  .value = p128,
                  .unit = "ms",
                  .baseline = p32,
                  .baseline_name = "32 devices p50",
                  .ratio = p128 / p32,
                  .target = "linear: ~4x",
                  .verdict = Verdict(p128 / p32 <= 4.0 * 1.25)});
  if (user_ms + sys_ms > 0) {
    rows.push_back({.case_name = "discovery",
                    .metric = "  DiscoverNode CPU spent in the kernel (file reads)",
                    .value = 100 * sys_ms / (user_ms + sys_ms),
                    .unit = "%"});
  }
  rows.push_back({.case_name = "discovery",
                  .metric = "DiscoverNode per device, 32",
                  .value = p32 / 32 * 1000,
                  .unit = "us"});
  return rows;
}

}  // namespace fabric::bench
