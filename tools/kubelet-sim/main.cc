// kubelet-sim: stands in for the kubelet's device manager so a device plugin
// can be exercised without a cluster (README demo, manual testing).
//
//   kubelet-sim --root /tmp/k --expect-resources 1 --allocate example.com/rdma=2 --restart
//
// Exit status: 0 success, 1 usage or start-up error, 2 timeout, 3 allocation failed.
#include <fmt/format.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "agent/base/mono_clock.h"
#include "tools/kubelet-sim/dra_sim.h"
#include "tools/kubelet-sim/kubelet_sim.h"

namespace fabric::sim {
namespace {

constexpr char kUsage[] = R"(usage: kubelet-sim --root DIR [options]

Simulates the kubelet device manager under DIR (DIR/device-plugins/kubelet.sock,
DIR/plugins_registry), waits for device plugins to register, prints what they
advertise and what Allocate returns.

  --root DIR               kubelet root directory (required)
  --mode kubelet|watcher|both|dra
                           registration path(s) to serve (default kubelet); dra: the
                           kubelet's DRA side instead (plugin watcher DRA handler)
  --expect-resources N     wait for N resources with a first ListAndWatch (default 1)
  --allocate RES=COUNT     admit a pod asking COUNT of RES (repeatable; comma lists ok)
  --timeout DURATION       how long to wait for each phase (default 30s)
  --restart                then simulate a kubelet restart and time re-registration
  --serve                  keep running (printing events) until SIGTERM/SIGINT
  --reconcile-period D     plugin-watcher reconcile period (default 1s, as the kubelet)
  --dial-timeout D         kubelet dial timeout for plugin endpoints (default 10s)
  --driver NAME            (dra) the DRA driver to call (default: the first registered)
  --prepare NS/NAME/UID    (dra) claims to prepare in one NodePrepareResources call
                           (repeatable; comma lists ok); prints each claim's CDI ids
  --unprepare NS/NAME/UID  (dra) claims to unprepare in one call (after --prepare)
  --watch-health D         (dra) print the driver's device health for D
  --kubelet-version current|1.20
                           behave like the current kubelet (default) or like v1.20
                           (asynchronous Register, options from the request, ...)
)";

struct Flags {
  std::string root;
  std::string mode = "kubelet";
  int expect_resources = 1;
  std::vector<std::pair<std::string, int>> allocations;
  absl::Duration timeout = absl::Seconds(30);
  bool restart = false;
  bool serve = false;
  absl::Duration reconcile_period = absl::Seconds(1);
  absl::Duration dial_timeout = absl::Seconds(10);
  fabric::sim::KubeletVersion version = fabric::sim::KubeletVersion::kCurrent;
  std::string driver;
  std::vector<DraSimClaim> prepare;
  std::vector<DraSimClaim> unprepare;
  absl::Duration watch_health = absl::ZeroDuration();
};

[[noreturn]] void UsageError(const std::string& message) {
  std::cerr << "kubelet-sim: " << message << "\n\n" << kUsage;
  std::exit(1);
}

absl::Duration ParseDurationFlag(const std::string& name, const std::string& value) {
  absl::Duration d;
  if (!absl::ParseDuration(value, &d) || d < absl::ZeroDuration()) {
    UsageError(fmt::format("{}: invalid duration {:?} (examples: 30s, 500ms, 2m)", name, value));
  }
  return d;
}

Flags ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      std::exit(0);
    }
    std::string name = arg;
    std::string value;
    bool has_value = false;
    if (auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    auto take_value = [&]() -> std::string {
      if (has_value) return value;
      if (i + 1 >= argc) UsageError(name + " needs a value");
      return argv[++i];
    };
    if (name == "--restart") {
      flags.restart = true;
    } else if (name == "--serve") {
      flags.serve = true;
    } else if (name == "--root") {
      flags.root = take_value();
    } else if (name == "--mode") {
      flags.mode = take_value();
      if (flags.mode != "kubelet" && flags.mode != "watcher" && flags.mode != "both" &&
          flags.mode != "dra") {
        UsageError("--mode must be kubelet, watcher, both or dra");
      }
    } else if (name == "--expect-resources") {
      if (!absl::SimpleAtoi(take_value(), &flags.expect_resources) || flags.expect_resources < 0) {
        UsageError("--expect-resources needs a non-negative integer");
      }
    } else if (name == "--allocate") {
      for (absl::string_view item : absl::StrSplit(take_value(), ',', absl::SkipEmpty())) {
        std::pair<std::string, std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
        int count = 0;
        if (kv.first.empty() || !absl::SimpleAtoi(kv.second, &count) || count <= 0) {
          UsageError(fmt::format("--allocate expects RES=COUNT, got {:?}", std::string(item)));
        }
        flags.allocations.emplace_back(kv.first, count);
      }
    } else if (name == "--driver") {
      flags.driver = take_value();
    } else if (name == "--prepare" || name == "--unprepare") {
      for (absl::string_view item : absl::StrSplit(take_value(), ',', absl::SkipEmpty())) {
        std::vector<std::string> parts = absl::StrSplit(item, '/');
        if (parts.size() != 3 || parts[0].empty() || parts[1].empty() || parts[2].empty()) {
          UsageError(
              fmt::format("{} expects NAMESPACE/NAME/UID, got {:?}", name, std::string(item)));
        }
        (name == "--prepare" ? flags.prepare : flags.unprepare)
            .push_back(DraSimClaim{parts[0], parts[1], parts[2]});
      }
    } else if (name == "--watch-health") {
      flags.watch_health = ParseDurationFlag(name, take_value());
    } else if (name == "--timeout") {
      flags.timeout = ParseDurationFlag(name, take_value());
    } else if (name == "--reconcile-period") {
      flags.reconcile_period = ParseDurationFlag(name, take_value());
    } else if (name == "--dial-timeout") {
      flags.dial_timeout = ParseDurationFlag(name, take_value());
    } else if (name == "--kubelet-version") {
      std::string v = take_value();
      if (v == "current") {
        flags.version = fabric::sim::KubeletVersion::kCurrent;
      } else if (v == "1.20") {
        flags.version = fabric::sim::KubeletVersion::kV1_20;
      } else {
        UsageError("--kubelet-version must be current or 1.20");
      }
    } else {
      UsageError("unknown argument " + arg);
    }
  }
  if (flags.root.empty()) UsageError("--root is required");
  return flags;
}

