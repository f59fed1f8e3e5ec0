// fabric-agent: serves the node's EFA/RDMA devices to the kubelet.
// Built twice: fabric-agent (the device-plugin API) and, with FABRIC_DRA,
// fabric-dra (Dynamic Resource Allocation: ResourceSlices and the DRA kubelet
// plugin). Same flags, same modules; only the KubeletFront differs.
#include <malloc.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "agent/base/command_line.h"
#include "agent/base/file_util.h"
#include "agent/base/host_paths.h"
#include "agent/base/logging.h"
#include "agent/base/memlock_limit.h"
#include "agent/daemon/agent_runner.h"
#include "agent/doctor/doctor.h"
#include "agent/kubeapi/http_kube_client.h"
#include "agent/kubeapi/kube_config.h"
#include "agent/podsapi/authorizer.h"
#ifdef FABRIC_DRA
#include "agent/dra_front/dra_front.h"
#endif

ABSL_FLAG(std::string, config, "",
          "Pool configuration file (YAML or JSON); empty: built-in defaults");
ABSL_FLAG(std::string, sysfs_root, "/sys", "Where the host's sysfs is mounted");
ABSL_FLAG(std::string, dev_root, "/dev", "Where the host's /dev is visible (optional)");
ABSL_FLAG(std::string, kubelet_root, "/var/lib/kubelet",
          "The kubelet's --root-dir: places plugins_registry/ and pod-resources/kubelet.sock "
          "(not device-plugins/, which the kubelet keeps in /var/lib/kubelet)");
ABSL_FLAG(std::string, device_plugin_dir, "",
          "The kubelet's device-plugin folder (kubelet.sock); empty: "
          "/var/lib/kubelet/device-plugins, hard-coded in every kubelet");
ABSL_FLAG(std::string, plugins_registry_dir, "",
          "The kubelet's plugin watcher folder; empty: <kubelet-root>/plugins_registry");
ABSL_FLAG(std::string, pod_resources_socket, "",
          "The kubelet's PodResources socket; empty: <kubelet-root>/pod-resources/kubelet.sock");
ABSL_FLAG(std::string, registration, "auto", "auto|kubelet|watcher");
ABSL_FLAG(std::string, metrics_address, "",
          "HTTP listen address for /metrics, /healthz, /readyz (e.g. 0.0.0.0:9435)");
ABSL_FLAG(std::string, cdi_dir, "/var/run/cdi", "Directory for CDI spec files");
ABSL_FLAG(std::string, state_dir, "/var/lib/fabric-agent", "Directory for durable agent state");
ABSL_FLAG(std::string, log_level, "info", "debug|info|warn|error");
ABSL_FLAG(bool, write_cdi, true, "Write CDI spec files into --cdi-dir");
ABSL_FLAG(bool, cdi_devices, false,
          "Allocate also returns CDI device names (runtimes with CDI on)");
ABSL_FLAG(std::string, memlock_hook_path, "/opt/fabric/bin/fabric-memlock-hook",
          "Host path of fabric-memlock-hook referenced by the CDI specs; empty: no hook");
ABSL_FLAG(std::string, memlock_limit, "unlimited",
          "RLIMIT_MEMLOCK the hook sets (unlimited, bytes, or 64Gi)");
ABSL_FLAG(
    std::string, agent_socket, "",
    "Unix socket for fabric-cni (e.g. /var/run/fabric-agent/agent.sock); empty: CNI part off");
ABSL_FLAG(bool, doctor, false,
          "Run the fabric doctor: probe peers' fabric endpoints (opt-in; see docs/doctor.md)");
ABSL_FLAG(std::string, doctor_peers, "",
          "Doctor peers: dns:NAME[:PORT] (headless Service) or file:PATH (host:port per line)");
ABSL_FLAG(std::string, doctor_provider, "",
          "Doctor libfabric provider for every device (e.g. tcp for tests); empty: each "
          "device's own (efa, verbs;ofi_rxm)");
