#include "tools/fabricctl/cli_args.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "agent/base/host_paths.h"
#include "agent/base/status_macros.h"

namespace fabric::fabricctl {
namespace {

absl::Status Usage(const std::string& msg) { return absl::InvalidArgumentError(msg); }

// Splits "--name=value" into name and value; "--name" leaves value empty.
struct Flag {
  std::string name;
  std::optional<std::string> inline_value;
};

Flag SplitFlag(const std::string& arg) {
  size_t eq = arg.find('=');
  if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
    return {arg.substr(0, eq), arg.substr(eq + 1)};
  }
  // "-ojson" is accepted like "-o json".
  if (arg.size() > 2 && arg[0] == '-' && arg[1] == 'o') return {"-o", arg.substr(2)};
  return {arg, std::nullopt};
}

// Walks argv after the subcommand, handing each flag to `handle`.
class ArgCursor {
 public:
  explicit ArgCursor(const std::vector<std::string>& args, size_t pos) : args_(args), pos_(pos) {}
  bool Done() const { return pos_ >= args_.size(); }
  Flag Next() { return SplitFlag(args_[pos_++]); }
  // The flag's value: inline ("--x=v") or the next argument.
  absl::StatusOr<std::string> Value(const Flag& f) {
    if (f.inline_value) return *f.inline_value;
    if (pos_ >= args_.size()) return Usage(absl::StrCat(f.name, " needs a value"));
    return args_[pos_++];
  }
  // For flags whose value is optional ("--listen [ADDR:PORT]").
  std::optional<std::string> OptionalValue(const Flag& f) {
    if (f.inline_value) return f.inline_value;
    if (pos_ < args_.size() && !args_[pos_].empty() && args_[pos_][0] != '-') {
      return args_[pos_++];
    }
    return std::nullopt;
  }