std::string Ms(absl::Duration d) { return fmt::format("{:.1f} ms", absl::ToDoubleMilliseconds(d)); }

std::string PathName(RegistrationPath p) {
  return p == RegistrationPath::kKubeletSocket ? "kubelet.sock" : "plugin-watcher";
}

void PrintEvent(const RegistrationEvent& e, absl::Time origin) {
  std::cout << fmt::format(
      "  [{}] t+{}  resource={} endpoint={} dialed={} version={}  {}\n", PathName(e.path),
      Ms(e.at - origin), e.resource.empty() ? "?" : e.resource,
      e.endpoint.empty() ? "\"\"" : e.endpoint, e.socket_path.empty() ? "-" : e.socket_path,
      e.version, e.ok ? "OK" : "REJECTED: " + e.error);
}

void PrintDevices(const KubeletSim& sim, const std::string& resource) {
  auto options = sim.PluginOptions(resource);
  std::cout << fmt::format(
      "  {}: capacity {}, allocatable {}, ListAndWatch messages {}{}\n", resource,
      sim.Capacity(resource), sim.Allocatable(resource), sim.ListAndWatchMessages(resource),
      options ? fmt::format(", pre_start_required={}, get_preferred_allocation_available={}",
                            options->pre_start_required(),
                            options->get_preferred_allocation_available())
              : "");
  for (const auto& d : sim.Devices(resource)) {
    std::vector<std::string> numa;
    for (int64_t n : d.numa_nodes) numa.push_back(std::to_string(n));
    std::cout << fmt::format("    {:<24} {:<10} numa [{}]\n", d.id,
                             d.health.empty() ? "\"\"" : d.health, absl::StrJoin(numa, ","));
  }
}

