// Case 4: footprint of the real fabric-agent binary on the p5 tree, served to
// the in-process kubelet simulator with health checks on (the monitor always
// runs): VmRSS and utime+stime sampled from /proc for --footprint-seconds.
// The baseline is this binary re-executed as an idle gRPC server process
// (--serve-floor), sampled over the same window.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "agent/base/file_util.h"
#include "agent/discovery/sysfs_discovery.h"
#include "agent/podresources/fake_podresources_server.h"
#include "fmt/format.h"
#include "tools/bench/agent_harness.h"
#include "tools/bench/cases.h"

namespace fabric::bench {
namespace {

constexpr double kTargetRssMiB = 16;
constexpr double kTargetCpuPercent = 0.5;

struct ProcStatus {
  double rss_mib = 0, rss_anon_mib = 0, rss_file_mib = 0, hwm_mib = 0;
  int threads = 0;
};

// Fields of /proc/<pid>/status in kB.
bool ReadStatus(pid_t pid, ProcStatus* out) {
  std::ifstream f(fmt::format("/proc/{}/status", pid));
  if (!f) return false;
  std::string key;
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    in >> key;
    double v = 0;
    in >> v;
    if (key == "VmRSS:") out->rss_mib = v / 1024;
    if (key == "RssAnon:") out->rss_anon_mib = v / 1024;
    if (key == "RssFile:") out->rss_file_mib = v / 1024;
    if (key == "VmHWM:") out->hwm_mib = v / 1024;
    if (key == "Threads:") out->threads = static_cast<int>(v);
  }
  return true;
}

// utime+stime (clock ticks) and comm of a /proc/.../stat file.
bool ReadStat(const std::string& path, uint64_t* ticks, std::string* comm) {
  std::ifstream f(path);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t open = s.find('('), close = s.rfind(')');
  if (open == std::string::npos || close == std::string::npos) return false;
  if (comm) *comm = s.substr(open + 1, close - open - 1);
  std::istringstream in(s.substr(close + 2));
  std::string field;
  // After "pid (comm) ": state is field 3; utime 14, stime 15.
  uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  *ticks = utime + stime;
  return true;
}

// CPU ticks per thread name (gRPC names its threads, e.g. "grpc_global_tim").
std::map<std::string, uint64_t> TicksByThread(pid_t pid) {
  std::map<std::string, uint64_t> out;
  auto tids = ListDir(fmt::format("/proc/{}/task", pid));
  if (!tids.ok()) return out;
  for (const auto& tid : *tids) {
    uint64_t t = 0;
    std::string comm;
    if (ReadStat(fmt::format("/proc/{}/task/{}/stat", pid, tid), &t, &comm)) out[comm] += t;
  }
  return out;
}

// Resident kB per mapping name from /proc/<pid>/smaps ("[anon]" for
// anonymous memory): which libraries make up RssFile.
std::map<std::string, double> RssByMapping(pid_t pid) {
  std::map<std::string, double> out;
  std::ifstream f(fmt::format("/proc/{}/smaps", pid));
  std::string line, current = "[anon]";
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    if (std::isxdigit(static_cast<unsigned char>(line[0])) && line.find('-') < 17 &&
        line.find(':') > line.find('-')) {
      // "start-end perms offset dev inode [path]"
      std::istringstream in(line);
      std::string range, perms, offset, dev, inode, path;
      in >> range >> perms >> offset >> dev >> inode;
      std::getline(in, path);
      path.erase(0, path.find_first_not_of(' '));
      current = path.empty() ? "[anon]" : path.substr(path.rfind('/') + 1);
      continue;
    }
    if (line.rfind("Rss:", 0) == 0) out[current] += std::stod(line.substr(4)) / 1024;
  }
  return out;
}

