// Hostile (b): the real fabric-agent binary on a copied sample node whose
// sysfs flaps for a minute: InfiniBand ports going down and up, EFA devices
// vanishing from class/infiniband{,_verbs} and coming back, garbage (binary,
// empty, huge, overflowing numbers) in the files the agent reads, and EFA error
// counters growing.
//
// Proves: the agent keeps serving (ListAndWatch updates keep coming, Allocate
// of a device that never flaps answers every time), its RSS, thread count and
// fd count stay flat, it does not die, and once the tree is restored every
// device is listed Healthy again.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <map>
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
constexpr char kRdma[] = "device.gpustack.ai/rdma";
constexpr char kShared[] = "device.gpustack.ai/rdma.shared";
// Never touched by the flapper: Allocate of it must always answer OK.
constexpr char kSteady[] = "rdmap24s0";

std::string Readlink(const std::string& path) {
  char buf[4096];
  const ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
  return n < 0 ? "" : std::string(buf, n);
}

// Mutates a sysfs tree and can put everything back.
class Flapper {
 public:
  Flapper(std::string sys, const std::map<std::string, std::string>& uverbs)
      : sys_(std::move(sys)), rng_(20261201) {
    for (const auto& [dev, path] : uverbs) {
      const std::string dir = sys_ + "/class/infiniband/" + dev;
      if (dev.rfind("ibp", 0) == 0) {
        Remember(dir + "/ports/1/state");
        Remember(dir + "/ports/1/phys_state");
        ib_.push_back(dev);
      } else if (dev != kSteady) {
        const std::string verbs = path.substr(path.rfind('/') + 1);
        efa_.push_back(
            {dev, verbs, Readlink(dir), Readlink(sys_ + "/class/infiniband_verbs/" + verbs)});
        for (const char* c : {"hw_counters/cmds_err", "ports/1/hw_counters/rdma_read_wr_err"}) {
          Remember(dir + "/" + c);
        }
        Remember(dir + "/device/numa_node");
        Remember(dir + "/ports/1/state");
      }
    }
  }

  // One random change; returns its kind.
  std::string Step() {
    switch (rng_() % 5) {
      case 0: {  // port flap
        const std::string dir = sys_ + "/class/infiniband/" + ib_[rng_() % ib_.size()];
        const bool down = rng_() % 2;
        WriteInPlace(dir + "/ports/1/state", down ? "1: DOWN\n" : "4: ACTIVE\n");
        WriteInPlace(dir + "/ports/1/phys_state", down ? "3: Disabled\n" : "5: LinkUp\n");
        return "port";
      }
      case 1: {  // hot-unplug / hot-plug
        Efa& e = efa_[rng_() % efa_.size()];
        const std::string link = sys_ + "/class/infiniband/" + e.dev;
        const std::string vlink = sys_ + "/class/infiniband_verbs/" + e.verbs;
        if (e.present) {
          ::unlink(vlink.c_str());
          ::unlink(link.c_str());
        } else {
          (void)::symlink(e.target.c_str(), link.c_str());
          (void)::symlink(e.verbs_target.c_str(), vlink.c_str());
        }
        e.present = !e.present;
        return "plug";
      }
      case 2: {  // garbage
        auto it = original_.begin();
        std::advance(it, rng_() % original_.size());
        WriteInPlace(it->first, Garbage());
        return "garbage";
      }
      case 3: {  // counter growth on an EFA device
        const Efa& e = efa_[rng_() % efa_.size()];
        const std::string f = sys_ + "/class/infiniband/" + e.dev + "/hw_counters/cmds_err";
        WriteInPlace(f, std::to_string(++counter_) + "\n");
        return "counter";
      }
      default: {  // restore one file
        auto it = original_.begin();
        std::advance(it, rng_() % original_.size());
        WriteInPlace(it->first, it->second);
        return "restore";
      }
    }
  }

  void RestoreAll() {
    for (Efa& e : efa_) {
      if (!e.present) {
        (void)::symlink(e.target.c_str(), (sys_ + "/class/infiniband/" + e.dev).c_str());
        (void)::symlink(e.verbs_target.c_str(),
                        (sys_ + "/class/infiniband_verbs/" + e.verbs).c_str());
        e.present = true;
      }
    }
    for (const auto& [path, content] : original_) WriteInPlace(path, content);
  }

