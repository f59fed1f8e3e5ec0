// Case 8: fabric-cni start-up. A runtime execs the CNI chain for every Pod on
// the node, so the plugin's cost is dominated by exec + start-up. Both
// fabric-cni and the reference `bridge` plugin (containernetworking-plugins,
// a static Go binary) answer CNI_COMMAND=VERSION, run by run interleaved;
// wall time per exec (fork to reaped) and the child's CPU time (wait4 rusage).
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <optional>
#include <string>

#include "fmt/format.h"
#include "tools/bench/cases.h"

namespace fabric::bench {
namespace {

constexpr double kTargetMs = 5;
constexpr char kBridge[] = "/usr/lib/cni/bridge";

// One VERSION exec; false if the plugin did not print a version list and exit 0.
bool RunVersion(const std::string& binary, double* wall_ms, double* cpu_ms) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) return false;
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]);
    close(in[1]);
    return false;
  }
  const auto t0 = Clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    char* const argv[] = {const_cast<char*>(binary.c_str()), nullptr};
    char* const envp[] = {const_cast<char*>("CNI_COMMAND=VERSION"),
                          const_cast<char*>("CNI_PATH=/usr/lib/cni"), nullptr};
    execve(binary.c_str(), argv, envp);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  static constexpr char kConf[] = R"({"cniVersion":"1.0.0"})";
  [[maybe_unused]] const ssize_t w = write(in[1], kConf, sizeof(kConf) - 1);
  close(in[1]);
  std::string body;
  char buf[4096];
  ssize_t n;
  while ((n = read(out[0], buf, sizeof(buf))) > 0) body.append(buf, static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  rusage ru{};
  wait4(pid, &status, 0, &ru);
  *wall_ms = MillisBetween(t0, Clock::now());
  auto tv_ms = [](const timeval& tv) { return tv.tv_sec * 1000.0 + tv.tv_usec / 1000.0; };
  *cpu_ms = tv_ms(ru.ru_utime) + tv_ms(ru.ru_stime);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
         body.find("supportedVersions") != std::string::npos;
}

}  // namespace

std::vector<Row> RunCniCase(const BenchOptions& o) {
  std::vector<Row> rows;
  auto fail = [&](const std::string& why) {
    rows.push_back({.case_name = "cni",
                    .metric = "fabric-cni VERSION p50",
                    .unit = "ms",
                    .target = fmt::format("<= {:.0f} ms", kTargetMs),
                    .note = why});
    return rows;
  };
  if (access(o.cni_binary.c_str(), X_OK) != 0) return fail("no fabric-cni at " + o.cni_binary);
  const bool bridge = access(kBridge, X_OK) == 0;
  Samples ours, ref;
  double our_cpu = 0, ref_cpu = 0;
  for (int i = 0; i < o.cni_runs; ++i) {
    double wall = 0, cpu = 0;
    if (!RunVersion(o.cni_binary, &wall, &cpu)) return fail("fabric-cni VERSION failed");
    ours.Add(wall);
    our_cpu += cpu;
    if (bridge) {
      if (!RunVersion(kBridge, &wall, &cpu)) return fail(std::string(kBridge) + " VERSION failed");
      ref.Add(wall);
      ref_cpu += cpu;
    }
  }
  const std::string n = fmt::format(" (n={})", o.cni_runs);
  auto add = [&](const std::string& metric, double v, std::optional<double> base,
                 const std::string& target, bool with_verdict) {
    Row r{.case_name = "cni", .metric = metric, .value = v, .unit = "ms"};
    if (base) {
      r.baseline = *base;
      r.baseline_name = "bridge plugin, same run";
      if (*base > 0) r.ratio = v / *base;
    }
    r.target = target;
    if (with_verdict) r.verdict = Verdict(v <= kTargetMs);
    if (!bridge) r.note = std::string("no ") + kBridge + " (containernetworking-plugins)";
    rows.push_back(r);
  };
  auto ref_or = [&](double v) { return bridge ? std::optional<double>(v) : std::nullopt; };
  add("fabric-cni VERSION exec p50" + n, ours.Percentile(0.5), ref_or(ref.Percentile(0.5)),
      fmt::format("<= {:.0f} ms", kTargetMs), true);
  add("fabric-cni VERSION exec p99" + n, ours.Percentile(0.99), ref_or(ref.Percentile(0.99)), "",
      false);
  add("fabric-cni VERSION CPU (user+sys) mean", our_cpu / o.cni_runs, ref_or(ref_cpu / o.cni_runs),
      "", false);
  return rows;
}

}  // namespace fabric::bench