pid_t Spawn(const std::vector<std::string>& argv, const std::string& log_file) {
  pid_t pid = fork();
  if (pid == 0) {
    FILE* log = std::fopen(log_file.c_str(), "a");
    if (log) dup2(fileno(log), 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

void Terminate(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  for (int i = 0; i < 50; ++i) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || r < 0) return;  // exited (or already reaped by Sample)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

struct Watch {
  pid_t pid = -1;
  ProcStatus peak;
  ProcStatus last;
  uint64_t ticks0 = 0, ticks1 = 0;
  std::map<std::string, uint64_t> threads0, threads1;
  bool ok = true;
};

void Sample(Watch& w) {
  ProcStatus s;
  if (waitpid(w.pid, nullptr, WNOHANG) != 0 || !ReadStatus(w.pid, &s)) {
    w.ok = false;
    return;
  }
  w.last = s;
  w.peak.rss_mib = std::max(w.peak.rss_mib, s.rss_mib);
  w.peak.rss_anon_mib = std::max(w.peak.rss_anon_mib, s.rss_anon_mib);
  w.peak.rss_file_mib = std::max(w.peak.rss_file_mib, s.rss_file_mib);
  w.peak.threads = std::max(w.peak.threads, s.threads);
}

}  // namespace

int ServeFloor(const std::string& socket_path) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  FloorService service;
  auto server = ServeOnUnixSocket(&service, socket_path);
  if (!server) return 1;
  int sig = 0;
  sigwait(&set, &sig);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  unlink(socket_path.c_str());
  return 0;
}

std::vector<Row> RunFootprintCase(const BenchOptions& o) {
  std::vector<Row> rows;
  auto fail = [&](const std::string& why) {
    rows.push_back({.case_name = "footprint",
                    .metric = "agent VmRSS (peak)",
                    .unit = "MiB",
                    .target = "<= 16 MiB",
                    .note = why});
    rows.push_back({.case_name = "footprint",
                    .metric = "agent CPU",
                    .unit = "% of a core",
                    .target = "<= 0.5 %",
                    .note = why});
    return rows;
  };
  if (access(o.agent_binary.c_str(), X_OK) != 0) {
    return fail("fabric-agent binary not found at " + o.agent_binary);
  }
  TempDir dir("fbfoot");
  sim::KubeletSim kubelet(dir.path());
  if (absl::Status s = kubelet.Start(); !s.ok()) return fail(std::string(s.message()));
  const std::string node = o.testdata + "/nodes/p5.48xlarge";
  // A busy node: a PodResources server with a Pod holding each EFA, so the
  // agent's 2 s PodResources poll does its real work.
  podresources::FakePodResourcesServer pods;
  {
    auto inv = DiscoverNode(SampleNodeOptions(o.testdata, "p5.48xlarge").paths);
    if (!inv.ok()) return fail(std::string(inv.status().message()));
    std::vector<podresources::FakePod> list;
    for (const RdmaDevice& d : inv->devices) {
      list.push_back(
          {"bench", "pod-" + d.name, {{"main", {{std::string(kEfa), d.name, {d.numa_node()}}}}}});
    }
    pods.SetPods(std::move(list));
    mkdir((dir.path() + "/pod-resources").c_str(), 0750);
    if (absl::Status s = pods.Start(dir.path() + "/pod-resources/kubelet.sock"); !s.ok()) {
      return fail(std::string(s.message()));
    }
  }
  Watch agent, floor;
  agent.pid = Spawn({o.agent_binary, "--sysfs-root=" + node + "/sys", "--dev-root=" + node + "/dev",
                     "--kubelet-root=" + dir.path(), "--registration=kubelet",
                     "--state-dir=" + dir.path() + "/state", "--cdi-dir=" + dir.path() + "/cdi"},
                    o.log_file);
  const std::string floor_socket = dir.path() + "/floor.sock";
  floor.pid = Spawn({o.self_binary, "--serve_floor=" + floor_socket}, o.log_file);
  const bool registered = kubelet.WaitFor(
      [&] {
        auto r = kubelet.Resources();
        if (r.size() < static_cast<size_t>(kDefaultPools)) return false;
        for (const auto& x : r) {
          if (kubelet.ListAndWatchMessages(x) == 0) return false;
        }
        return true;
      },
      absl::Seconds(30));
  if (!registered) {
    Terminate(agent.pid);
    Terminate(floor.pid);
    return fail("the agent did not register within 30 s (log: " + o.log_file + ")");
  }
  for (int i = 0; i < 100 && access(floor_socket.c_str(), F_OK) != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (access(floor_socket.c_str(), F_OK) != 0 || waitpid(floor.pid, nullptr, WNOHANG) != 0) {
    Terminate(agent.pid);
    Terminate(floor.pid);
    return fail("the floor server did not start (log: " + o.log_file + ")");
  }
  // Let start-up settle; the window covers steady state only.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const long hz = sysconf(_SC_CLK_TCK);
  for (Watch* w : {&agent, &floor}) {
    ReadStat(fmt::format("/proc/{}/stat", w->pid), &w->ticks0, nullptr);
    w->threads0 = TicksByThread(w->pid);
  }
  const auto t0 = Clock::now();
  const auto end = t0 + std::chrono::seconds(o.footprint_seconds);
  while (Clock::now() < end) {
    Sample(agent);
    Sample(floor);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  Sample(agent);
  Sample(floor);
  for (Watch* w : {&agent, &floor}) {
    ReadStat(fmt::format("/proc/{}/stat", w->pid), &w->ticks1, nullptr);
    w->threads1 = TicksByThread(w->pid);
  }
  const double wall_s = MillisBetween(t0, Clock::now()) / 1000;
  const std::map<std::string, double> mappings = RssByMapping(agent.pid);
  const bool still_registered = kubelet.Resources().size() >= static_cast<size_t>(kDefaultPools);
  Terminate(agent.pid);
  Terminate(floor.pid);
  if (!agent.ok) return fail("the agent exited during the window (log: " + o.log_file + ")");
  if (!floor.ok) return fail("the floor server exited during the window");

  auto cpu = [&](uint64_t ticks) { return 100.0 * static_cast<double>(ticks) / hz / wall_s; };
  const double agent_cpu = cpu(agent.ticks1 - agent.ticks0);
  const double floor_cpu = cpu(floor.ticks1 - floor.ticks0);
  const std::string window = fmt::format(" ({:.0f} s)", wall_s);
  std::string note = still_registered ? "" : "pools lost during the window";
  rows.push_back({.case_name = "footprint",
                  .metric = "agent VmRSS (peak)" + window,
                  .value = agent.peak.rss_mib,
                  .unit = "MiB",
                  .baseline = floor.peak.rss_mib,
                  .baseline_name = "idle gRPC server process",
                  .ratio = agent.peak.rss_mib / floor.peak.rss_mib,
                  .target = "<= 16 MiB",
                  .verdict = Verdict(agent.peak.rss_mib <= kTargetRssMiB),
                  .note = note});
  rows.push_back({.case_name = "footprint",
                  .metric = "agent RssAnon (peak)",
                  .value = agent.peak.rss_anon_mib,
                  .unit = "MiB",
                  .baseline = floor.peak.rss_anon_mib,
                  .baseline_name = "idle gRPC server",
                  .ratio = agent.peak.rss_anon_mib / floor.peak.rss_anon_mib});
  rows.push_back({.case_name = "footprint",
                  .metric = "agent RssFile (peak)",
                  .value = agent.peak.rss_file_mib,
                  .unit = "MiB",
                  .baseline = floor.peak.rss_file_mib,
                  .baseline_name = "idle gRPC server",
                  .ratio = agent.peak.rss_file_mib / floor.peak.rss_file_mib});
  Row c{.case_name = "footprint",
        .metric = "agent CPU (utime+stime)" + window,
        .value = agent_cpu,
        .unit = "% core",
        .baseline = floor_cpu,
        .baseline_name = "idle gRPC server process",
        .target = "<= 0.5 %",
        .verdict = Verdict(agent_cpu <= kTargetCpuPercent)};
  if (floor_cpu > 0) c.ratio = agent_cpu / floor_cpu;
  rows.push_back(c);
  rows.push_back({.case_name = "footprint",
                  .metric = "agent threads (peak)",
                  .value = static_cast<double>(agent.peak.threads),
                  .unit = "count",
                  .baseline = static_cast<double>(floor.peak.threads),
                  .baseline_name = "idle gRPC server",
                  .ratio = static_cast<double>(agent.peak.threads) / floor.peak.threads});
  // What the resident memory is made of.
  std::vector<std::pair<double, std::string>> by_mapping;
  for (const auto& [name, mib] : mappings) by_mapping.push_back({mib, name});
  std::sort(by_mapping.rbegin(), by_mapping.rend());
  for (size_t i = 0; i < by_mapping.size() && i < 6; ++i) {
    rows.push_back({.case_name = "footprint",
                    .metric = fmt::format("  agent RSS in {}", by_mapping[i].second),
                    .value = by_mapping[i].first,
                    .unit = "MiB"});
  }
  // Which threads spent the CPU (a thread that exited during the window is
  // missing here; its ticks are still in the process total).
  std::vector<std::pair<uint64_t, std::string>> by_thread;
  for (const auto& [name, t1] : agent.threads1) {
    auto it = agent.threads0.find(name);
    const uint64_t t0v = it == agent.threads0.end() ? 0 : it->second;
    if (t1 > t0v) by_thread.push_back({t1 - t0v, name});
  }
  std::sort(by_thread.rbegin(), by_thread.rend());
  for (size_t i = 0; i < by_thread.size() && i < 4; ++i) {
    rows.push_back({.case_name = "footprint",
                    .metric = fmt::format("  agent CPU in threads '{}'", by_thread[i].second),
                    .value = cpu(by_thread[i].first),
                    .unit = "% core"});
  }
  return rows;
}

}  // namespace fabric::bench