void PrintResponse(const v1beta1::ContainerAllocateResponse& r) {
  std::cout << "    devices:" << (r.devices().empty() ? " (none)" : "") << "\n";
  for (const auto& d : r.devices()) {
    std::cout << fmt::format("      {} -> {} ({})\n", d.host_path(), d.container_path(),
                             d.permissions());
  }
  std::cout << "    mounts:" << (r.mounts().empty() ? " (none)" : "") << "\n";
  for (const auto& m : r.mounts()) {
    std::cout << fmt::format("      {} -> {}{}\n", m.host_path(), m.container_path(),
                             m.read_only() ? " (ro)" : "");
  }
  std::cout << "    envs:" << (r.envs().empty() ? " (none)" : "") << "\n";
  std::map<std::string, std::string> envs(r.envs().begin(), r.envs().end());
  for (const auto& [k, v] : envs) std::cout << fmt::format("      {}={}\n", k, v);
  std::cout << "    annotations:" << (r.annotations().empty() ? " (none)" : "") << "\n";
  std::map<std::string, std::string> annotations(r.annotations().begin(), r.annotations().end());
  for (const auto& [k, v] : annotations) std::cout << fmt::format("      {}={}\n", k, v);
  std::cout << "    cdi_devices:" << (r.cdi_devices().empty() ? " (none)" : "") << "\n";
  for (const auto& c : r.cdi_devices()) std::cout << fmt::format("      {}\n", c.name());
}

// Resources with a live endpoint that has sent at least one ListAndWatch message.
std::vector<std::string> ReadyResources(const KubeletSim& sim) {
  std::vector<std::string> out;
  for (const auto& r : sim.Resources()) {
    if (!sim.EndpointStopped(r) && sim.ListAndWatchMessages(r) > 0) out.push_back(r);
  }
  return out;
}

void PrintTimeout(const KubeletSim& sim, const std::string& what, absl::Time origin) {
  std::cerr << "kubelet-sim: timeout: " << what << "\n";
  auto events = sim.Registrations();
  if (events.empty()) {
    std::cerr << "  no registration attempt seen (is the plugin using the device-plugins dir "
              << sim.DevicePluginDir() << "?)\n";
  }
  for (const auto& e : events) {
    std::cerr << fmt::format("  [{}] t+{} {} {}\n", PathName(e.path), Ms(e.at - origin), e.resource,
                             e.ok ? "OK" : "REJECTED: " + e.error);
  }
}

std::string ClaimText(const DraSimClaim& c) {
  return fmt::format("{}/{} (uid {})", c.claim_namespace, c.name, c.uid);
}

void PrintHealth(const std::map<std::string, DraSimDeviceHealth>& health) {
  for (const auto& [key, h] : health) {
    std::cout << fmt::format("    {:<32} {:<10} {}\n", key, h.health, h.message);
  }
}

