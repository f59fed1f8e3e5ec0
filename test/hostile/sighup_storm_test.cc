// Hostile (c): a storm of SIGHUP reloads of the real fabric-agent binary, with
// the config file switching between two good configs and many bad ones
// (invalid values, unknown keys, broken YAML, binary garbage, a half-written
// file, a 2 MiB unterminated list, a deleted file), written atomically or in
// place, while a client keeps allocating from the pool both good configs share.
//
// Proves: a bad config never replaces a good one (after every bad reload the
// pools of the last good config are still served, unchanged), the unchanged
// pool answers every Allocate during the storm, the agent does not crash, and
// after returning to the first config its thread and fd counts are where they
// started.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/hostile/hostile_util.h"
#include "test/testing/status_matchers.h"
#include "tools/kubelet-sim/kubelet_sim.h"

namespace fabric::hostile {
namespace {

constexpr char kEfa[] = "vpc.amazonaws.com/efa";
constexpr char kIb[] = "example.com/ib";
constexpr char kIbx[] = "example.com/ibx";

constexpr char kEfaPool[] =
    "pools:\n"
    "  - name: vpc.amazonaws.com/efa\n"
    "    mode: exclusive\n"
    "    selector: {kinds: [efa]}\n";
// A: the two InfiniBand devices as 4 shared tokens each.
const std::string kConfigA = std::string(kEfaPool) +
                             "  - name: example.com/ib\n    mode: shared\n"
                             "    tokensPerDevice: 4\n"
                             "    selector: {kinds: [rdma], linkTypes: [InfiniBand]}\n";
// B: 2 tokens each (the pool is re-created) and an exclusive pool besides.
const std::string kConfigB = std::string(kEfaPool) +
                             "  - name: example.com/ib\n    mode: shared\n"
                             "    tokensPerDevice: 2\n"
                             "    selector: {kinds: [rdma], linkTypes: [InfiniBand]}\n"
                             "  - name: example.com/ibx\n    mode: exclusive\n"
                             "    selector: {kinds: [rdma], linkTypes: [InfiniBand]}\n";

std::vector<std::string> BadConfigs() {
  std::vector<std::string> bad = {
      std::string(kEfaPool) +
          "  - name: example.com/ib\n    mode: shared\n"
          "    tokensPerDevice: -3\n    selector: {}\n",
      "pools:\n  - name: kubernetes.io/rdma\n",
      "pools:\n  - name: vpc.amazonaws.com/efa\n    selector: {kind: [efa]}\n",
      "pools: [ {name: vpc.amazonaws.com/efa, mode: exclusive\n  selector: {{{{\n",
      std::string(kEfaPool) + std::string(kEfaPool).substr(7),  // duplicate pool name
      std::string("\x00\x01\x02\xff\xfe garbage \x00", 17),
      kConfigB.substr(0, kConfigB.size() / 2 + 3),   // half-written
      "health:\n  pollIntervalMs: 5\n",              // out of range
      "pools: [" + std::string(2 << 20, 'a') + ",",  // 2 MiB, unterminated
  };
  return bad;
}

TEST(Hostile, SighupStormNeverReplacesAGoodConfigWithABadOne) {
  const int rounds = EnvInt("FABRIC_HOSTILE_SIGHUP_ROUNDS", 20);
  TempDir dir;
  const std::string node = TestDataDir() + "/nodes/p6-b200.48xlarge";
  const std::string cfg = dir.path() + "/config.yaml";
  ASSERT_TRUE(WriteAtomic(cfg, kConfigA));
  sim::KubeletSim kubelet(dir.path(), RealisticKubelet());
  ASSERT_OK(kubelet.Start());
  AgentProcess agent(AgentArgs(node, dir.path(), cfg), dir.path() + "/agent.log");
  ASSERT_OK(agent.Start());
  auto serving = [&](const std::string& resource, size_t n) {
    return !kubelet.EndpointStopped(resource) && kubelet.Devices(resource).size() == n;
  };
  auto state_a = [&] {
    return serving(kEfa, 8) && serving(kIb, 8) &&
           (kubelet.EndpointPath(kIbx).empty() || kubelet.EndpointStopped(kIbx));
  };
  auto state_b = [&] { return serving(kEfa, 8) && serving(kIb, 4) && serving(kIbx, 2); };
  ASSERT_TRUE(kubelet.WaitFor(state_a, absl::Seconds(30))) << agent.Log();
  absl::SleepFor(absl::Seconds(1));
  const ProcSample first = agent.Sample();
  const int efa_registrations = [&] {
    int n = 0;
    for (const auto& e : kubelet.Registrations()) n += e.resource == kEfa;
    return n;
  }();

  // The pool both good configs share must answer throughout.
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<double> efa_ms;
  std::vector<std::string> efa_errors;
  std::thread client([&] {
    for (int n = 0; !stop; ++n) {
      const std::string pod = absl::StrCat("p", n);
      const absl::Time t0 = absl::Now();
      auto r = kubelet.Allocate(kEfa, 1 + n % 2, pod);
      const double ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
      kubelet.RemovePod(pod);
      std::lock_guard<std::mutex> l(mu);
      efa_ms.push_back(ms);
      if (!r.ok()) efa_errors.push_back(r.status().ToString());
      absl::SleepFor(absl::Milliseconds(5));
    }
  });

  const std::vector<std::string> bad = BadConfigs();
  std::mt19937 rng(1234);
  int sighups = 0, max_threads = first.threads, max_fds = first.fds;
  long max_rss_kb = first.rss_kb;
  std::vector<double> good_apply_ms;
  int held = 0;
  const absl::Time start = absl::Now();
  for (int round = 0; round < rounds && agent.Alive(); ++round) {
    // Storm: random good/bad contents, atomic or in place, SIGHUP after each.
    for (int i = 0; i < 15; ++i) {
      const int pick = rng() % (bad.size() + 3);
      const std::string& content = pick == 0   ? kConfigA
                                   : pick == 1 ? kConfigB
                                   : pick == 2 ? std::string()
                                               : bad[pick - 3];
      if (pick == 2) {
        ::unlink(cfg.c_str());  // deleted (a ConfigMap mid-swap)
      } else if (rng() % 2) {
        WriteAtomic(cfg, content);
      } else {
        WriteInPlace(cfg, content);
      }
      agent.Signal(SIGHUP);
      ++sighups;
      absl::SleepFor(absl::Milliseconds(rng() % 12));
    }
    // Checkpoint: a good config is taken...
    const bool to_b = round % 2 == 0;
    ASSERT_TRUE(WriteAtomic(cfg, to_b ? kConfigB : kConfigA));
    agent.Signal(SIGHUP);
    ++sighups;
    const absl::Time t0 = absl::Now();
    ASSERT_TRUE(kubelet.WaitFor(to_b ? std::function<bool()>(state_b) : state_a, absl::Seconds(15)))
        << "round " << round << ": good config " << (to_b ? "B" : "A") << " not applied\n"
        << agent.Log().substr(0, 20000);
    good_apply_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
    // ...and a bad one, seen and rejected, leaves it serving.
    const int rejected = agent.CountInLog("config reload rejected");
    const std::string& b = bad[round % bad.size()];
    if (round % 5 == 4) {
      ::unlink(cfg.c_str());
    } else if (round % 2) {
      WriteInPlace(cfg, b);
    } else {
      WriteAtomic(cfg, b);
    }
    for (int i = 0; i < 3; ++i, ++sighups) {
      agent.Signal(SIGHUP);
      absl::SleepFor(absl::Milliseconds(5));
    }
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (agent.CountInLog("config reload rejected") == rejected && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_GT(agent.CountInLog("config reload rejected"), rejected)
        << "round " << round << ": bad config #" << round % bad.size() << " not rejected";
    absl::SleepFor(absl::Milliseconds(300));
    const bool still = to_b ? state_b() : state_a();
    EXPECT_TRUE(still) << "round " << round << ": bad config #" << round % bad.size()
                       << " replaced good config " << (to_b ? "B" : "A");
    held += still;
    const ProcSample s = agent.Sample();
    max_threads = std::max(max_threads, s.threads);
    max_fds = std::max(max_fds, s.fds);
    max_rss_kb = std::max(max_rss_kb, s.rss_kb);
  }
  ASSERT_TRUE(agent.Alive()) << "agent died in the SIGHUP storm\n" << agent.Log();
  // Back to A, settle, and compare with the start.
  ASSERT_TRUE(WriteAtomic(cfg, kConfigA));
  agent.Signal(SIGHUP);
  ASSERT_TRUE(kubelet.WaitFor(state_a, absl::Seconds(15)));
  absl::SleepFor(absl::Seconds(2));
  const ProcSample last = agent.Sample();
  const double storm_s = absl::ToDoubleSeconds(absl::Now() - start);
  stop = true;
  client.join();

  int efa_regs = 0;
  for (const auto& e : kubelet.Registrations()) efa_regs += e.resource == kEfa;
  std::printf("%d SIGHUPs in %.1f s (%d rounds; %d reloads accepted, %d rejected)\n", sighups,
              storm_s, rounds, agent.CountInLog("config reloaded from"),
              agent.CountInLog("config reload rejected"));
  std::printf(
      "good config applied (SIGHUP -> kubelet sees the new pools): p50 %.0f ms, max %.0f "
      "ms\n",
      Median(good_apply_ms), Percentile(good_apply_ms, 100));
  std::printf(
      "efa Allocate during the storm: %zu calls, %zu failed, p50 %.2f ms, p99 %.2f ms, "
      "max %.2f ms\n",
      efa_ms.size(), efa_errors.size(), Median(efa_ms), Percentile(efa_ms, 99),
      Percentile(efa_ms, 100));
  std::printf("threads %d -> %d (max %d), fds %d -> %d (max %d), RSS %.1f -> %.1f MiB (max %.1f)\n",
              first.threads, last.threads, max_threads, first.fds, last.fds, max_fds,
              first.rss_kb / 1024.0, last.rss_kb / 1024.0, max_rss_kb / 1024.0);

  EXPECT_EQ(held, rounds);
  EXPECT_THAT(efa_errors, ::testing::IsEmpty());
  EXPECT_GT(efa_ms.size(), static_cast<size_t>(rounds));
  EXPECT_EQ(efa_regs, efa_registrations) << "the unchanged efa pool was re-registered";
  EXPECT_LE(last.threads, first.threads + 2) << "thread leak";
  EXPECT_LE(last.fds, first.fds + 2) << "fd leak";
  EXPECT_EQ(agent.Stop(), 0) << agent.Log().substr(0, 20000);
}

}  // namespace
}  // namespace fabric::hostile
