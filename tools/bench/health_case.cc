// Case 2: health-change latency, from a sysfs write to the ListAndWatch
// message that carries it, read by our own ListAndWatch stream on the pool's
// socket (arrival time taken when Read() returns). Changes are spaced by a
// random delay so they do not phase-lock with the monitor's poll loop.
#include <condition_variable>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "fmt/format.h"
#include "test/testing/fake_sysfs.h"
#include "tools/bench/agent_harness.h"
#include "tools/bench/cases.h"

namespace fabric::bench {
namespace {

constexpr double kTargetP99Ms = 1000;
constexpr int kRoceDevices = 8;
constexpr int kEfaDevices = 32;

// Our own ListAndWatch stream: every message with its arrival time.
class StreamRecorder {
 public:
  explicit StreamRecorder(const std::string& socket)
      : stub_(v1beta1::DevicePlugin::NewStub(UnixChannel(socket))), thread_([this] { Run(); }) {}
  ~StreamRecorder() {
    ctx_.TryCancel();
    thread_.join();
  }

  // Arrival time of the first message received at or after `since` in which
  // device `id` reads `health`.
  std::optional<Clock::time_point> WaitFor(const std::string& id, const std::string& health,
                                           Clock::time_point since, std::chrono::seconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    std::optional<Clock::time_point> found;
    size_t scanned = 0;
    cv_.wait_for(lock, timeout, [&] {
      for (; scanned < msgs_.size(); ++scanned) {
        const Msg& m = msgs_[scanned];
        auto it = m.health.find(id);
        if (m.at >= since && it != m.health.end() && it->second == health) {
          found = m.at;
          return true;
        }
      }
      return ended_;
    });
    return found;
  }

  // True once the newest message shows `id` as `health`.
  bool WaitLatest(const std::string& id, const std::string& health, std::chrono::seconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] {
      if (msgs_.empty()) return false;
      auto it = msgs_.back().health.find(id);
      return it != msgs_.back().health.end() && it->second == health;
    });
  }

  size_t messages() {
    std::lock_guard<std::mutex> lock(mu_);
    return msgs_.size();
  }

 private:
  struct Msg {
    Clock::time_point at;
    std::map<std::string, std::string> health;
  };

  void Run() {
    v1beta1::Empty req;
    auto reader = stub_->ListAndWatch(&ctx_, req);
    v1beta1::ListAndWatchResponse resp;
    while (reader->Read(&resp)) {
      Msg m{Clock::now(), {}};
      for (const auto& d : resp.devices()) m.health[d.id()] = d.health();
      std::lock_guard<std::mutex> lock(mu_);
      msgs_.push_back(std::move(m));
      cv_.notify_all();
    }
    (void)reader->Finish();
    std::lock_guard<std::mutex> lock(mu_);
    ended_ = true;
    cv_.notify_all();
  }

  std::unique_ptr<v1beta1::DevicePlugin::Stub> stub_;
  grpc::ClientContext ctx_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Msg> msgs_;
  bool ended_ = false;
  std::thread thread_;
};

void SleepMillis(double ms) {
  std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(ms * 1000)));
}

// A RoCE node (8 mlx5 PFs, port state drives health) plus 32 EFA (error
// counters drive health), like a p5 but with both kinds on one node.
void BuildNode(testing::FakeSysfs& fs, std::vector<std::string>* roce,
               std::vector<std::string>* efa) {
  for (int i = 0; i < kRoceDevices; ++i) {
    const std::string name = fmt::format("mlx5_{}", i);
    fs.AddMlx5(
        name, fmt::format("0000:{:02x}:00.0", 0x1a + i),
        {.numa_node = i / 4, .link_layer = "Ethernet", .netdev = fmt::format("ens{}np0", i)});
    roce->push_back(name);
  }
  for (int i = 0; i < kEfaDevices; ++i) {
    const std::string bdf = fmt::format("0000:{:02x}:00.0", 0x4f + i);
    const std::string name = testing::PciLocationName("rdmap", bdf);
    fs.AddEfa(name, bdf, {.numa_node = i / 16});
    efa->push_back(name);
  }
  fs.AddRdmaCm(254);
}

struct Measured {
  Samples ms;
  int missed = 0;  // changes never seen within the timeout
};

Measured MeasurePorts(testing::FakeSysfs& fs, StreamRecorder& rec,
                      const std::vector<std::string>& devs, int changes, double poll_ms) {
  Measured out;
  for (int i = 0; i < changes; ++i) {
    const std::string& dev = devs[i % devs.size()];
    // Reused devices must have come back (after the port hold-down) first.
    rec.WaitLatest(dev, "Healthy", std::chrono::seconds(10));
    SleepMillis(RandomMillis(poll_ms));
    const auto t0 = Clock::now();
    fs.SetPortState(dev, 1, "1: DOWN", "5: LinkUp");
    auto seen = rec.WaitFor(dev, "Unhealthy", t0, std::chrono::seconds(10));
    if (seen) {
      out.ms.Add(MillisBetween(t0, *seen));
    } else {
      out.missed++;
    }
    fs.SetPortState(dev, 1, "4: ACTIVE", "5: LinkUp");
  }
  return out;
}

