#include "tools/fabricctl/check_verdict.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <map>
#include <optional>

namespace fabric::fabricctl {
namespace {

// uverbs is what every verbs/EFA application opens; rdma_cm is what the
// libfabric verbs provider and librdmacm users open. umad is root-only (0600)
// on stock hosts and used only by MAD tools, and issm is never opened, so
// neither can make the Pod "not granted".
bool CountsForAccess(NodeKind k) { return k == NodeKind::kUverbs || k == NodeKind::kRdmaCm; }

bool IsPermissionErrno(int e) { return e == EPERM || e == EACCES; }

std::string JoinPaths(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::string FormatLimit(const std::optional<uint64_t>& v) {
  return v ? FormatBytes(*v) : "unlimited";
}

}  // namespace

std::string NodeKindName(NodeKind k) {
  switch (k) {
    case NodeKind::kUverbs:
      return "uverbs";
    case NodeKind::kRdmaCm:
      return "rdma_cm";
    case NodeKind::kUmad:
      return "umad";
    case NodeKind::kIssm:
      return "issm";
  }
  return "?";
}

std::string VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kOk:
      return "ok";
    case Verdict::kNotGranted:
      return "not-granted";
    case Verdict::kOpenFailed:
      return "open-failed";
    case Verdict::kNoDevices:
      return "no-devices";
    case Verdict::kProviderMissing:
      return "provider-missing";
    case Verdict::kMemlockTooLow:
      return "memlock-too-low";
    case Verdict::kVerbsUnavailable:
      return "verbs-unavailable";
    case Verdict::kPortDown:
      return "port-down";
    case Verdict::kGidMismatch:
      return "gid-mismatch";
    case Verdict::kMrFailed:
      return "mr-failed";
    case Verdict::kQpFailed:
      return "qp-failed";
    case Verdict::kLoopbackFailed:
      return "loopback-failed";
  }
  return "?";
}

int VerdictExitCode(Verdict v) {
  switch (v) {
    case Verdict::kOk:
      return kExitOk;
    case Verdict::kNotGranted:
      return kExitNotGranted;
    case Verdict::kOpenFailed:
      return kExitOpenFailed;
    case Verdict::kNoDevices:
      return kExitNoDevices;
    case Verdict::kProviderMissing:
      return kExitProviderMissing;
    case Verdict::kMemlockTooLow:
      return kExitMemlockTooLow;
    case Verdict::kVerbsUnavailable:
      return kExitVerbsUnavailable;
    case Verdict::kPortDown:
      return kExitPortDown;
    case Verdict::kGidMismatch:
      return kExitGidMismatch;
    case Verdict::kMrFailed:
      return kExitMrFailed;
    case Verdict::kQpFailed:
      return kExitQpFailed;
    case Verdict::kLoopbackFailed:
      return kExitLoopbackFailed;
  }
  return kExitError;
}

std::string CoreProviderName(const std::string& provider) {
  return provider.substr(0, provider.find(';'));
}

bool ProviderSatisfies(const std::string& requested, const std::string& offered) {
  return offered == requested || CoreProviderName(offered) == requested;
}