ABSL_FLAG(std::string, doctor_address, "0.0.0.0:7946", "Doctor control channel listen address");
ABSL_FLAG(std::string, doctor_period, "10s", "Doctor probe period (e.g. 10s, 500ms)");
ABSL_FLAG(int, doctor_sample, 2,
          "Doctor: rotating peers each device probes per period, besides its fixed partner");
ABSL_FLAG(std::string, sample_period, "5s",
          "How often every counter file is read (and, with --observe, the RDMA resources and "
          "Pods' processes); /metrics and EFA error-counter health use the latest sample");
ABSL_FLAG(bool, observe, false,
          "Observe each Pod's transport: RDMA resource owners (netlink) and Pods' own network "
          "bytes (/proc; needs the host PID namespace). Off: verdicts are unknown");
ABSL_FLAG(uint64_t, observe_floor_bytes, 1024 * 1024,
          "Transport verdicts: bytes a window must move to count as traffic (packet-only "
          "devices such as rxe: this over 4096, in packets)");
ABSL_FLAG(std::string, proc_root, "/proc", "Where the host's /proc is visible (--observe)");
ABSL_FLAG(std::vector<std::string>, runtime_state_dir, {},
          "Container runtimes' state directories for Pod and container names (--observe), "
          "containerd=DIR or cri-o=DIR, comma-separated; empty: "
          "containerd=/run/containerd/io.containerd.runtime.v2.task/k8s.io,"
          "cri-o=/run/containers/storage/overlay-containers");
ABSL_FLAG(std::string, nfd_features_file, "",
          "Write Node Feature Discovery labels to this file (features.d); empty: off");

ABSL_FLAG(bool, pod_conditions, false,
          "Keep the fabric.gpustack.ai/FabricAttached and Transport conditions, and Events, on "
          "this node's Pods in the API server (needs --observe; docs/observe.md)");
ABSL_FLAG(std::string, pod_attach_grace, "60s",
          "--pod-conditions: how long a granted container may run without a QP before "
          "FabricAttached turns False (a Pod's fabric.gpustack.ai/attach-grace overrides it)");
ABSL_FLAG(std::string, pods_tls_address, "",
          "Serve /v1/pods over TLS here (e.g. 0.0.0.0:9437), each request's bearer token and "
          "access reviewed by the API server (TokenReview, SubjectAccessReview); needs "
          "--observe. Empty: /v1/pods only on --metrics-address, to loopback clients");
ABSL_FLAG(std::string, pods_tls_cert_file, "", "PEM certificate (chain) for --pods-tls-address");
ABSL_FLAG(std::string, pods_tls_key_file, "", "PEM private key for --pods-tls-address");
ABSL_FLAG(std::string, pods_token_audience, fabric::podsapi::kDefaultPodsTokenAudience,
          "--pods-tls-address: the audience a client's ServiceAccount token must be issued for "
          "(a projected token; the API server itself refuses it, so it cannot be replayed "
          "there)");
ABSL_FLAG(bool, pods_accept_apiserver_tokens, false,
          "--pods-tls-address: also accept tokens for the API server's own audience (a Pod's "
          "default ServiceAccount token), for clients that cannot mount a projected token");
ABSL_FLAG(std::string, node_name, "",
          "This node's name (DRA: the pool and the ResourceSlices' spec.nodeName; "
          "--pod-conditions: whose Pods to watch); empty: $NODE_NAME");
ABSL_FLAG(std::string, kube_api_server, "",
          "API server URL (https://HOST:PORT); empty: in-cluster (KUBERNETES_SERVICE_HOST/PORT, "
          "the ServiceAccount token and CA)");
ABSL_FLAG(std::string, kube_token_file, "", "Bearer token file (with --kube-api-server)");
ABSL_FLAG(std::string, kube_ca_file, "", "CA bundle of the API server (with --kube-api-server)");

#ifdef FABRIC_DRA
ABSL_FLAG(bool, dra_taint_unhealthy, false,
          "Also taint unhealthy devices in the ResourceSlices (NoSchedule; needs the "
          "DRADeviceTaints feature gate)");