// --mode dra: the kubelet's DRA side. Exit status as for the device-plugin
// side: 0 ok, 1 start error, 2 no driver registered in time, 3 a prepare or
// unprepare failed.
int RunDra(const Flags& flags) {
  DraSimOptions options;
  options.reconcile_period = flags.reconcile_period;
  DraKubeletSim sim(flags.root, options);
  if (absl::Status s = sim.Start(); !s.ok()) {
    std::cerr << "kubelet-sim: start: " << s << "\n";
    return 1;
  }
  std::cout << "kubelet-sim: DRA plugin watcher on " << sim.PluginsRegistryDir() << "\n";
  std::cout.flush();
  auto chosen = [&]() -> std::string {
    auto drivers = sim.Drivers();
    if (!flags.driver.empty()) return drivers.count(flags.driver) ? flags.driver : "";
    return drivers.empty() ? "" : drivers.begin()->first;
  };
  if (!sim.WaitFor([&] { return !chosen().empty(); }, flags.timeout)) {
    std::cerr << "kubelet-sim: timeout: no DRA driver"
              << (flags.driver.empty() ? "" : " " + flags.driver) << " registered within "
              << absl::FormatDuration(flags.timeout) << "\n";
    for (const auto& r : sim.Registrations()) {
      std::cerr << fmt::format("  {} {}: {}\n", r.socket_path, r.driver, r.ok ? "OK" : r.error);
    }
    return 2;
  }
  const std::string driver = chosen();
  std::cout << "\n== DRA registrations ==\n";
  for (const auto& r : sim.Registrations()) {
    std::cout << fmt::format("  {} type={} name={} endpoint={} versions=[{}] service={}  {}\n",
                             r.socket_path, r.type, r.driver, r.endpoint,
                             absl::StrJoin(r.supported_versions, " "), r.chosen_service,
                             r.ok ? "OK" : "REJECTED: " + r.error);
  }
  int rc = 0;
  if (!flags.prepare.empty()) {
    std::cout << "\n== NodePrepareResources (" << driver << ") ==\n";
    auto prepared = sim.PrepareResources(driver, flags.prepare);
    if (!prepared.ok()) {
      std::cout << "  FailedPrepareDynamicResources: " << prepared.status().message() << "\n";
      rc = 3;
    } else {
      for (const DraSimClaim& c : flags.prepare) {
        std::cout << "  claim " << ClaimText(c) << "\n";
        for (const auto& d : (*prepared)[c.uid]) {
          std::cout << fmt::format("    {}/{} requests [{}] -> CDI [{}]\n", d.pool, d.device,
                                   absl::StrJoin(d.request_names, ", "),
                                   absl::StrJoin(d.cdi_device_ids, ", "));
        }
      }
    }
  }
  if (rc == 0 && !flags.unprepare.empty()) {
    std::cout << "\n== NodeUnprepareResources (" << driver << ") ==\n";
    absl::Status s = sim.UnprepareResources(driver, flags.unprepare);
    for (const DraSimClaim& c : flags.unprepare) {
      std::cout << "  claim " << ClaimText(c) << (s.ok() ? ": unprepared" : "") << "\n";
    }
    if (!s.ok()) {
      std::cout << "  FAILED: " << s.message() << "\n";
      rc = 3;
    }
  }
  if (flags.watch_health > absl::ZeroDuration()) {
    std::cout << "\n== Device health (" << driver << ", "
              << absl::FormatDuration(flags.watch_health) << ") ==\n";
    const absl::Time end = MonotonicNow() + flags.watch_health;
    int seen = 0;
    while (MonotonicNow() < end) {
      sim.WaitFor([&] { return sim.HealthMessages(driver) != seen; }, end - MonotonicNow());
      if (sim.HealthMessages(driver) == seen) break;
      seen = sim.HealthMessages(driver);
      std::cout << "  update " << seen << ":\n";
      PrintHealth(sim.Health(driver));
      std::cout.flush();
    }
  }
  std::cout.flush();
  sim.Stop();
  return rc;
}

