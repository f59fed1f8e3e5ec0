// Command-line parsing for fabricctl: pure functions over argv, no I/O, so
// every flag and suffix rule is unit-tested (fabricctl_test).
#ifndef FABRIC_TOOLS_FABRICCTL_CLI_ARGS_H_
#define FABRIC_TOOLS_FABRICCTL_CLI_ARGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fabric::fabricctl {

// Process exit codes. Stable: scripts and the integration test depend on them.
// Documented in UsageText() and README.md.
enum ExitCode : int {
  kExitOk = 0,
  kExitError = 1,                     // runtime failure (I/O, libfabric call, peer gone)
  kExitUsage = 2,                     // bad command line
  kExitNotGranted = 3,                // check: a node is visible but open() gives EPERM/EACCES
  kExitOpenFailed = 4,                // check: a node is visible but open() fails otherwise
  kExitNoDevices = 5,                 // check: no infiniband/uverbs* node at all
  kExitProviderMissing = 6,           // check/bench: the requested libfabric provider is absent
  kExitMemlockTooLow = 7,             // check: RLIMIT_MEMLOCK below --min-memlock, no CAP_IPC_LOCK
  kExitProviderMismatch = 8,          // bench: libfabric opened another provider than requested
  kExitVerbsUnavailable = 30,         // check stage 1: libibverbs cannot load or list the device
  kExitPortDown = 31,                 // check stage 2: a port is not ACTIVE
  kExitGidMismatch = 32,              // check stage 3: MC_GID_INDEX/NCCL_IB_GID_INDEX is wrong
  kExitMrFailed = 33,                 // check stage 4: ibv_reg_mr failed, not for memlock
  kExitQpFailed = 34,                 // check stage 5: the CQ or QP cannot be created
  kExitLoopbackFailed = 35,           // check stage 6: the RC loopback transfer failed
  kExitDoctorFabricUnreachable = 10,  // doctor: a peer's control answers, its fabric does not
  kExitDoctorPeerDown = 11,           // doctor: a peer answers neither
  kExitDoctorNoPeers = 12,            // doctor: no other node in the peer list
  kExitDoctorNotProbed = 13,          // doctor: pairs never probed (provider mismatch, ...)
  kExitObserveFallback = 20,          // observe: tcp where a fabric was granted or expected
  kExitObserveIdle = 21,              // observe: idle (under the floor both ways)
  kExitObserveUnknown = 22,           // observe: unknown (or the Pod is not observed)
  kExitObserveMismatch = 23,          // observe: a fabric other than --expect
};

enum class OutputFormat { kText, kJson };

inline constexpr uint64_t kMiB = 1024ull * 1024;
inline constexpr uint64_t kDefaultMrSize = 64 * kMiB;
inline constexpr uint16_t kDefaultBenchPort = 18515;  // perftest's default port

// "65536", "4k", "4K", "4KiB", "1m", "1MB", "2g": binary multiples (k = 1024).
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text);
// "5", "2.5", "2.5s", "500ms": seconds, > 0.
absl::StatusOr<double> ParseSeconds(absl::string_view text);
// "1 MiB", "4 KiB", "3 B", "1.5 GiB" (exact multiples print without decimals).
std::string FormatBytes(uint64_t bytes);

struct HostPort {
  std::string host;  // literal address or name; IPv6 without brackets
  uint16_t port = 0;
  bool operator==(const HostPort&) const = default;
};
// "10.0.0.1:7000", "[fe80::1]:7000", "node-a:7000"; with allow_no_host also
// ":7000" and "7000" (host empty). A missing port is an error.
absl::StatusOr<HostPort> ParseHostPort(absl::string_view text, bool allow_no_host);

struct CheckOptions {
  std::string dev_root;                 // default HostPaths::Defaults().dev_root
  std::string sysfs_root;               // default HostPaths::Defaults().sysfs_root
  std::optional<std::string> provider;  // --provider: required libfabric provider
  // --mr-size (--min-memlock is the older spelling): stage 4 registers this
  // much; the memlock floor where no device reaches stage 4.
  uint64_t mr_size = kDefaultMrSize;
  // --wait: retry until the verdict is ok or this many seconds passed (an
  // init container's use); 0: once.
  double wait_s = 0;
  OutputFormat format = OutputFormat::kText;
};