#endif

namespace {

std::string NodeName() {
  std::string node = absl::GetFlag(FLAGS_node_name);
  if (node.empty() && std::getenv("NODE_NAME") != nullptr) node = std::getenv("NODE_NAME");
  return node;
}

absl::StatusOr<fabric::kubeapi::KubeConfig> KubeConfigFromFlags(const char* user_agent) {
  absl::StatusOr<fabric::kubeapi::KubeConfig> kube =
      absl::GetFlag(FLAGS_kube_api_server).empty()
          ? fabric::kubeapi::InClusterConfig({.env = fabric::kubeapi::ProcessKubeEnv()})
          : fabric::kubeapi::ExplicitConfig(absl::GetFlag(FLAGS_kube_api_server),
                                            absl::GetFlag(FLAGS_kube_token_file),
                                            absl::GetFlag(FLAGS_kube_ca_file), false);
  if (kube.ok()) kube->user_agent = user_agent;
  return kube;
}

// --pod-conditions and --pods-tls-*: their checks and the API server they
// talk to. 0, or the exit code after a message.
int ApplyApiServerFlags(fabric::AgentOptions& opts) {
  opts.pod_conditions = absl::GetFlag(FLAGS_pod_conditions);
  if (!absl::ParseDuration(absl::GetFlag(FLAGS_pod_attach_grace), &opts.conditions.attach_grace) ||
      opts.conditions.attach_grace < absl::ZeroDuration()) {
    std::fprintf(stderr, "fabric-agent: --pod-attach-grace: '%s' is not a duration like 60s\n",
                 absl::GetFlag(FLAGS_pod_attach_grace).c_str());
    return 2;
  }
  opts.pods_tls_address = absl::GetFlag(FLAGS_pods_tls_address);
  opts.pods_tls_cert_file = absl::GetFlag(FLAGS_pods_tls_cert_file);
  opts.pods_tls_key_file = absl::GetFlag(FLAGS_pods_tls_key_file);
  opts.pods_token_audience = absl::GetFlag(FLAGS_pods_token_audience);
  opts.pods_accept_apiserver_tokens = absl::GetFlag(FLAGS_pods_accept_apiserver_tokens);
  if (opts.pods_token_audience.empty()) {
    std::fprintf(stderr,
                 "fabric-agent: --pods-token-audience must not be empty (for the API server's "
                 "own tokens add --pods-accept-apiserver-tokens)\n");
    return 2;
  }
  if (opts.pod_conditions) {
    opts.node_name = NodeName();
    if (!opts.observe || opts.node_name.empty()) {
      std::fprintf(stderr,
                   "fabric-agent: --pod-conditions needs --observe and --node-name (or "
                   "$NODE_NAME)\n");
      return 2;
    }
  }
  if (!opts.pods_tls_address.empty() &&
      (!opts.observe || opts.pods_tls_cert_file.empty() || opts.pods_tls_key_file.empty())) {
    std::fprintf(stderr,
                 "fabric-agent: --pods-tls-address needs --observe, --pods-tls-cert-file and "
                 "--pods-tls-key-file\n");
    return 2;
  }
  if (opts.pod_conditions || !opts.pods_tls_address.empty()) {
    auto kube = KubeConfigFromFlags("fabric-agent");
    if (!kube.ok()) {
      std::fprintf(stderr,
                   "fabric-agent: the API server (for --pod-conditions or --pods-tls-address): "
                   "%s\n",
                   std::string(kube.status().message()).c_str());
      return 2;
    }
    opts.kube = *std::move(kube);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // One malloc arena, set before any thread exists. glibc gives each thread
  // that allocates an arena of its own, up to 8 per core, and the agent has ~18
  // mostly idle threads: per-thread arenas cost ~0.4 MiB of touched memory here
  // and grow with the node's core count, while the per-thread tcache already
  // keeps small allocations off the arena lock (Allocate p99 unchanged,
  // docs/performance.md). MALLOC_ARENA_MAX in the environment still wins.
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr) mallopt(M_ARENA_MAX, 1);
  // A fixed mmap threshold (glibc's default value, 128 KiB) instead of the
  // one glibc raises after each large free: the /metrics body (0.25-1 MiB)
  // then always lives in its own mapping and is returned to the kernel when it
  // is dropped, instead of staying in the heap between scrapes.
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") == nullptr) mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  absl::SetProgramUsageMessage(
      "fabric-agent: discovers EFA/RDMA devices and serves them to the kubelet.\n"
      "Usage: fabric-agent [--config FILE] [--sysfs-root DIR] [--dev-root DIR] "
      "[--kubelet-root DIR] [--device-plugin-dir DIR] [--registration auto|kubelet|watcher] "
      "[--metrics-address HOST:PORT]");
  fabric::ParseCommandLine(argc, argv);