int Run(const Flags& flags) {
  if (flags.mode == "dra") return RunDra(flags);
  // Signals are taken with sigwait; block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  if (flags.serve) pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  KubeletSimOptions options;
  options.watcher_reconcile_period = flags.reconcile_period;
  options.dial_timeout = flags.dial_timeout;
  options.version = flags.version;
  KubeletSim sim(flags.root, options);
  const absl::Time origin = MonotonicNow();
  if (flags.mode != "watcher") {
    if (absl::Status s = sim.Start(); !s.ok()) {
      std::cerr << "kubelet-sim: start: " << s << "\n";
      return 1;
    }
    std::cout << "kubelet-sim: serving v1beta1.Registration on " << sim.KubeletSocket() << "\n";
  }
  if (flags.mode != "kubelet") {
    if (absl::Status s = sim.StartWatcher(); !s.ok()) {
      std::cerr << "kubelet-sim: plugin watcher: " << s << "\n";
      return 1;
    }
    std::cout << "kubelet-sim: watching " << sim.PluginsRegistryDir() << "\n";
  }
  std::cout.flush();

  const size_t expected = static_cast<size_t>(flags.expect_resources);
  if (!sim.WaitFor([&] { return ReadyResources(sim).size() >= expected; }, flags.timeout)) {
    PrintTimeout(sim,
                 fmt::format("waited {} for {} resource(s) to register and send a first "
                             "ListAndWatch; ready: [{}]",
                             absl::FormatDuration(flags.timeout), expected,
                             absl::StrJoin(ReadyResources(sim), ", ")),
                 origin);
    return 2;
  }

  std::cout << "\n== Registrations ==\n";
  for (const auto& e : sim.Registrations()) PrintEvent(e, origin);
  std::cout << "\n== Devices ==\n";
  for (const auto& r : sim.Resources()) PrintDevices(sim, r);

  if (!flags.allocations.empty()) std::cout << "\n== Allocations ==\n";
  int pod_index = 0;
  for (const auto& [resource, count] : flags.allocations) {
    const std::string pod = fmt::format("demo-pod-{}", ++pod_index);
    std::vector<std::string> chosen;
    auto response = sim.Allocate(resource, count, pod, "main", &chosen);
    if (!response.ok()) {
      std::cout << fmt::format("  pod {} container main: {} x{} FAILED: {}\n", pod, resource, count,
                               std::string(response.status().message()));
      std::cout.flush();
      return 3;
    }
    std::cout << fmt::format("  pod {} container main: {} x{} -> [{}]\n", pod, resource, count,
                             absl::StrJoin(chosen, ", "));
    PrintResponse(*response);
    absl::Status started = sim.StartContainer(pod, "main");
    std::cout << fmt::format("    container start (PreStartContainer if required): {}\n",
                             started.ok() ? "OK" : started.ToString());
    if (!started.ok()) return 3;
  }

  if (flags.restart) {
    std::cout << "\n== Kubelet restart ==\n";
    const std::vector<std::string> resources = ReadyResources(sim);
    std::map<std::string, int> messages_before;
    for (const auto& r : resources) messages_before[r] = sim.ListAndWatchMessages(r);
    if (absl::Status s = sim.Restart(); !s.ok()) {
      std::cerr << "kubelet-sim: restart: " << s << "\n";
      return 1;
    }
    const absl::Time created = sim.KubeletSocketCreatedAt();
    std::cout << "  every socket in " << sim.DevicePluginDir()
              << " deleted; kubelet.sock re-created\n";
    auto reregistered = [&](const std::string& r) {
      return !sim.EndpointStopped(r) && sim.ListAndWatchMessages(r) > messages_before[r];
    };
    bool all = sim.WaitFor(
        [&] {
          for (const auto& r : resources) {
            if (!reregistered(r)) return false;
          }
          return true;
        },
        flags.timeout);
    auto events = sim.Registrations();
    for (const auto& r : resources) {
      const RegistrationEvent* first = nullptr;
      for (const auto& e : events) {
        if (e.ok && e.resource == r && e.at >= created) {
          first = &e;
          break;
        }
      }
      if (first != nullptr && reregistered(r)) {
        std::cout << fmt::format("  {}: re-registered {} after kubelet.sock was re-created ({})\n",
                                 r, Ms(first->at - created), PathName(first->path));
      } else {
        std::cout << fmt::format("  {}: NOT re-registered within {}\n", r,
                                 absl::FormatDuration(flags.timeout));
      }
    }
    if (!all) {
      PrintTimeout(sim, "not every resource re-registered after the restart", origin);
      return 2;
    }
    std::cout << "\n== Devices after restart ==\n";
    for (const auto& r : sim.Resources()) PrintDevices(sim, r);
  }

  if (flags.serve) {
    std::cout << "\nkubelet-sim: serving until SIGTERM/SIGINT\n";
    std::cout.flush();
    size_t events_seen = sim.Registrations().size();
    std::map<std::string, int> messages_seen;
    for (const auto& r : sim.Resources()) messages_seen[r] = sim.ListAndWatchMessages(r);
    const timespec poll = {0, 200 * 1000 * 1000};
    while (sigtimedwait(&signals, nullptr, &poll) < 0) {
      auto events = sim.Registrations();
      for (; events_seen < events.size(); ++events_seen) PrintEvent(events[events_seen], origin);
      for (const auto& r : sim.Resources()) {
        int n = sim.ListAndWatchMessages(r);
        if (n != messages_seen[r]) {
          messages_seen[r] = n;
          PrintDevices(sim, r);
        }
      }
      std::cout.flush();
    }
    std::cout << "kubelet-sim: signal received, stopping\n";
  }
  sim.Stop();
  return 0;
}

}  // namespace
}  // namespace fabric::sim

int main(int argc, char** argv) { return fabric::sim::Run(fabric::sim::ParseFlags(argc, argv)); }
