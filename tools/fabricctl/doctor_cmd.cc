#include "tools/fabricctl/doctor_cmd.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "agent/base/json_text.h"
#include "agent/http/get.h"
#include "tools/fabricctl/bench.h"

namespace fabric::fabricctl {

using doctor::PairStatus;
using doctor::PeersDocument;
using doctor::Verdict;

int DoctorExitCode(Verdict v) {
  switch (v) {
    case Verdict::kOk:
      return kExitOk;
    case Verdict::kFabricUnreachable:
      return kExitDoctorFabricUnreachable;
    case Verdict::kPeerDown:
      return kExitDoctorPeerDown;
    case Verdict::kNoPeers:
      return kExitDoctorNoPeers;
    case Verdict::kNotProbed:
      return kExitDoctorNotProbed;
  }
  return kExitError;
}

nlohmann::ordered_json DoctorJson(const PeersDocument& doc) {
  nlohmann::ordered_json pairs = nlohmann::ordered_json::array();
  for (const PairStatus& p : doc.pairs) pairs.push_back(doctor::PairJson(p));
  return {{"verdict", doctor::VerdictName(doc.verdict)}, {"pairs", pairs}};
}

std::string DoctorText(const PeersDocument& doc) {
  size_t failing = 0;
  std::set<Verdict> seen;
  for (const PairStatus& p : doc.pairs) {
    Verdict v = doctor::PairVerdict(p);
    if (v != Verdict::kOk) ++failing;
    seen.insert(v);
  }
  std::string out = fmt::format("doctor on {}: {} ({} of {} pair(s) failing)\n",
                                doc.node.empty() ? "?" : doc.node, doctor::VerdictName(doc.verdict),
                                failing, doc.pairs.size());
  if (!doc.pairs.empty()) {
    out += fmt::format("{:<20} {:<12} {:<12} {:<14} {:<7} {:<8} {:>10}  {:<18} {}\n", "PEER NODE",
                       "LOCAL", "PEER", "PROVIDER", "FABRIC", "CONTROL", "RTT", "VERDICT",
                       "LAST ERROR");
  }
  for (const PairStatus& p : doc.pairs) {
    out += fmt::format("{:<20} {:<12} {:<12} {:<14} {:<7} {:<8} {:>10}  {:<18} {}\n", p.peer_node,
                       p.local_device, p.peer_device.empty() ? "-" : p.peer_device, p.provider,
                       p.reachable ? "yes" : "NO", p.control_reachable ? "yes" : "NO",
                       p.rtt_seconds >= 0 ? fmt::format("{:.1f}us", p.rtt_seconds * 1e6) : "-",
                       doctor::VerdictName(doctor::PairVerdict(p)), p.last_error);
  }
  for (Verdict v : {Verdict::kFabricUnreachable, Verdict::kPeerDown, Verdict::kNotProbed}) {
    if (seen.count(v))
      out += fmt::format("likely cause ({}): {}\n", doctor::VerdictName(v), doctor::LikelyCause(v));
  }
  if (doc.verdict == Verdict::kNoPeers) {
    out += fmt::format("likely cause (no-peers): {}\n", doctor::LikelyCause(Verdict::kNoPeers));
  }
  return out;
}

namespace {

absl::StatusOr<std::string> FetchPeers(const std::string& agent) {
  auto res = HttpGet(agent, "/v1/peers");
  if (!res.ok()) return res.status();
  if (res->status == 404) {
    return absl::FailedPreconditionError(
        fmt::format("{} has no /v1/peers: the agent runs without --doctor", agent));
  }
  if (res->status != 200) {
    return absl::UnavailableError(fmt::format("{}/v1/peers: HTTP {}", agent, res->status));
  }
  return std::move(res->body);
}

int RunDoctorBench(const DoctorOptions& o) {
  BenchOptions b;
  b.role = BenchOptions::Role::kConnect;
  auto peer = ParseHostPort(o.bench_peer, /*allow_no_host=*/false);
  if (!peer.ok()) {
    // A bare host: the bench's default port.
    peer = HostPort{o.bench_peer, kDefaultBenchPort};
  }
  b.peer = *peer;
  b.size = kMiB;
  b.duration_s = o.duration_s;
  b.provider = o.provider;
  if (b.provider.empty()) {
    // The provider the doctor probes over: what the device really has.
    auto body = FetchPeers(o.agent);
    if (!body.ok()) {
      fmt::print(stderr, "fabricctl doctor --bench: {} (or give --provider)\n",
                 std::string(body.status().message()));
      return kExitError;
    }
    auto j = nlohmann::json::parse(*body, nullptr, false);
    if (!j.is_discarded() && j.contains("endpoints")) {
      for (const auto& e : j["endpoints"]) {
        std::string p = e.value("provider", "");
        if (!p.empty() && e.value("error", "").empty()) {
          b.provider = p.substr(0, p.find(';'));
          break;
        }
      }
    }
    if (b.provider.empty()) {
      fmt::print(stderr,
                 "fabricctl doctor --bench: the doctor has no open endpoint; give --provider\n");
      return kExitError;
    }
  }
  b.format = o.format;
  return RunBench(b);
}

}  // namespace

int RunDoctor(const DoctorOptions& o) {
  if (!o.bench_peer.empty()) return RunDoctorBench(o);
  auto body = FetchPeers(o.agent);
  if (!body.ok()) {
    fmt::print(stderr, "fabricctl doctor: {}\n", std::string(body.status().message()));
    return kExitError;
  }
  auto doc = doctor::ParsePeersJson(*body);
  if (!doc.ok()) {
    auto j = nlohmann::json::parse(*body, nullptr, false);
    std::string why = !j.is_discarded() && j.is_object() ? j.value("error", "") : "";
    fmt::print(
        stderr, "fabricctl doctor: {}\n",
        why.empty() ? "unexpected /v1/peers answer: " + std::string(doc.status().message()) : why);
    return kExitError;
  }
  if (o.format == OutputFormat::kJson) {
    fmt::print("{}\n", DumpJson(DoctorJson(*doc), 2));
  } else {
    fmt::print("{}", DoctorText(*doc));
  }
  return DoctorExitCode(doc->verdict);
}

}  // namespace fabric::fabricctl