Measured MeasureEfa(testing::FakeSysfs& fs, StreamRecorder& rec,
                    const std::vector<std::string>& devs, int changes, double check_ms) {
  Measured out;
  // Each device once: an EFA stays Unhealthy for the quiet period (60 s).
  for (int i = 0; i < changes && i < static_cast<int>(devs.size()); ++i) {
    const std::string& dev = devs[i];
    SleepMillis(RandomMillis(check_ms));
    const auto t0 = Clock::now();
    fs.SetCounter(dev, 0, "cmds_err", 7);
    auto seen = rec.WaitFor(dev, "Unhealthy", t0, std::chrono::seconds(10));
    if (seen) {
      out.ms.Add(MillisBetween(t0, *seen));
    } else {
      out.missed++;
    }
  }
  return out;
}

void AddRows(std::vector<Row>* rows, const std::string& what, const Measured& m, double interval_ms,
             const std::string& interval_name, bool has_target) {
  if (m.ms.empty()) {
    rows->push_back({.case_name = "health",
                     .metric = what + " p99",
                     .unit = "ms",
                     .note = "no change was observed"});
    return;
  }
  const std::string n = absl::StrCat(" (n=", m.ms.size(), ")");
  const std::string note = m.missed ? absl::StrCat(m.missed, " change(s) never seen in 10 s") : "";
  const double p50 = m.ms.Percentile(0.5), p99 = m.ms.Percentile(0.99);
  rows->push_back({.case_name = "health",
                   .metric = what + " p50" + n,
                   .value = p50,
                   .unit = "ms",
                   .baseline = interval_ms,
                   .baseline_name = interval_name,
                   .ratio = p50 / interval_ms,
                   .note = note});
  Row r{.case_name = "health",
        .metric = what + " p99" + n,
        .value = p99,
        .unit = "ms",
        .baseline = interval_ms,
        .baseline_name = interval_name,
        .ratio = p99 / interval_ms,
        .note = note};
  if (has_target) {
    r.target = "<= 1000 ms";
    r.verdict = Verdict(p99 <= kTargetP99Ms && m.missed == 0);
  }
  rows->push_back(r);
}

}  // namespace

std::vector<Row> RunHealthCase(const BenchOptions& o) {
  std::vector<Row> rows;
  const HealthConfig defaults = DefaultConfig().health;
  const double poll_ms = static_cast<double>(defaults.poll_interval_ms);
  const double efa_check_ms = static_cast<double>(defaults.efa.check_interval_ms);
  {
    testing::FakeSysfs fs;
    std::vector<std::string> roce, efa;
    BuildNode(fs, &roce, &efa);
    AgentHarness h;
    AgentOptions opts;
    opts.paths = fs.paths();
    if (absl::Status s = h.Start(opts); !s.ok()) {
      rows.push_back({.case_name = "health",
                      .metric = "port down -> ListAndWatch p99",
                      .unit = "ms",
                      .note = std::string(s.message())});
      return rows;
    }
    StreamRecorder rdma(h.PoolSocket(kRdma));
    StreamRecorder efa_stream(h.PoolSocket(kEfa));
    Measured ports = MeasurePorts(fs, rdma, roce, o.health_changes, poll_ms);
    AddRows(&rows, "port state DOWN -> ListAndWatch", ports, poll_ms, "poll interval", true);
    // EFA error counters come from the sampler's latest sample (issue 17: it
    // is the one reader of counter files), so the bound is the sample period
    // plus a poll, not the check interval.
    const double sample_ms = absl::ToDoubleMilliseconds(opts.sample_period);
    Measured counters = MeasureEfa(fs, efa_stream, efa, o.health_changes, efa_check_ms);
    AddRows(&rows, "EFA cmds_err jump -> ListAndWatch", counters, sample_ms, "sample period",
            false);
  }
  {
    // What it takes to meet the target for EFA: sample every poll
    // (--sample-period 200ms) and check the counters on every poll
    // (health.efa.checkIntervalMs: 200) instead of once a second.
    testing::FakeSysfs fs;
    std::vector<std::string> roce, efa;
    BuildNode(fs, &roce, &efa);
    const std::string config = fs.root() + "/fast-efa.yaml";
    std::ofstream(config) << fmt::format("health:\n  efa:\n    checkIntervalMs: {}\n",
                                         defaults.poll_interval_ms);
    AgentHarness h;
    AgentOptions opts;
    opts.paths = fs.paths();
    opts.config_path = config;
    opts.sample_period = absl::Milliseconds(defaults.poll_interval_ms);
    if (absl::Status s = h.Start(opts); !s.ok()) {
      rows.push_back({.case_name = "health",
                      .metric = "EFA (checkIntervalMs=200) p99",
                      .unit = "ms",
                      .note = std::string(s.message())});
      return rows;
    }
    StreamRecorder efa_stream(h.PoolSocket(kEfa));
    Measured counters = MeasureEfa(fs, efa_stream, efa, o.health_changes, poll_ms);
    AddRows(&rows,
            fmt::format("EFA cmds_err jump, checkIntervalMs={} and --sample-period={}ms",
                        defaults.poll_interval_ms, defaults.poll_interval_ms),
            counters, poll_ms, "poll interval", true);
  }
  return rows;
}

}  // namespace fabric::bench