 private:
  struct Efa {
    std::string dev, verbs, target, verbs_target;
    bool present = true;
  };
  void Remember(const std::string& path) { original_[path] = Slurp(path); }
  std::string Garbage() {
    switch (rng_() % 7) {
      case 0:
        return "";
      case 1: {
        std::string s(64 + rng_() % 512, '\0');
        for (auto& c : s) c = static_cast<char>(rng_());
        return s;
      }
      case 2:
        return std::string(1 << 16, '9');  // huge
      case 3:
        return "18446744073709551616\n";  // > uint64
      case 4:
        return "-1\n";
      case 5:
        return "4: ACTIVE\n\n\n5: LinkUp\x00junk";
      default:
        return "\xff\xfe: \xc3\x28\n";  // not UTF-8
    }
  }

  const std::string sys_;
  std::mt19937 rng_;
  std::map<std::string, std::string> original_;
  std::vector<std::string> ib_;
  std::vector<Efa> efa_;
  long counter_ = 100;
};

TEST(Hostile, FlappingSysfsKeepsServingWithFlatMemoryAndThreads) {
  const int flap_seconds = EnvInt("FABRIC_HOSTILE_FLAP_SECONDS", 60);
  TempDir dir;
  const std::string node = dir.path() + "/node";
  ASSERT_EQ(Sh("cp -a '" + TestDataDir() + "/nodes/p6-b200.48xlarge' '" + node + "'"), 0);
  const auto uverbs = UverbsPaths(node + "/sys");
  ASSERT_EQ(uverbs.size(), 10u);
  // Fast polling so a minute of flapping is many rediscoveries and health
  // decisions (defaults: 200 ms poll, 2 s hold-down, 60 s EFA quiet period).
  const std::string cfg = dir.path() + "/config.yaml";
  ASSERT_TRUE(WriteAtomic(cfg,
                          "health:\n  pollIntervalMs: 20\n  portHoldDownMs: 200\n"
                          "  efa: {checkIntervalMs: 50, quietPeriodMs: 500}\n"));
  sim::KubeletSim kubelet(dir.path(), RealisticKubelet());
  ASSERT_OK(kubelet.Start());
  // The sampler holds every present device's counter descriptors: a short
  // period makes the descriptor count follow the tree quickly.
  std::vector<std::string> args = AgentArgs(node, dir.path(), cfg);
  args.push_back("--sample-period=500ms");
  AgentProcess agent(args, dir.path() + "/agent.log");
  ASSERT_OK(agent.Start());
  auto all_healthy = [&] {
    int healthy = 0;
    for (const auto& r : {kEfa, kRdma}) {
      for (const auto& d : kubelet.Devices(r)) healthy += d.healthy;
    }
    return healthy == 10;
  };
  ASSERT_TRUE(kubelet.WaitFor(all_healthy, absl::Seconds(30))) << agent.Log();
  // Descriptors with every device present, after a few samples.
  absl::SleepFor(absl::Seconds(2));
  const int fds_whole_tree = agent.Sample().fds;

  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<ProcSample> samples;
  std::vector<double> steady_ms;
  std::vector<std::string> steady_errors;
  std::map<std::string, int> outcomes;
  std::vector<int> efa_messages;  // ListAndWatch messages seen, per second

  // The kubelet side: a device that never flaps is allocated over and over
  // (raw Allocate) and pods come and go through kubelet admission.
  std::thread client([&] {
    for (int n = 0; !stop; ++n) {
      const absl::Time t0 = absl::Now();
      auto raw = kubelet.AllocateIds(kEfa, {kSteady});
      const double ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
      auto adm = kubelet.Allocate(n % 2 ? kEfa : kShared, 1, absl::StrCat("p", n));
      kubelet.RemovePod(absl::StrCat("p", n));
      std::lock_guard<std::mutex> l(mu);
      steady_ms.push_back(ms);
      if (!raw.ok()) steady_errors.push_back(raw.status().ToString());
      ++outcomes[adm.ok() ? "admit OK" : absl::StatusCodeToString(adm.status().code())];
      absl::SleepFor(absl::Milliseconds(20));
    }
  });
  std::thread sampler([&] {
    while (!stop) {
      ProcSample s = agent.Sample();
      const int msgs = kubelet.ListAndWatchMessages(kEfa) + kubelet.ListAndWatchMessages(kRdma);
      {
        std::lock_guard<std::mutex> l(mu);
        samples.push_back(s);
        efa_messages.push_back(msgs);
      }
      absl::SleepFor(absl::Seconds(1));
    }
  });

  Flapper flapper(node + "/sys", uverbs);
  std::map<std::string, int> changes;
  const absl::Time start = absl::Now();
  std::mt19937 rng(7);
  while (absl::Now() - start < absl::Seconds(flap_seconds)) {
    ++changes[flapper.Step()];
    absl::SleepFor(absl::Milliseconds(2 + rng() % 15));
    if (!agent.Alive()) break;
  }
  ASSERT_TRUE(agent.Alive()) << "agent died while sysfs flapped; log tail:\n"
                             << agent.Log().substr(std::max<size_t>(agent.Log().size(), 4000) -
                                                   4000);
  stop = true;
  client.join();
  sampler.join();

  // Restored: every device Healthy again.
  flapper.RestoreAll();
  const absl::Time restored = absl::Now();
  const bool recovered = kubelet.WaitFor(all_healthy, absl::Seconds(25));
  const double recovery_ms = absl::ToDoubleMilliseconds(absl::Now() - restored);
  absl::SleepFor(absl::Seconds(2));
  const int fds_restored = agent.Sample().fds;

  // Memory and threads: the first 10 s (warm-up) against the last 10 s.
  ASSERT_GE(samples.size(), 20u);
  std::vector<double> rss_early, rss_late, thr_early, thr_late, fd_early, fd_late;
  for (size_t i = 0; i < samples.size(); ++i) {
    const bool early = i >= 2 && i < 12;
    const bool late = i + 10 >= samples.size();
    if (!early && !late) continue;
    (early ? rss_early : rss_late).push_back(samples[i].rss_kb / 1024.0);
    (early ? thr_early : thr_late).push_back(samples[i].threads);
    (early ? fd_early : fd_late).push_back(samples[i].fds);
  }
  double thr_max = 0;
  for (const auto& s : samples) thr_max = std::max<double>(thr_max, s.threads);
  int total_changes = 0;
  for (const auto& [k, v] : changes) total_changes += v;
  const int msgs_mid = efa_messages[efa_messages.size() / 2];
  const int msgs_last10 = efa_messages.back() - efa_messages[efa_messages.size() - 10];
  std::printf("%d sysfs changes in %d s (", total_changes, flap_seconds);
  for (const auto& [k, v] : changes) std::printf(" %s %d", k.c_str(), v);
  std::printf(" )\n");
  std::printf(
      "RSS: %.1f MiB (s2-12 median) -> %.1f MiB (last 10 s median); threads %.0f -> "
      "%.0f (max %.0f); fds %.0f -> %.0f while flapping, %d -> %d with the whole tree\n",
      Median(rss_early), Median(rss_late), Median(thr_early), Median(thr_late), thr_max,
      Median(fd_early), Median(fd_late), fds_whole_tree, fds_restored);
  std::printf("ListAndWatch messages (efa+rdma): %d total, %d in the last 10 s\n",
              efa_messages.back(), msgs_last10);
  std::printf("Allocate of the steady device: %zu calls, p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
              steady_ms.size(), Median(steady_ms), Percentile(steady_ms, 99),
              Percentile(steady_ms, 100));
  for (const auto& [k, v] : outcomes) std::printf("  admission %-20s %d\n", k.c_str(), v);
  std::printf("healthy again %.0f ms after the tree was restored\n", recovery_ms);

  if (!recovered) {
    // What is still down, and the agent's last words about it.
    const std::string log = agent.Log();
    for (const auto& r : {kEfa, kRdma}) {
      for (const auto& d : kubelet.Devices(r)) {
        if (d.healthy) continue;
        std::string last;
        for (size_t pos = log.find(d.id); pos != std::string::npos; pos = log.find(d.id, pos + 1)) {
          const size_t bol = log.rfind('\n', pos) + 1;
          last = log.substr(bol, std::min<size_t>(log.find('\n', pos) - bol, 300));
        }
        ADD_FAILURE() << r << " " << d.id << " still " << d.health << "; last log line: " << last;
      }
    }
  }
  EXPECT_TRUE(recovered);
  EXPECT_THAT(steady_errors, ::testing::IsEmpty());
  EXPECT_GE(steady_ms.size(), static_cast<size_t>(flap_seconds));
  EXPECT_LT(Percentile(steady_ms, 100), 2000) << "an Allocate took seconds";
  EXPECT_GT(outcomes["admit OK"], flap_seconds);
  EXPECT_GT(msgs_mid, 10) << "device lists did not follow the flapping";
  EXPECT_GT(msgs_last10, 0) << "device lists stopped updating";
  // Flat: no more than +25 % (+4 MiB for allocator noise) RSS, +2 threads.
  EXPECT_LE(Median(rss_late), Median(rss_early) * 1.25 + 4);
  EXPECT_LE(Median(thr_late), Median(thr_early) + 2);
  // Descriptors: while the tree flaps their number follows the devices present
  // (the sampler keeps each present device's counters open), so a leak is
  // judged with the same, whole tree before and after: +4 at most.
  EXPECT_LE(fds_restored, fds_whole_tree + 4);
  EXPECT_EQ(agent.Stop(), 0);
}

}  // namespace
}  // namespace fabric::hostile
