// Case 3: re-registration latency, from kubelet.sock re-creation
// (KubeletSim::Restart) to the Register call the simulator receives, for the
// first pool and for the last of the four. The floor is a fresh connection
// plus one empty unary call: what any re-registration must at least pay.
#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tools/bench/agent_harness.h"
#include "tools/bench/cases.h"

namespace fabric::bench {
namespace {

constexpr double kTargetMs = 250;

}  // namespace

std::vector<Row> RunReRegistrationCase(const BenchOptions& o) {
  std::vector<Row> rows;
  auto fail = [&](const std::string& why) {
    rows.push_back({.case_name = "rereg",
                    .metric = "kubelet restart -> Register p99",
                    .unit = "ms",
                    .target = "<= 250 ms",
                    .note = why});
    return rows;
  };
  AgentHarness h;
  if (absl::Status s = h.Start(SampleNodeOptions(o, "p5.48xlarge")); !s.ok()) {
    return fail(std::string(s.message()));
  }
  sim::KubeletSim& k = h.kubelet();
  Samples first, last;
  int timeouts = 0;
  for (int i = 0; i < o.restarts; ++i) {
    std::this_thread::sleep_for(
        std::chrono::microseconds(static_cast<int64_t>(RandomMillis(100) * 1000)));
    if (absl::Status s = k.Restart(); !s.ok()) return fail(std::string(s.message()));
    const absl::Time created = k.KubeletSocketCreatedAt();
    std::vector<absl::Duration> delays;
    const bool ok = k.WaitFor(
        [&] {
          delays.clear();
          for (const auto& e : k.Registrations()) {
            if (e.ok && e.at >= created) delays.push_back(e.at - created);
          }
          return delays.size() >= static_cast<size_t>(kDefaultPools);
        },
        absl::Seconds(10));
    if (!ok) {
      timeouts++;
      continue;
    }
    std::sort(delays.begin(), delays.end());
    first.Add(absl::ToDoubleMilliseconds(delays.front()));
    last.Add(absl::ToDoubleMilliseconds(delays[kDefaultPools - 1]));
    // The next restart only once the device list is back.
    k.WaitFor([&] { return k.Devices(kEfa).size() == 32; }, absl::Seconds(10));
  }
  if (first.empty()) return fail("no re-registration observed");

  // Floor: a fresh channel (connect) and one empty call, per sample.
  FloorService floor_service;
  const std::string floor_socket = h.root() + "/floor.sock";
  auto floor_server = ServeOnUnixSocket(&floor_service, floor_socket);
  if (!floor_server) return fail("cannot serve the floor service");
  Samples floor;
  for (int i = 0; i < std::max(20, o.restarts * 5); ++i) {
    const auto t0 = Clock::now();
    auto stub = v1beta1::DevicePlugin::NewStub(UnixChannel(floor_socket));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1beta1::Empty req;
    v1beta1::DevicePluginOptions resp;
    if (stub->GetDevicePluginOptions(&ctx, req, &resp).ok())
      floor.Add(MillisBetween(t0, Clock::now()));
  }
  floor_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  if (floor.empty()) return fail("floor calls failed");

  const std::string n = absl::StrCat(" (n=", first.size(), ")");
  const std::string note =
      timeouts ? absl::StrCat(timeouts, " restart(s) without 4 registrations in 10 s") : "";
  const double fp50 = floor.Percentile(0.5), fp99 = floor.Percentile(0.99);
  rows.push_back({.case_name = "rereg",
                  .metric = "floor: new connection + empty call p50",
                  .value = fp50,
                  .unit = "ms"});
  rows.push_back({.case_name = "rereg",
                  .metric = "floor: new connection + empty call p99",
                  .value = fp99,
                  .unit = "ms"});
  rows.push_back({.case_name = "rereg",
                  .metric = "kubelet.sock -> first Register p50" + n,
                  .value = first.Percentile(0.5),
                  .unit = "ms",
                  .baseline = fp50,
                  .baseline_name = "floor p50",
                  .ratio = first.Percentile(0.5) / fp50,
                  .note = note});
  rows.push_back({.case_name = "rereg",
                  .metric = "kubelet.sock -> first Register p99" + n,
                  .value = first.Percentile(0.99),
                  .unit = "ms",
                  .baseline = fp99,
                  .baseline_name = "floor p99",
                  .ratio = first.Percentile(0.99) / fp99,
                  .target = "<= 250 ms",
                  .verdict = Verdict(first.Percentile(0.99) <= kTargetMs && timeouts == 0),
                  .note = note});
  rows.push_back({.case_name = "rereg",
                  .metric = "kubelet.sock -> all 4 pools Register p50" + n,
                  .value = last.Percentile(0.5),
                  .unit = "ms",
                  .baseline = fp50,
                  .baseline_name = "floor p50",
                  .ratio = last.Percentile(0.5) / fp50});
  rows.push_back({.case_name = "rereg",
                  .metric = "kubelet.sock -> all 4 pools Register p99" + n,
                  .value = last.Percentile(0.99),
                  .unit = "ms",
                  .baseline = fp99,
                  .baseline_name = "floor p99",
                  .ratio = last.Percentile(0.99) / fp99,
                  .target = "<= 250 ms",
                  .verdict = Verdict(last.Percentile(0.99) <= kTargetMs && timeouts == 0)});
  return rows;
}

}  // namespace fabric::bench
