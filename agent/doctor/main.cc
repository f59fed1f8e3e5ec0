// fabric-doctor: the fabric doctor alone (no device-plugin servers), for the
// opt-in doctor container of the DaemonSet: it needs device access the
// device-plugin container must not have (docs/doctor.md). Same --doctor-*
// flags as fabric-agent; serves /metrics (doctor series only), /healthz and
// /v1/peers on --metrics-address.
#include <signal.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "agent/base/command_line.h"
#include "agent/base/host_paths.h"
#include "agent/base/logging.h"
#include "agent/doctor/doctor.h"
#include "agent/metrics/http_server.h"
#include "agent/sysfs/sysfs_discovery.h"

ABSL_FLAG(std::string, sysfs_root, "/sys", "Where the host's sysfs is mounted");
ABSL_FLAG(std::string, dev_root, "/dev", "Where the host's /dev is visible");
ABSL_FLAG(std::string, metrics_address, "0.0.0.0:9436",
          "HTTP listen address for /metrics, /healthz and /v1/peers");
ABSL_FLAG(std::string, log_level, "info", "debug|info|warn|error");
ABSL_FLAG(std::string, doctor_peers, "",
          "Peers: dns:NAME[:PORT] (headless Service) or file:PATH (host:port per line)");
ABSL_FLAG(std::string, doctor_provider, "",
          "libfabric provider for every device (tcp for tests); empty: each device's own");
ABSL_FLAG(std::string, doctor_address, "0.0.0.0:7946", "Control channel listen address");
ABSL_FLAG(std::string, doctor_period, "10s", "Probe period");
ABSL_FLAG(int, doctor_sample, 2, "Rotating peers each device probes per period");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "fabric-doctor: probes the fabric path to peer nodes (see docs/doctor.md).\n"
      "Usage: fabric-doctor --doctor-peers dns:NAME|file:PATH [--doctor-provider P] "
      "[--doctor-address HOST:PORT] [--doctor-period 10s] [--metrics-address HOST:PORT]");
  fabric::ParseCommandLine(argc, argv);
  fabric::LogLevel level;
  if (!fabric::ParseLogLevel(absl::GetFlag(FLAGS_log_level), &level)) {
    std::fprintf(stderr, "fabric-doctor: bad --log-level\n");
    return 2;
  }
  fabric::SetLogLevel(level);

  fabric::doctor::DoctorOptions o;
  o.enabled = true;
  o.peers = absl::GetFlag(FLAGS_doctor_peers);
  o.provider = absl::GetFlag(FLAGS_doctor_provider);
  o.address = absl::GetFlag(FLAGS_doctor_address);
  o.sample = absl::GetFlag(FLAGS_doctor_sample);
  if (!absl::ParseDuration(absl::GetFlag(FLAGS_doctor_period), &o.period)) {
    std::fprintf(stderr, "fabric-doctor: --doctor-period: not a duration\n");
    return 2;
  }
  if (absl::Status s = fabric::doctor::ValidateOptions(o); !s.ok()) {
    std::fprintf(stderr, "fabric-doctor: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  fabric::doctor::PrepareProcessEnvironment();  // setenv: before any thread starts
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  fabric::HostPaths paths = fabric::HostPaths::Defaults();
  paths.sysfs_root = absl::GetFlag(FLAGS_sysfs_root);
  paths.dev_root = absl::GetFlag(FLAGS_dev_root);
  auto inventory = fabric::DiscoverNode(paths);
  if (!inventory.ok()) {
    fabric::LogError(fabric::Component::kAgent, "discovery: {}", inventory.status().message());
    return 1;
  }
  fabric::doctor::Doctor doctor(o, fabric::doctor::DeviceSpecs(*inventory, o));
  if (absl::Status s = doctor.Start(); !s.ok()) {
    fabric::LogError(fabric::Component::kAgent, "{}", s.message());
    doctor.Stop();
    return 1;
  }
  fabric::HttpHandlers h;
  h.metrics = [&doctor] { return doctor.MetricsText(); };
  h.not_ready_reason = [] { return std::string(); };
  h.node_json = [&doctor] { return doctor.PeersJson(); };
  h.peers_json = [&doctor] { return doctor.PeersJson(); };
  fabric::HttpServer http(h, absl::Seconds(1));
  if (absl::Status s = http.Start(absl::GetFlag(FLAGS_metrics_address)); !s.ok()) {
    fabric::LogError(fabric::Component::kAgent, "{}", s.message());
    doctor.Stop();
    return 1;
  }
  int sig = 0;
  sigwait(&set, &sig);
  fabric::LogInfo(fabric::Component::kAgent, "signal {}: stopping", sig);
  http.Stop();
  doctor.Stop();
  return 0;
}
