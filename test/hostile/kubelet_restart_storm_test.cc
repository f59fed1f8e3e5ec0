// Hostile (a): the real fabric-agent binary against the kubelet simulator,
// while the kubelet restarts 100 times (every socket in device-plugins
// deleted, kubelet.sock re-created) and several clients keep allocating.
//
// Proves: every restart is followed by a re-registration of every pool; no
// Allocate answer is wrong (exactly the uverbs nodes of the chosen devices,
// nothing else but rdma_cm); no exclusive device is held by two live pods;
// the agent answers only with expected errors; after the storm every device
// is back, healthy, and the whole EFA capacity can be granted at once.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "agent/base/mono_clock.h"
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
constexpr char kPartitioned[] = "device.gpustack.ai/rdma.partitioned";
constexpr int kEfaDevices = 8;      // p6-b200.48xlarge
constexpr int kSharedTokens = 128;  // 2 InfiniBand devices x 64

// The device a unit ID stands for ("mlx5_0.t07" -> "mlx5_0").
std::string DeviceOf(const std::string& id) {
  const size_t dot = id.rfind(".t");
  return dot == std::string::npos ? id : id.substr(0, dot);
}

// "" if `resp` grants exactly the uverbs nodes of `ids` (plus rdma_cm at
// most), else what is wrong.
std::string CheckGrant(const v1beta1::ContainerAllocateResponse& resp,
                       const std::vector<std::string>& ids,
                       const std::map<std::string, std::string>& uverbs) {
  std::set<std::string> want;
  for (const auto& id : ids) {
    auto it = uverbs.find(DeviceOf(id));
    if (it == uverbs.end()) return "unknown device " + id;
    want.insert(it->second);
  }
  std::set<std::string> got;
  for (const auto& spec : resp.devices()) {
    if (spec.host_path() == "/dev/infiniband/rdma_cm") continue;
    if (!got.insert(spec.host_path()).second) return "duplicate spec " + spec.host_path();
  }
  if (got != want) {
    return absl::StrCat("ids [", absl::StrJoin(ids, ","), "] granted [", absl::StrJoin(got, ","),
                        "], expected [", absl::StrJoin(want, ","), "]");
  }
  return "";
}

// Errors a client may see while the kubelet restarts: the kubelet's own
// admission refusals (resource stopped / not yet re-listed / all in use), and
// transport errors to an endpoint that is going away. Anything else (an
// agent-side InvalidArgument, Internal, Unknown...) is a wrong answer.
bool ExpectedDuringRestart(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kFailedPrecondition:  // kubelet admission
    case absl::StatusCode::kNotFound:            // endpoint not in cache
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kDeadlineExceeded:
      return true;
    default:
      return false;
  }
}

struct Live {
  std::string resource;
  std::vector<std::string> ids;
  std::set<std::string> paths;
};