// Precedence, most important first:
//  1. not-granted: the node is listed (libibverbs stat()s it, so the device
//     shows up) but open() is denied. libfabric's EFA provider then drops ALL
//     devices and NCCL/aws-ofi-nccl silently falls back to TCP sockets: the
//     costly, invisible failure. It is also the root cause of any
//     provider-missing on the same Pod, so reporting that instead would send
//     the operator to the wrong fix.
//  2. open-failed: same silent effect, other cause (driver gone: ENXIO/ENODEV).
//  3. no-devices: nothing was granted at all; a missing provider follows from
//     it, and memlock is moot.
//  4. The stages of each device, in stage order (an engine meets them in that
//     order): verbs-unavailable (1), port-down (2), gid-mismatch (3),
//     memlock-too-low and mr-failed (4), qp-failed (5), loopback-failed (6).
//     A missing provider usually follows from one of them.
//  5. provider-missing: devices open, yet the provider the app needs is absent
//     (the app would pick tcp and run slowly without an error).
//  6. memlock-too-low from the limit alone, where no device reached stage 4:
//     the soft RLIMIT_MEMLOCK below --mr-size. Last because it fails loudly
//     (ENOMEM from memory registration), not silently, and is fixed per Pod.
namespace {

// Node-wide findings first, then stage findings in stage order, then the
// provider, then the memlock floor that stands in for stage 4.
int Rank(const Finding& f) {
  static const Verdict kStageOrder[] = {
      Verdict::kNotGranted, Verdict::kOpenFailed,  Verdict::kVerbsUnavailable,
      Verdict::kPortDown,   Verdict::kGidMismatch, Verdict::kMemlockTooLow,
      Verdict::kMrFailed,   Verdict::kQpFailed,    Verdict::kLoopbackFailed};
  if (f.stage > 0) {
    for (size_t i = 0; i < std::size(kStageOrder); ++i) {
      if (kStageOrder[i] == f.verdict) return 10 + static_cast<int>(i);
    }
  }
  switch (f.verdict) {
    case Verdict::kNotGranted:
      return 0;
    case Verdict::kOpenFailed:
      return 1;
    case Verdict::kNoDevices:
      return 2;
    case Verdict::kProviderMissing:
      return 30;
    default:
      return 31;  // the memlock floor
  }
}

// The verdict of a failed stage; nullopt where a node-wide finding already
// says it (stage 1's open(2) errno).
std::optional<Verdict> StageVerdict(const FabricDeviceFacts& d, const StageView& s) {
  switch (s.number) {
    case 1:
      if (d.verbs_missing) return Verdict::kVerbsUnavailable;
      if (d.open.detail.rfind("open(", 0) == 0) return std::nullopt;  // the node finding
      return Verdict::kOpenFailed;
    case 2:
      return Verdict::kPortDown;
    case 3:
      return Verdict::kGidMismatch;
    case 4:
      return IsMemlockErrno(s.err) ? Verdict::kMemlockTooLow : Verdict::kMrFailed;
    case 5:
      return Verdict::kQpFailed;
    default:
      return Verdict::kLoopbackFailed;
  }
}

}  // namespace

MemlockText MemlockTextOf(const MemlockFacts& m) {
  return MemlockText{FormatLimit(m.soft), FormatLimit(m.hard), m.cap_ipc_lock};
}