 private:
  const std::vector<std::string>& args_;
  size_t pos_;
};

absl::StatusOr<OutputFormat> ParseFormat(const std::string& v) {
  if (v == "json") return OutputFormat::kJson;
  if (v == "text" || v == "table") return OutputFormat::kText;
  return Usage(absl::StrCat("-o: expected json or text, got '", v, "'"));
}

absl::StatusOr<uint32_t> ParsePositive(const std::string& flag, const std::string& v,
                                       uint32_t max) {
  uint32_t n = 0;
  if (!absl::SimpleAtoi(v, &n) || n == 0 || n > max) {
    return Usage(fmt::format("{}: expected an integer in 1..{}, got '{}'", flag, max, v));
  }
  return n;
}

// "30s", "2m", "1m30s", "90", "500ms": a --wait duration, > 0.
absl::StatusOr<double> ParseWait(const std::string& text) {
  auto bad = [&] {
    return Usage(absl::StrCat("--wait: bad duration '", text, "' (examples: 30s, 2m, 1m30s)"));
  };
  if (absl::EndsWith(text, "ms")) {
    auto s = ParseSeconds(text);
    return s.ok() ? s : bad();
  }
  double total = 0;
  std::string rest = text;
  if (const size_t m = rest.find('m'); m != std::string::npos) {
    double minutes = 0;
    if (!absl::SimpleAtod(rest.substr(0, m), &minutes) || !(minutes >= 0)) return bad();
    total = minutes * 60;
    rest = rest.substr(m + 1);
    if (rest.empty()) return total > 0 ? absl::StatusOr<double>(total) : bad();
  }
  auto seconds = ParseSeconds(rest);
  if (!seconds.ok()) return bad();
  return total + *seconds;
}

absl::Status ParseCheck(ArgCursor& c, CheckOptions& o) {
  while (!c.Done()) {
    Flag f = c.Next();
    if (f.name == "--dev-root") {
      FABRIC_ASSIGN_OR_RETURN(o.dev_root, c.Value(f));
    } else if (f.name == "--sysfs-root") {
      FABRIC_ASSIGN_OR_RETURN(o.sysfs_root, c.Value(f));
    } else if (f.name == "--provider") {
      FABRIC_ASSIGN_OR_RETURN(std::string p, c.Value(f));
      if (p.empty()) return Usage("--provider: empty name");
      o.provider = p;
    } else if (f.name == "--mr-size" || f.name == "--min-memlock") {
      FABRIC_ASSIGN_OR_RETURN(std::string v, c.Value(f));
      FABRIC_ASSIGN_OR_RETURN(o.mr_size, ParseByteSize(v));
      // Stage 6 splits it into a source, a write target and a receive buffer.
      if (o.mr_size < 1024) return Usage(absl::StrCat(f.name, ": at least 1 KiB"));
      if (o.mr_size > 64ull * 1024 * kMiB) return Usage(absl::StrCat(f.name, ": at most 64 GiB"));
    } else if (f.name == "--wait") {
      FABRIC_ASSIGN_OR_RETURN(std::string v, c.Value(f));
      FABRIC_ASSIGN_OR_RETURN(o.wait_s, ParseWait(v));
    } else if (f.name == "-o" || f.name == "--output") {
      FABRIC_ASSIGN_OR_RETURN(std::string v, c.Value(f));
      FABRIC_ASSIGN_OR_RETURN(o.format, ParseFormat(v));
    } else {
      return Usage(absl::StrCat("check: unknown argument '", f.name, "'"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseBench(ArgCursor& c, BenchOptions& o) {
  bool have_listen = false, have_connect = false;
  while (!c.Done()) {
    Flag f = c.Next();
    if (f.name == "--listen") {
      have_listen = true;
      o.role = BenchOptions::Role::kListen;
      o.peer = HostPort{"", kDefaultBenchPort};
      if (auto v = c.OptionalValue(f)) {
        FABRIC_ASSIGN_OR_RETURN(o.peer, ParseHostPort(*v, /*allow_no_host=*/true));
      }
    } else if (f.name == "--connect") {
      have_connect = true;
      o.role = BenchOptions::Role::kConnect;
      FABRIC_ASSIGN_OR_RETURN(std::string v, c.Value(f));
      FABRIC_ASSIGN_OR_RETURN(o.peer, ParseHostPort(v, /*allow_no_host=*/false));
    } else if (f.name == "--provider") {
      FABRIC_ASSIGN_OR_RETURN(o.provider, c.Value(f));
      if (o.provider.empty()) return Usage("--provider: empty name");
    } else if (f.name == "--domain") {
      FABRIC_ASSIGN_OR_RETURN(o.domain, c.Value(f));
    } else if (f.name == "--size") {
      FABRIC_ASSIGN_OR_RETURN(std::string v, c.Value(f));
      FABRIC_ASSIGN_OR_RETURN(o.size, ParseByteSize(v));
      if (o.size == 0) return Usage("--size: must be > 0");
    } else if (f.name == "--batch") {
      FABRIC_ASSIGN_OR_RETURN(std::string v, c.Value(f));
      FABRIC_ASSIGN_OR_RETURN(o.batch, ParsePositive(f.name, v, 4096));
    } else if (f.name == "--threads") {
      FABRIC_ASSIGN_OR_RETURN(std::string v, c.Value(f));
      FABRIC_ASSIGN_OR_RETURN(o.threads, ParsePositive(f.name, v, 256));
    } else if (f.name == "--duration") {
      FABRIC_ASSIGN_OR_RETURN(std::string v, c.Value(f));
      FABRIC_ASSIGN_OR_RETURN(o.duration_s, ParseSeconds(v));
    } else if (f.name == "--quiet" || f.name == "-q") {
      o.progress = false;
    } else if (f.name == "-o" || f.name == "--output") {
      FABRIC_ASSIGN_OR_RETURN(std::string v, c.Value(f));
      FABRIC_ASSIGN_OR_RETURN(o.format, ParseFormat(v));
    } else {
      return Usage(absl::StrCat("bench: unknown argument '", f.name, "'"));
    }
  }
  if (have_listen && have_connect) return Usage("bench: --listen and --connect exclude each other");
  // Registered buffers are size bytes per endpoint and side; cap so a typo
  // ("--size 1t") fails here rather than in malloc or memory registration.
  if (o.size > 16ull * 1024 * kMiB) return Usage("--size: at most 16 GiB");
  return absl::OkStatus();
}

absl::Status ParseDevices(ArgCursor& c, DevicesOptions& o) {
  while (!c.Done()) {
    Flag f = c.Next();
    if (f.name == "--dev-root") {
      FABRIC_ASSIGN_OR_RETURN(o.dev_root, c.Value(f));
    } else if (f.name == "--sysfs-root") {
      FABRIC_ASSIGN_OR_RETURN(o.sysfs_root, c.Value(f));
    } else if (f.name == "--config") {
      FABRIC_ASSIGN_OR_RETURN(o.config_path, c.Value(f));
    } else if (f.name == "--agent") {
      FABRIC_ASSIGN_OR_RETURN(o.agent, c.Value(f));
      if (o.agent.find("://") == std::string::npos) o.agent = "http://" + o.agent;
    } else if (f.name == "-o" || f.name == "--output") {
      FABRIC_ASSIGN_OR_RETURN(std::string v, c.Value(f));
      FABRIC_ASSIGN_OR_RETURN(o.format, ParseFormat(v));
    } else {
      return Usage(absl::StrCat("devices: unknown argument '", f.name, "'"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseDoctor(ArgCursor& c, DoctorOptions& o) {
  while (!c.Done()) {
    Flag f = c.Next();
    if (f.name == "--agent") {
      FABRIC_ASSIGN_OR_RETURN(o.agent, c.Value(f));
      if (o.agent.find("://") == std::string::npos) o.agent = "http://" + o.agent;
    } else if (f.name == "--bench") {
      FABRIC_ASSIGN_OR_RETURN(o.bench_peer, c.Value(f));
    } else if (f.name == "--provider") {
      FABRIC_ASSIGN_OR_RETURN(o.provider, c.Value(f));
    } else if (f.name == "--duration") {
      FABRIC_ASSIGN_OR_RETURN(std::string v, c.Value(f));
      FABRIC_ASSIGN_OR_RETURN(o.duration_s, ParseSeconds(v));
    } else if (f.name == "-o" || f.name == "--output") {
      FABRIC_ASSIGN_OR_RETURN(std::string v, c.Value(f));
      FABRIC_ASSIGN_OR_RETURN(o.format, ParseFormat(v));
    } else {
      return Usage(absl::StrCat("doctor: unknown argument '", f.name, "'"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseObserve(ArgCursor& c, ObserveOptions& o) {
  while (!c.Done()) {
    Flag f = c.Next();
    if (f.name == "--agent") {
      FABRIC_ASSIGN_OR_RETURN(o.agent, c.Value(f));
      if (o.agent.empty()) return Usage("--agent: empty address");
      if (o.agent.find("://") == std::string::npos) o.agent = "http://" + o.agent;
      o.agent_given = true;
    } else if (f.name == "--pod") {
      FABRIC_ASSIGN_OR_RETURN(std::string v, c.Value(f));
      const size_t slash = v.find('/');
      if (slash == std::string::npos || slash == 0 || slash + 1 == v.size() ||
          v.find('/', slash + 1) != std::string::npos) {
        return Usage(absl::StrCat("--pod: expected NAMESPACE/NAME, got '", v, "'"));
      }
      o.pod_namespace = v.substr(0, slash);
      o.pod_name = v.substr(slash + 1);
    } else if (f.name == "--window") {
      FABRIC_ASSIGN_OR_RETURN(o.window, c.Value(f));
      // The agent checks the range (15s..10m); only URL-safe text goes out.
      if (o.window.empty() || o.window.find_first_not_of("0123456789hms") != std::string::npos) {
        return Usage(absl::StrCat("--window: expected a duration such as 60s, 2m or 1m30s, got '",
                                  o.window, "'"));
      }
    } else if (f.name == "--ca-file") {
      FABRIC_ASSIGN_OR_RETURN(o.ca_file, c.Value(f));
    } else if (f.name == "--server-name") {
      FABRIC_ASSIGN_OR_RETURN(o.server_name, c.Value(f));
    } else if (f.name == "--token-file") {
      FABRIC_ASSIGN_OR_RETURN(o.token_file, c.Value(f));
    } else if (f.name == "--insecure-skip-tls-verify") {
      o.insecure = true;
    } else if (f.name == "--expect") {
      FABRIC_ASSIGN_OR_RETURN(o.expect, c.Value(f));
      if (o.expect != "efa" && o.expect != "rdma") {
        return Usage(absl::StrCat("--expect: expected efa or rdma, got '", o.expect, "'"));
      }
    } else if (f.name == "-o" || f.name == "--output") {
      FABRIC_ASSIGN_OR_RETURN(std::string v, c.Value(f));
      FABRIC_ASSIGN_OR_RETURN(o.format, ParseFormat(v));
    } else {
      return Usage(absl::StrCat("observe: unknown argument '", f.name, "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

void ApplyObserveEnvironment(ObserveOptions& o, const char* (*getenv)(const char*)) {
  auto env = [&](const char* name) -> std::string {
    const char* v = getenv(name);
    return v != nullptr ? v : "";
  };
  if (o.ca_file.empty()) o.ca_file = env("FABRIC_AGENT_CA_FILE");
  if (o.server_name.empty()) o.server_name = env("FABRIC_AGENT_SERVER_NAME");
  if (!o.agent_given) {
    const std::string ip = env("HOST_IP");
    if (!ip.empty()) {
      const bool tls = !o.ca_file.empty() || o.insecure;
      const std::string host = ip.find(':') != std::string::npos ? fmt::format("[{}]", ip) : ip;
      o.agent = tls ? fmt::format("https://{}:{}", host, kDefaultAgentTlsPort)
                    : fmt::format("http://{}:{}", host, kDefaultAgentPort);
    }
  }
  if (o.pod_name.empty()) {
    const char* ns = getenv("POD_NAMESPACE");
    const char* name = getenv("POD_NAME");
    if (ns != nullptr && name != nullptr && *ns != '\0' && *name != '\0') {
      o.pod_namespace = ns;
      o.pod_name = name;
    }
  }
}

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text) {
  std::string s = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  size_t digits = 0;
  while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits]))) ++digits;
  uint64_t n = 0;
  if (digits == 0 || !absl::SimpleAtoi(absl::string_view(s).substr(0, digits), &n)) {
    return Usage(absl::StrCat("bad size '", std::string(text), "' (examples: 4096, 4k, 1m, 2g)"));
  }
  std::string suffix = s.substr(digits);
  uint64_t mult = 1;
  if (suffix.empty() || suffix == "b") {
    mult = 1;
  } else if (suffix == "k" || suffix == "kb" || suffix == "kib") {
    mult = 1ull << 10;
  } else if (suffix == "m" || suffix == "mb" || suffix == "mib") {
    mult = 1ull << 20;
  } else if (suffix == "g" || suffix == "gb" || suffix == "gib") {
    mult = 1ull << 30;
  } else {
    return Usage(absl::StrCat("bad size suffix in '", std::string(text), "' (k, m, g)"));
  }
  if (n > std::numeric_limits<uint64_t>::max() / mult) {
    return Usage(absl::StrCat("size '", std::string(text), "' overflows"));
  }
  return n * mult;
}

absl::StatusOr<double> ParseSeconds(absl::string_view text) {
  std::string s = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  double scale = 1;
  if (s.size() > 2 && s.substr(s.size() - 2) == "ms") {
    scale = 1e-3;
    s.resize(s.size() - 2);
  } else if (s.size() > 1 && s.back() == 's') {
    s.pop_back();
  }
  double v = 0;
  if (!absl::SimpleAtod(s, &v) || !std::isfinite(v) || v <= 0) {
    return Usage(absl::StrCat("bad duration '", std::string(text), "' (examples: 5, 2.5s, 500ms)"));
  }
  return v * scale;
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  double v = static_cast<double>(bytes);
  uint64_t exact = bytes;
  while (unit < 4 && v >= 1024) {
    v /= 1024;
    ++unit;
  }
  for (int i = 0; i < unit; ++i) {
    if (exact % 1024 != 0) return fmt::format("{:.1f} {}", v, kUnits[unit]);
    exact /= 1024;
  }
  return fmt::format("{} {}", exact, kUnits[unit]);
}

absl::StatusOr<HostPort> ParseHostPort(absl::string_view text_in, bool allow_no_host) {
  std::string text(text_in);
  HostPort hp;
  std::string port;
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return Usage(absl::StrCat("bad address '", text, "' (expected [IPv6]:PORT)"));
    }
    hp.host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string::npos) {
      if (!allow_no_host)
        return Usage(absl::StrCat("bad address '", text, "' (expected ADDR:PORT)"));
      port = text;
    } else {
      if (text.find(':') != colon) {
        return Usage(absl::StrCat("bad address '", text, "' (write IPv6 as [ADDR]:PORT)"));
      }
      hp.host = text.substr(0, colon);
      port = text.substr(colon + 1);
    }
  }
  if (hp.host.empty() && !allow_no_host) {
    return Usage(absl::StrCat("bad address '", text, "': host missing"));
  }
  uint32_t p = 0;
  if (!absl::SimpleAtoi(port, &p) || p == 0 || p > 65535) {
    return Usage(absl::StrCat("bad port in '", text, "'"));
  }
  hp.port = static_cast<uint16_t>(p);
  return hp;
}

absl::StatusOr<Command> ParseCommandLine(const std::vector<std::string>& args) {
  Command cmd;
  HostPaths defaults = HostPaths::Defaults();
  cmd.check.dev_root = cmd.devices.dev_root = defaults.dev_root;
  cmd.check.sysfs_root = cmd.devices.sysfs_root = defaults.sysfs_root;
  if (args.empty()) {
    return Usage("missing command (check, bench, devices, doctor, observe); see --help");
  }
  const std::string& sub = args[0];
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") return cmd;  // kHelp
  }
  ArgCursor cursor(args, 1);
  if (sub == "help") return cmd;
  if (sub == "check") {
    cmd.kind = Command::Kind::kCheck;
    if (auto s = ParseCheck(cursor, cmd.check); !s.ok()) return s;
  } else if (sub == "bench") {
    cmd.kind = Command::Kind::kBench;
    if (auto s = ParseBench(cursor, cmd.bench); !s.ok()) return s;
  } else if (sub == "devices") {
    cmd.kind = Command::Kind::kDevices;
    if (auto s = ParseDevices(cursor, cmd.devices); !s.ok()) return s;
  } else if (sub == "doctor") {
    cmd.kind = Command::Kind::kDoctor;
    if (auto s = ParseDoctor(cursor, cmd.doctor); !s.ok()) return s;
  } else if (sub == "observe") {
    cmd.kind = Command::Kind::kObserve;
    if (auto s = ParseObserve(cursor, cmd.observe); !s.ok()) return s;
  } else {
    return Usage(
        absl::StrCat("unknown command '", sub, "' (check, bench, devices, doctor, observe)"));
  }
  return cmd;
}

std::string UsageText() {
  return R"(fabricctl: operator's CLI for EFA/RDMA nodes and pods.

Usage:
  fabricctl check   [--dev-root DIR] [--sysfs-root DIR] [--provider NAME]
                    [--mr-size SIZE] [--wait D] [-o json]
      Run inside a Pod: which fabric device nodes are visible under DIR/infiniband
      (uverbs*, rdma_cm, umad*, issm*), which open(O_RDWR) and with which errno,
      RLIMIT_MEMLOCK, which libfabric providers answer on which domains, and for
      each verbs device what an engine does, through libibverbs (loaded at run
      time; without it stage 1 fails with verbs-unavailable):
        1 open      open(2) for the real errno, then ibv_open_device
        2 port      ibv_query_port: state, link layer, active MTU
        3 gid       the GID table; the RoCE v2 IPv4 index against MC_GID_INDEX
                    and NCCL_IB_GID_INDEX when they are set
        4 mr        ibv_alloc_pd + ibv_reg_mr of --mr-size (RLIMIT_MEMLOCK printed)
        5 qp        ibv_create_cq + a QP: RC (IB, RoCE), SRD through efadv (EFA)
        6 loopback  RC: a second QP on the same port, an RDMA write and a send
      Stages 2-6 run only for --dev-root /dev (libibverbs opens /dev/infiniband).
      issm* nodes are listed but never opened (opening one claims the SM role).
      --mr-size       stage 4's registration (default 64m; --min-memlock is the
                      older name); where no device reaches stage 4, a soft
                      memlock limit below it fails unless unlimited or
                      CAP_IPC_LOCK is held.
      --provider      the provider the application needs (e.g. efa).
      --wait D        retry once a second until the verdict is ok or D passed
                      (30s, 2m, 1m30s): for an init container.
      Verdicts, in precedence order (the first that applies wins):
        not-granted        uverbs/rdma_cm visible but open() -> EPERM/EACCES (stage 1)
        open-failed        uverbs/rdma_cm visible but open() fails otherwise (stage 1)
        no-devices         no infiniband/uverbs* node
        verbs-unavailable  libibverbs cannot load, or does not list a device (stage 1)
        port-down          a port is not ACTIVE (stage 2)
        gid-mismatch       MC_GID_INDEX/NCCL_IB_GID_INDEX is not the RoCE v2 IPv4 GID (stage 3)
        memlock-too-low    ibv_reg_mr -> ENOMEM (stage 4), or soft limit < --mr-size
        mr-failed          ibv_reg_mr fails otherwise (stage 4)
        qp-failed          the CQ or QP cannot be created (stage 5)
        loopback-failed    the RC loopback transfer fails (stage 6)
        provider-missing   --provider given and libfabric does not offer it
        ok

  fabricctl bench   [--listen [ADDR:]PORT | --connect ADDR:PORT] [--provider NAME]
                    [--domain NAME] [--size SIZE] [--batch N] [--threads N]
                    [--duration SECS] [--quiet] [-o json]
      libfabric FI_EP_RDM RMA bandwidth, fi_writemsg then fi_read, between two
      processes. Without --listen/--connect both ends run on this host (a forked
      server). The server takes size/batch/threads from the client and must be
      started with the same --provider. Defaults: --provider tcp, --size 1m,
      --batch 16, --threads 1, --duration 5 (per operation), port 18515.
      The provider is the core name before ';' ("tcp" opens as "tcp;ofi_rxm");
      if libfabric opens any other provider than requested, no numbers are
      reported (exit 8). GB/s = 1e9 bytes per second.

  fabricctl devices [--sysfs-root DIR] [--dev-root DIR] [--config FILE] [--agent URL] [-o json]
      The node's EFA/RDMA devices (agent discovery) and the pools they serve;
      with --agent, also how that agent serves them (registration; in DRA mode
      its ResourceSlices, claims and prepares, from /v1/node).

  fabricctl doctor  [--agent URL] [-o json]
  fabricctl doctor  --bench PEER[:PORT] [--provider NAME] [--duration SECS] [--agent URL]
      The fabric doctor's matrix from the local agent's /v1/peers (default
      --agent http://127.0.0.1:9435; the agent runs with --doctor): per pair of
      local device and peer device whether fabric probes and the peer's control
      channel answer, the last RTT and error, a verdict and the likely cause:
        ok                  every probed pair answers
        fabric-unreachable  control answers, fabric does not: security group,
                            placement group/spine, or routing of the fabric
        peer-down           neither answers: node, agent or link down
        no-peers            the peer list holds no other node
      -o json prints {"verdict", "pairs": [{"peer_node", "local_device",
      "peer_device", "provider", "reachable", "control_reachable",
      "rtt_seconds", "last_error"}]}.
      --bench runs `fabricctl bench --connect PEER` (1 MiB write/read) over the
      provider the doctor probes with (or --provider) against the peer's
      `fabricctl bench --listen`; provider line first, refuses a mismatch (exit 8).

  fabricctl observe [--pod NS/NAME] [--agent URL] [--window D] [--expect efa|rdma] [-o json]
                    [--ca-file F] [--server-name N] [--token-file F] [--insecure-skip-tls-verify]
      The transport each container really used (the agent's /v1/pods; the agent
      runs with --observe): efa, rdma, tcp, idle or unknown, with attribution and
      byte counts, one line per container. --pod defaults to
      $POD_NAMESPACE/$POD_NAME when both are set; without a Pod, every Pod on the
      node (exit code of the worst). --agent defaults, when HOST_IP is set
      (downward API status.hostIP: a Pod checks itself), to https://$HOST_IP:9437
      with a CA file (--ca-file or $FABRIC_AGENT_CA_FILE) and to
      http://$HOST_IP:9435 without (the agent answers that only on loopback),
      else http://127.0.0.1:9435. Over https it sends the Pod's projected token
      for the agent's audience (/var/run/secrets/fabric.gpustack.ai/pods-api/token),
      else its ServiceAccount token (or --token-file), and checks the agent's certificate against the CA
      and the name (--server-name or $FABRIC_AGENT_SERVER_NAME; default the host). --window 15s..10m (default 60s). --expect:
      the fabric the workload must use. -o json prints the agent's document
      (PodTransport, or PodTransportList without a Pod). Worst first: 20, 23,
      22, 21, 0.

SIZE accepts 4096, 4k, 1m, 2g (binary multiples).

Exit codes:
  0  ok
  1  runtime error
  2  usage error
  3  check: not-granted
  4  check: open-failed
  5  check: no-devices
  6  check/bench: provider-missing (bench: requested provider not available)
  7  check: memlock-too-low (stage 4, or the limit where stage 4 did not run)
  8  bench: opened provider differs from the requested one (fallback refused)
  30 check: verbs-unavailable (stage 1)
  31 check: port-down (stage 2)
  32 check: gid-mismatch (stage 3)
  33 check: mr-failed (stage 4; memlock is 7)
  34 check: qp-failed (stage 5)
  35 check: loopback-failed (stage 6)
  10 doctor: fabric-unreachable
  11 doctor: peer-down
  12 doctor: no-peers
  13 doctor: not-probed
  20 observe: tcp where a fabric was granted or expected (a fallback)
  21 observe: idle (fabric and other bytes under the floor)
  22 observe: unknown (see the reason), or the Pod is not observed
  23 observe: a fabric other than --expect
  (observe: 1 when the agent cannot be reached or serves no /v1/pods)
)";
}

}  // namespace fabric::fabricctl