TEST(Hostile, KubeletRestartStormWithConcurrentAllocates) {
  const int restarts = EnvInt("FABRIC_HOSTILE_RESTARTS", 100);
  TempDir dir;
  const std::string node = TestDataDir() + "/nodes/p6-b200.48xlarge";
  const auto uverbs = UverbsPaths(node + "/sys");
  ASSERT_EQ(uverbs.size(), 10u);
  sim::KubeletSim kubelet(dir.path(), RealisticKubelet());
  ASSERT_OK(kubelet.Start());
  AgentProcess agent(AgentArgs(node, dir.path()), dir.path() + "/agent.log");
  ASSERT_OK(agent.Start());
  const std::vector<std::string> pools = {kEfa, kRdma, kShared, kPartitioned};
  auto all_listed = [&] {
    if (kubelet.Devices(kEfa).size() != kEfaDevices) return false;
    if (kubelet.Devices(kShared).size() != kSharedTokens) return false;
    for (const auto& p : pools) {
      if (kubelet.EndpointStopped(p)) return false;
    }
    return true;
  };
  ASSERT_TRUE(kubelet.WaitFor(all_listed, absl::Seconds(30))) << agent.Log();

  std::atomic<bool> stop{false};
  std::mutex mu;                     // guards everything below
  std::map<std::string, Live> live;  // pod -> what it holds
  std::vector<std::string> wrong;    // wrong answers / duplicate holds
  std::map<std::string, int> outcomes;
  std::map<std::string, std::string> first_message;  // per outcome
  std::vector<double> allocate_ms;
  // The kubelet admits pods one at a time (per resource here): the simulator
  // reserves devices only after the plugin answered.
  std::map<std::string, std::mutex> admission;
  admission[kEfa];
  admission[kShared];

  auto admit_loop = [&](int client, const std::string& resource, int max_count) {
    std::mt19937 rng(client * 7919);
    std::vector<std::string> mine;
    for (int n = 0; !stop; ++n) {
      const std::string pod = absl::StrCat("c", client, "-p", n);
      const int count = 1 + static_cast<int>(rng() % max_count);
      std::vector<std::string> chosen;
      const absl::Time t0 = absl::Now();
      absl::StatusOr<v1beta1::ContainerAllocateResponse> resp;
      {
        std::lock_guard<std::mutex> a(admission[resource]);
        resp = kubelet.Allocate(resource, count, pod, "c", &chosen);
        std::lock_guard<std::mutex> l(mu);
        allocate_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
        if (!resp.ok()) {
          ++outcomes[absl::StatusCodeToString(resp.status().code())];
          first_message.emplace(absl::StatusCodeToString(resp.status().code()),
                                resp.status().ToString());
          if (!ExpectedDuringRestart(resp.status())) {
            wrong.push_back(absl::StrCat(pod, ": unexpected error ", resp.status().ToString()));
          }
        } else {
          ++outcomes["OK"];
          Live hold{resource, chosen, {}};
          if (static_cast<int>(chosen.size()) != count) {
            wrong.push_back(absl::StrCat(pod, ": asked ", count, " got ", chosen.size()));
          }
          if (std::string why = CheckGrant(*resp, chosen, uverbs); !why.empty()) {
            wrong.push_back(pod + ": " + why);
          }
          for (const auto& s : resp->devices()) hold.paths.insert(s.host_path());
          for (const auto& [other, h] : live) {
            if (h.resource != resource) continue;
            for (const auto& id : chosen) {
              if (std::count(h.ids.begin(), h.ids.end(), id)) {
                wrong.push_back(absl::StrCat(id, " held by ", pod, " and ", other));
              }
            }
            if (resource == kEfa) {
              for (const auto& p : hold.paths) {
                if (p != "/dev/infiniband/rdma_cm" && h.paths.count(p)) {
                  wrong.push_back(absl::StrCat(p, " granted to ", pod, " and ", other));
                }
              }
            }
          }
          live[pod] = hold;
          mine.push_back(pod);
        }
      }
      // Keep at most two pods per client; delete the oldest.
      while (mine.size() > 2 || (!mine.empty() && rng() % 3 == 0)) {
        {
          std::lock_guard<std::mutex> l(mu);
          live.erase(mine.front());
        }
        kubelet.RemovePod(mine.front());
        mine.erase(mine.begin());
      }
      absl::SleepFor(absl::Milliseconds(rng() % 10));
    }
  };
  // Raw Allocate RPCs straight at the current endpoint, many at once: the
  // answer must name exactly the asked device or be a transport error.
  auto raw_loop = [&](int client, const std::string& resource) {
    std::mt19937 rng(client * 104729);
    std::vector<std::string> ids;
    for (const auto& [dev, path] : uverbs) {
      if (resource == kEfa && dev.rfind("rdmap", 0) == 0) ids.push_back(dev);
      if (resource == kShared && dev.rfind("ibp", 0) == 0) ids.push_back(dev + ".t42");
    }
    while (!stop) {
      const std::string id = ids[rng() % ids.size()];
      auto resp = kubelet.AllocateIds(resource, {id});
      // No endpoint yet: do not spin (the kubelet's own retries are paced too).
      if (!resp.ok()) absl::SleepFor(absl::Milliseconds(2));
      std::lock_guard<std::mutex> l(mu);
      if (!resp.ok()) {
        ++outcomes["raw " + absl::StatusCodeToString(resp.status().code())];
        first_message.emplace("raw " + absl::StatusCodeToString(resp.status().code()),
                              resp.status().ToString());
        if (!ExpectedDuringRestart(resp.status())) {
          wrong.push_back(absl::StrCat("raw ", id, ": ", resp.status().ToString()));
        }
      } else {
        ++outcomes["raw OK"];
        if (resp->container_responses_size() != 1) {
          wrong.push_back(absl::StrCat("raw ", id, ": ", resp->container_responses_size(),
                                       " container responses"));
        } else if (std::string why = CheckGrant(resp->container_responses(0), {id}, uverbs);
                   !why.empty()) {
          wrong.push_back("raw " + why);
        }
      }
    }
  };
  std::vector<std::thread> clients;
  clients.emplace_back(admit_loop, 1, kEfa, 2);
  clients.emplace_back(admit_loop, 2, kEfa, 3);
  clients.emplace_back(admit_loop, 3, kShared, 3);
  clients.emplace_back(admit_loop, 4, kShared, 2);
  clients.emplace_back(raw_loop, 5, kEfa);
  clients.emplace_back(raw_loop, 6, kShared);

  std::vector<double> reregister_ms;  // kubelet.sock created -> last pool accepted
  std::vector<double> relisted_ms;    // kubelet.sock created -> every pool listed again
  int missed = 0;
  const absl::Time storm_start = absl::Now();
  std::mt19937 rng(42);
  for (int i = 0; i < restarts; ++i) {
    absl::SleepFor(absl::Milliseconds(30 + rng() % 120));  // allocations in between
    ASSERT_OK(kubelet.Restart());
    const absl::Time created = kubelet.KubeletSocketCreatedAt();
    std::map<std::string, absl::Time> done;
    auto registered = [&] {
      done.clear();
      for (const auto& e : kubelet.Registrations()) {
        if (e.ok && e.at >= created && !done.count(e.resource)) done[e.resource] = e.done;
      }
      return done.size() == pools.size();
    };
    if (!kubelet.WaitFor(registered, absl::Seconds(10))) {
      ++missed;
      ADD_FAILURE() << "restart " << i << ": only " << done.size() << " pools re-registered";
      break;
    }
    absl::Time last = created;
    for (const auto& [r, t] : done) last = std::max(last, t);
    reregister_ms.push_back(absl::ToDoubleMilliseconds(last - created));
    if (!kubelet.WaitFor(all_listed, absl::Seconds(10))) {
      ADD_FAILURE() << "restart " << i << ": devices not listed again";
      break;
    }
    relisted_ms.push_back(absl::ToDoubleMilliseconds(MonotonicNow() - created));  // sim clock
    ASSERT_TRUE(agent.Alive()) << "agent died at restart " << i << "\n" << agent.Log();
  }
  const absl::Duration storm = absl::Now() - storm_start;
  stop = true;
  for (auto& t : clients) t.join();

  std::printf("%zu kubelet restarts in %.1f s, 6 concurrent clients\n", reregister_ms.size(),
              absl::ToDoubleSeconds(storm));
  std::printf(
      "re-registration (kubelet.sock re-created -> all 4 pools accepted): p50 %.1f ms, "
      "p90 %.1f ms, p99 %.1f ms, max %.1f ms\n",
      Median(reregister_ms), Percentile(reregister_ms, 90), Percentile(reregister_ms, 99),
      Percentile(reregister_ms, 100));
  std::printf("devices listed again: p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", Median(relisted_ms),
              Percentile(relisted_ms, 99), Percentile(relisted_ms, 100));
  std::printf("kubelet Allocate (admission) latency: p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
              Median(allocate_ms), Percentile(allocate_ms, 99), Percentile(allocate_ms, 100));
  for (const auto& [k, v] : outcomes) {
    std::printf("  outcome %-24s %6d  %s\n", k.c_str(), v, first_message[k].substr(0, 110).c_str());
  }

  EXPECT_EQ(missed, 0);
  EXPECT_EQ(static_cast<int>(reregister_ms.size()), restarts);
  EXPECT_THAT(wrong, ::testing::IsEmpty());
  EXPECT_GE(outcomes["OK"], restarts) << "too few allocations to prove anything";
  EXPECT_GE(outcomes["raw OK"], restarts);

  // Nothing lost: the kubelet's checkpoint holds exactly the live pods.
  std::map<std::string, std::vector<std::string>> recorded;
  for (const auto& a : kubelet.Allocations()) recorded[a.pod] = a.device_ids;
  std::map<std::string, std::vector<std::string>> expected;
  for (const auto& [pod, h] : live) expected[pod] = h.ids;
  EXPECT_EQ(recorded, expected);

  // Everything back: free all pods; every device healthy; the whole EFA
  // capacity in one grant, exactly the 8 EFA verbs nodes.
  for (const auto& [pod, h] : live) kubelet.RemovePod(pod);
  ASSERT_TRUE(kubelet.WaitFor(
      [&] {
        int healthy = 0;
        for (const auto& d : kubelet.Devices(kEfa)) healthy += d.healthy;
        for (const auto& d : kubelet.Devices(kShared)) healthy += d.healthy;
        return healthy == kEfaDevices + kSharedTokens;
      },
      absl::Seconds(10)));
  std::vector<std::string> chosen;
  auto all = kubelet.Allocate(kEfa, kEfaDevices, "final", "c", &chosen);
  ASSERT_OK(all);
  EXPECT_EQ(CheckGrant(*all, chosen, uverbs), "");
  EXPECT_EQ(all->devices_size() - (all->devices_size() > kEfaDevices ? 1 : 0), kEfaDevices);

  EXPECT_EQ(agent.Stop(), 0) << agent.Log();
}

}  // namespace
}  // namespace fabric::hostile