CheckReport Decide(const CheckFacts& facts, const CheckPolicy& policy) {
  CheckReport r;
  std::vector<std::string> denied, failed;
  int uverbs = 0;
  for (const DeviceNodeFacts& n : facts.nodes) {
    if (n.kind == NodeKind::kUverbs) ++uverbs;
    if (!CountsForAccess(n.kind) || !n.probed || n.open_errno == 0) continue;
    std::string what = fmt::format("{} ({})", n.rel_path,
                                   strerrorname_np(n.open_errno) ? strerrorname_np(n.open_errno)
                                                                 : std::to_string(n.open_errno));
    (IsPermissionErrno(n.open_errno) ? denied : failed).push_back(what);
  }
  if (!denied.empty()) {
    r.findings.push_back(
        {Verdict::kNotGranted,
         fmt::format("visible but open() denied: {}; libfabric efa drops every device and apps "
                     "fall back to TCP; grant these nodes (device plugin) or remove them from "
                     "the Pod (no hostPath /dev/infiniband)",
                     JoinPaths(denied))});
  }
  if (!failed.empty()) {
    r.findings.push_back(
        {Verdict::kOpenFailed,
         fmt::format("visible but open() fails: {}; stale node or driver not loaded on the host",
                     JoinPaths(failed))});
  }
  if (uverbs == 0) {
    r.findings.push_back(
        {Verdict::kNoDevices,
         fmt::format("no {}/infiniband/uverbs* node; request an EFA/RDMA resource in the Pod spec",
                     facts.dev_root)});
  }
  const MemlockText memlock = MemlockTextOf(facts.memlock);
  bool reached_mr = false;
  int passed = 0;
  for (const FabricDeviceFacts& d : facts.fabric) {
    reached_mr = reached_mr || d.mr.status != StageStatus::kSkipped;
    bool all_ok = true;
    for (const StageView& s : StagesOf(d, facts.gid_env, memlock)) {
      if (s.status != StageStatus::kFailed) continue;
      all_ok = false;
      if (std::optional<Verdict> v = StageVerdict(d, s)) {
        r.findings.push_back(
            {*v,
             fmt::format("{} stage {} ({}): {}", d.ibdev.empty() ? d.node : d.ibdev, s.number,
                         s.name, s.message),
             d.ibdev, s.number});
      }
    }
    passed += all_ok ? 1 : 0;
  }
  if (policy.required_provider) {
    bool found = false;
    for (const ProviderFacts& p : facts.providers) {
      found = found || ProviderSatisfies(*policy.required_provider, p.provider);
    }
    if (!found) {
      r.findings.push_back(
          {Verdict::kProviderMissing,
           fmt::format("libfabric offers no '{}' provider{}; an application would fall back to "
                       "tcp",
                       *policy.required_provider,
                       facts.provider_error.empty() ? "" : " (" + facts.provider_error + ")")});
    }
  }
  const MemlockFacts& m = facts.memlock;
  if (!reached_mr && !m.cap_ipc_lock && m.soft && *m.soft < policy.mr_size) {
    std::string fix = (!m.hard || *m.hard >= policy.mr_size)
                          ? "raise it with setrlimit/ulimit -l (the hard limit allows it)"
                          : "set memlock unlimited in the container runtime or grant IPC_LOCK";
    r.findings.push_back(
        {Verdict::kMemlockTooLow,
         fmt::format("RLIMIT_MEMLOCK soft {} (hard {}) < {} needed to register "
                     "buffers; {}",
                     FormatBytes(*m.soft), FormatLimit(m.hard), FormatBytes(policy.mr_size), fix)});
  }
  std::stable_sort(r.findings.begin(), r.findings.end(),
                   [](const Finding& a, const Finding& b) { return Rank(a) < Rank(b); });
  if (r.findings.empty()) {
    r.verdict = Verdict::kOk;
    r.summary = fmt::format("ok: {} uverbs node(s) open{}, memlock {}{}", uverbs,
                            facts.fabric.empty() || !facts.fabric_skipped.empty()
                                ? ""
                                : fmt::format(", no stage fails on {} device(s)", passed),
                            m.cap_ipc_lock ? "ignored (CAP_IPC_LOCK)" : FormatLimit(m.soft),
                            policy.required_provider
                                ? fmt::format(", provider {} present", *policy.required_provider)
                                : "");
  } else {
    r.verdict = r.findings.front().verdict;
    r.summary = VerdictName(r.verdict) + ": " + r.findings.front().message;
  }
  return r;
}

nlohmann::ordered_json CheckReportToJson(const CheckFacts& facts, const CheckPolicy& policy,
                                         const CheckReport& report) {
  using json = nlohmann::ordered_json;
  json devices = json::array();
  for (const DeviceNodeFacts& n : facts.nodes) {
    json d = {{"path", n.path},
              {"name", n.rel_path},
              {"kind", NodeKindName(n.kind)},
              {"char_device", n.is_char_device},
              {"major", n.is_char_device ? json(n.major) : json(nullptr)},
              {"minor", n.is_char_device ? json(n.minor) : json(nullptr)},
              {"ibdev", n.ibdev.empty() ? json(nullptr) : json(n.ibdev)},
              {"probed", n.probed},
              {"open", !n.probed ? "skipped" : (n.open_errno == 0 ? "ok" : "failed")},
              {"errno", n.open_errno},
              {"error", ErrnoString(n.open_errno)}};
    if (n.sysfs_dev) {
      d["sysfs_dev"] = fmt::format("{}:{}", n.sysfs_dev->first, n.sysfs_dev->second);
    }
    devices.push_back(std::move(d));
  }
  json providers = json::array();
  for (const ProviderFacts& p : facts.providers) {
    providers.push_back({{"provider", p.provider},
                         {"core", CoreProviderName(p.provider)},
                         {"fabric", p.fabric},
                         {"domain", p.domain}});
  }
  json findings = json::array();
  for (const Finding& f : report.findings) {
    findings.push_back({{"verdict", VerdictName(f.verdict)}, {"message", f.message}});
  }
  auto limit = [](const std::optional<uint64_t>& v) { return v ? json(*v) : json(nullptr); };
  json fabric = json::array();
  for (const FabricDeviceFacts& d : facts.fabric) {
    fabric.push_back(FabricDeviceJson(d, facts.gid_env, MemlockTextOf(facts.memlock)));
  }
  auto env = [](const std::optional<std::string>& v) { return v ? json(*v) : json(nullptr); };
  return json{
      {"verdict", VerdictName(report.verdict)},
      {"exit_code", VerdictExitCode(report.verdict)},
      {"summary", report.summary},
      {"findings", findings},
      {"dev_root", facts.dev_root},
      {"devices", devices},
      {"memlock",
       {{"soft_bytes", limit(facts.memlock.soft)},
        {"hard_bytes", limit(facts.memlock.hard)},
        {"soft_unlimited", !facts.memlock.soft.has_value()},
        {"hard_unlimited", !facts.memlock.hard.has_value()},
        {"cap_ipc_lock", facts.memlock.cap_ipc_lock},
        {"min_bytes", policy.mr_size}}},
      {"mr_size_bytes", policy.mr_size},
      {"gid_env",
       {{"MC_GID_INDEX", env(facts.gid_env.mc_gid_index)},
        {"NCCL_IB_GID_INDEX", env(facts.gid_env.nccl_ib_gid_index)}}},
      {"fabric_skipped", facts.fabric_skipped},
      {"fabric", fabric},
      {"provider_requested",
       policy.required_provider ? json(*policy.required_provider) : json(nullptr)},
      {"provider_error", facts.provider_error},
      {"providers", providers},
  };
}