  fabric::LogLevel level;
  if (!fabric::ParseLogLevel(absl::GetFlag(FLAGS_log_level), &level)) {
    std::fprintf(stderr, "fabric-agent: --log-level: '%s' is not debug, info, warn or error\n",
                 absl::GetFlag(FLAGS_log_level).c_str());
    return 2;
  }
  fabric::SetLogLevel(level);

  fabric::AgentOptions opts;
  opts.config_path = absl::GetFlag(FLAGS_config);
  opts.paths.sysfs_root = absl::GetFlag(FLAGS_sysfs_root);
  opts.paths.dev_root = absl::GetFlag(FLAGS_dev_root);
  if (absl::Status s = fabric::ApplyKubeletPathFlags(
          {absl::GetFlag(FLAGS_kubelet_root), absl::GetFlag(FLAGS_device_plugin_dir),
           absl::GetFlag(FLAGS_plugins_registry_dir), absl::GetFlag(FLAGS_pod_resources_socket)},
          &opts.paths);
      !s.ok()) {
    std::fprintf(stderr, "fabric-agent: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  opts.paths.cdi_dir = absl::GetFlag(FLAGS_cdi_dir);
  opts.paths.state_dir = absl::GetFlag(FLAGS_state_dir);
  opts.paths.proc_root = absl::GetFlag(FLAGS_proc_root);
  opts.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  opts.write_cdi = absl::GetFlag(FLAGS_write_cdi) && !opts.paths.cdi_dir.empty();
  opts.cdi_devices = absl::GetFlag(FLAGS_cdi_devices);
  opts.memlock_hook_path = absl::GetFlag(FLAGS_memlock_hook_path);
  opts.memlock_limit = absl::GetFlag(FLAGS_memlock_limit);
  opts.agent_socket = absl::GetFlag(FLAGS_agent_socket);
  opts.nfd_features_file = absl::GetFlag(FLAGS_nfd_features_file);
  if (!absl::ParseDuration(absl::GetFlag(FLAGS_sample_period), &opts.sample_period) ||
      opts.sample_period < absl::Milliseconds(10)) {
    std::fprintf(stderr, "fabric-agent: --sample-period: '%s' is not a duration of 10ms or more\n",
                 absl::GetFlag(FLAGS_sample_period).c_str());
    return 2;
  }
  opts.observe = absl::GetFlag(FLAGS_observe);
  opts.observe_floor_bytes = absl::GetFlag(FLAGS_observe_floor_bytes);
  if (opts.observe_floor_bytes == 0) {
    std::fprintf(stderr, "fabric-agent: --observe-floor-bytes: must be at least 1\n");
    return 2;
  }
  opts.runtime_state_dirs = absl::GetFlag(FLAGS_runtime_state_dir);
  if (int rc = ApplyApiServerFlags(opts); rc != 0) return rc;
  opts.doctor.enabled = absl::GetFlag(FLAGS_doctor);
  opts.doctor.peers = absl::GetFlag(FLAGS_doctor_peers);
  opts.doctor.provider = absl::GetFlag(FLAGS_doctor_provider);
  opts.doctor.address = absl::GetFlag(FLAGS_doctor_address);
  opts.doctor.sample = absl::GetFlag(FLAGS_doctor_sample);
  if (!absl::ParseDuration(absl::GetFlag(FLAGS_doctor_period), &opts.doctor.period) ||
      opts.doctor.period <= absl::ZeroDuration()) {
    std::fprintf(stderr, "fabric-agent: --doctor-period: '%s' is not a duration like 10s\n",
                 absl::GetFlag(FLAGS_doctor_period).c_str());
    return 2;
  }
  if (opts.doctor.enabled) {
    if (absl::Status s = fabric::doctor::ValidateOptions(opts.doctor); !s.ok()) {
      std::fprintf(stderr, "fabric-agent: %s\n", std::string(s.message()).c_str());
      return 2;
    }
    fabric::doctor::PrepareProcessEnvironment();  // setenv: before any thread starts
  }
  rlim_t memlock = 0;
  if (!fabric::ParseMemlockLimit(opts.memlock_limit, &memlock, nullptr)) {
    std::fprintf(stderr,
                 "fabric-agent: --memlock-limit: '%s' is not unlimited, bytes or <n>Ki/Mi/Gi\n",
                 opts.memlock_limit.c_str());
    return 2;
  }
  if (!fabric::ParseRegistrationMode(absl::GetFlag(FLAGS_registration), &opts.registration)) {
    std::fprintf(stderr, "fabric-agent: --registration: '%s' is not auto, kubelet or watcher\n",
                 absl::GetFlag(FLAGS_registration).c_str());
    return 2;
  }
#ifdef FABRIC_DRA
  // Prepare answers CDI names: the specs are always written.
  opts.write_cdi = !opts.paths.cdi_dir.empty();
  opts.cdi_devices = true;
  if (!opts.write_cdi) {
    std::fprintf(stderr, "fabric-dra: --cdi-dir must not be empty: prepare answers CDI names\n");
    return 2;
  }
  const std::string node = NodeName();
  if (node.empty()) {
    std::fprintf(stderr, "fabric-dra: --node-name (or $NODE_NAME) is required\n");
    return 2;
  }
  absl::StatusOr<fabric::kubeapi::KubeConfig> kube = KubeConfigFromFlags("fabric-dra");
  if (!kube.ok()) {
    std::fprintf(stderr, "fabric-dra: %s\n", std::string(kube.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<std::unique_ptr<fabric::kubeapi::HttpKubeClient>> client =
      fabric::kubeapi::HttpKubeClient::Create(*kube);
  if (!client.ok()) {
    std::fprintf(stderr, "fabric-dra: %s\n", std::string(client.status().message()).c_str());
    return 2;
  }
  fabric::dra::DraFrontOptions dra;
  dra.node_name = node;
  dra.kubelet_root = absl::GetFlag(FLAGS_kubelet_root);
  dra.plugins_registry_dir = opts.paths.plugins_registry_dir;
  dra.state_dir = opts.paths.state_dir;
  dra.cdi_dir = opts.paths.cdi_dir;
  dra.slices.taint_unhealthy = absl::GetFlag(FLAGS_dra_taint_unhealthy);
  // A node that ran the device-plugin agent: its grants stay until their Pods end.
  dra.podresources_socket = opts.paths.PodResourcesSocket();
  dra.kubelet_checkpoint = opts.paths.KubeletCheckpoint();
  // std::function must be copyable: the client waits in a shared holder and
  // moves into the front, which the agent makes once.
  opts.front_name = "dra";
  auto holder = std::make_shared<std::unique_ptr<fabric::kubeapi::KubeClient>>(std::move(*client));
  opts.make_front = [dra, holder](const fabric::FrontContext& ctx) {
    return std::unique_ptr<fabric::KubeletFront>(std::make_unique<fabric::dra::DraFront>(
        dra, std::move(*holder), ctx.registry, ctx.side_files, ctx.readiness));
  };
#endif
  return fabric::RunAgent(opts);
}