struct BenchOptions {
  enum class Role { kLoopback, kListen, kConnect };
  Role role = Role::kLoopback;
  HostPort peer;  // --listen (bind address, host may be empty) or --connect
  std::string provider = "tcp";
  std::string domain;     // --domain: pin a domain (e.g. "rdmap79s0-rdm"); empty = first
  uint64_t size = kMiB;   // bytes per RMA operation
  uint32_t batch = 16;    // outstanding operations per endpoint
  uint32_t threads = 1;   // endpoints, one thread each
  double duration_s = 5;  // per operation (write, then read)
  bool progress = true;   // live rate on stderr once per second
  OutputFormat format = OutputFormat::kText;
};

struct DevicesOptions {
  std::string dev_root;
  std::string sysfs_root;
  std::string config_path;  // empty: built-in defaults
  // --agent: also ask that agent's /v1/node how it serves the pools
  // (registration, and in DRA mode its slices and prepared claims).
  std::string agent;
  OutputFormat format = OutputFormat::kText;
};

struct DoctorOptions {
  std::string agent = "http://127.0.0.1:9435";  // the local agent's HTTP address
  std::string bench_peer;  // --bench PEER: host[:port] of the peer's `fabricctl bench --listen`
  std::string provider;    // --provider for --bench; "" = the one the doctor probes over
  double duration_s = 2;
  OutputFormat format = OutputFormat::kText;
};

inline constexpr uint16_t kDefaultAgentPort = 9435;     // fabric-agent --metrics-address
inline constexpr uint16_t kDefaultAgentTlsPort = 9437;  // fabric-agent --pods-tls-address
inline constexpr char kServiceAccountToken[] =
    "/var/run/secrets/kubernetes.io/serviceaccount/token";
// Where a member mounts its projected token for the agent's audience
// (fabric-agent --pods-token-audience; docs/gpustack-operator.md).
inline constexpr char kPodsApiToken[] = "/var/run/secrets/fabric.gpustack.ai/pods-api/token";

struct ObserveOptions {
  // The agent's address. Unless --agent is given: when HOST_IP is set (the
  // downward API's status.hostIP, so a Pod can ask its node's agent),
  // https://$HOST_IP:9437 if a CA file is known (--ca-file or
  // $FABRIC_AGENT_CA_FILE), else http://$HOST_IP:9435; without HOST_IP the
  // local agent (ApplyObserveEnvironment).
  std::string agent = "http://127.0.0.1:9435";
  bool agent_given = false;
  // https only: the CA the agent's certificate must chain to, the name it must
  // carry ("" = the URL's host; $FABRIC_AGENT_SERVER_NAME), no check at all.
  std::string ca_file, server_name;
  bool insecure = false;
  // The bearer token sent over https: --token-file, else the projected token
  // for the agent's audience, else the Pod's ServiceAccount token, the first
  // of the two that exists (never over plain http).
  std::string token_file;
  std::string projected_token_file = kPodsApiToken;
  std::string default_token_file = kServiceAccountToken;
  // --pod NS/NAME; unless given, $POD_NAMESPACE/$POD_NAME when both are set.
  std::string pod_namespace, pod_name;
  std::string window;  // --window, passed as ?window= ("" = the agent's 60 s)
  std::string expect;  // --expect efa|rdma ("" = none)
  OutputFormat format = OutputFormat::kText;
};

// Fills the defaults that come from the environment (`getenv` returns
// nullptr for an unset variable).
void ApplyObserveEnvironment(ObserveOptions& o, const char* (*getenv)(const char*));

struct Command {
  enum class Kind { kHelp, kCheck, kBench, kDevices, kDoctor, kObserve };
  Kind kind = Kind::kHelp;
  CheckOptions check;
  BenchOptions bench;
  DevicesOptions devices;
  DoctorOptions doctor;
  ObserveOptions observe;
};

// args excludes argv[0]. kInvalidArgument with a one-line reason on misuse.
absl::StatusOr<Command> ParseCommandLine(const std::vector<std::string>& args);

// The full --help text, including exit codes.
std::string UsageText();

}  // namespace fabric::fabricctl

#endif  // FABRIC_TOOLS_FABRICCTL_CLI_ARGS_H_