std::string CheckReportToText(const CheckFacts& facts, const CheckPolicy& policy,
                              const CheckReport& report) {
  std::string out = fmt::format("device nodes under {}/infiniband:\n", facts.dev_root);
  if (facts.nodes.empty()) out += "  (none)\n";
  for (const DeviceNodeFacts& n : facts.nodes) {
    std::string numbers = n.is_char_device ? fmt::format("{}:{}", n.major, n.minor) : "not-chr";
    std::string result = !n.probed           ? "not opened (opening issm claims the SM role)"
                         : n.open_errno == 0 ? "open ok"
                                             : "open FAILED " + ErrnoString(n.open_errno);
    std::string note;
    if (n.sysfs_dev && n.is_char_device &&
        (n.sysfs_dev->first != n.major || n.sysfs_dev->second != n.minor)) {
      note = fmt::format("  [sysfs says {}:{}: libibverbs will refuse this node]",
                         n.sysfs_dev->first, n.sysfs_dev->second);
    }
    out += fmt::format("  {:<22} {:<9} {:<12} {}{}\n", n.rel_path, numbers,
                       n.ibdev.empty() ? "-" : n.ibdev, result, note);
  }
  const MemlockFacts& m = facts.memlock;
  out +=
      fmt::format("memlock: soft {}, hard {}, CAP_IPC_LOCK {} (need >= {})\n", FormatLimit(m.soft),
                  FormatLimit(m.hard), m.cap_ipc_lock ? "yes" : "no", FormatBytes(policy.mr_size));
  out += FabricText(facts.fabric, facts.fabric_skipped, facts.gid_env, MemlockTextOf(m));
  // One line per provider: its domains, then fabrics, deduplicated.
  std::map<std::string, std::vector<std::string>> domains;
  std::vector<std::string> order;
  for (const ProviderFacts& p : facts.providers) {
    auto [it, inserted] = domains.try_emplace(p.provider);
    if (inserted) order.push_back(p.provider);
    bool seen = false;
    for (const auto& d : it->second) seen = seen || d == p.domain;
    if (!seen) it->second.push_back(p.domain);
  }
  out += "libfabric providers (provider: domains):\n";
  if (order.empty())
    out += "  (none" + (facts.provider_error.empty() ? "" : ": " + facts.provider_error) + ")\n";
  for (const auto& name : order) out += fmt::format("  {}: {}\n", name, JoinPaths(domains[name]));
  for (size_t i = 1; i < report.findings.size(); ++i) {
    out += fmt::format("also {}: {}\n", VerdictName(report.findings[i].verdict),
                       report.findings[i].message);
  }
  out += "verdict: " + report.summary + "\n";
  return out;
}

}  // namespace fabric::fabricctl
