#include "agent/doctor/report.h"

#include <fmt/format.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "agent/base/prometheus_text.h"

namespace fabric::doctor {
namespace {

// Label values through the one escaper every exposition writer uses.
std::string Escape(const std::string& v) { return PrometheusLabelValue(v); }

std::string PairLabels(const PairStatus& p) {
  return fmt::format(R"(peer_node="{}",local_device="{}",peer_device="{}",provider="{}")",
                     Escape(p.peer_node), Escape(p.local_device), Escape(p.peer_device),
                     Escape(p.provider));
}

std::string Num(double v) { return fmt::format("{:.9g}", v); }

}  // namespace

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kOk:
      return "ok";
    case Verdict::kFabricUnreachable:
      return "fabric-unreachable";
    case Verdict::kPeerDown:
      return "peer-down";
    case Verdict::kNoPeers:
      return "no-peers";
    case Verdict::kNotProbed:
      return "not-probed";
  }
  return "?";
}

absl::StatusOr<Verdict> ParseVerdict(const std::string& name) {
  for (Verdict v : {Verdict::kOk, Verdict::kFabricUnreachable, Verdict::kPeerDown,
                    Verdict::kNoPeers, Verdict::kNotProbed}) {
    if (name == VerdictName(v)) return v;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown verdict '", name, "'"));
}

const char* LikelyCause(Verdict v) {
  switch (v) {
    case Verdict::kOk:
      return "";
    case Verdict::kFabricUnreachable:
      return "control channel answers but fabric probes do not: security group not allowing "
             "all traffic to/from itself, nodes in different placement groups/spines, or a "
             "subnet that routes TCP but not the fabric";
    case Verdict::kPeerDown:
      return "neither the control channel nor the fabric answers: the peer node, its agent or "
             "its link is down, or it is unreachable over IP";
    case Verdict::kNoPeers:
      return "no other node in the peer list: check --doctor-peers (headless Service / file)";
    case Verdict::kNotProbed:
      return "some pairs were never probed (not a network verdict): the two nodes' providers "
             "differ, a local endpoint is not open, or the peer reports no usable probe "
             "endpoint; each pair's last_error says which";
  }
  return "";
}

Verdict PairVerdict(const PairStatus& p) {
  if (p.reachable) return Verdict::kOk;
  if (!p.not_probed.empty()) return Verdict::kNotProbed;
  if (p.control_reachable) return Verdict::kFabricUnreachable;
  return Verdict::kPeerDown;
}

Verdict OverallVerdict(const std::vector<PairStatus>& pairs, bool have_peers) {
  // Nothing judged yet (before the first round) is no evidence of health.
  if (!have_peers || pairs.empty()) return Verdict::kNoPeers;
  bool down = false, not_probed = false;
  for (const PairStatus& p : pairs) {
    Verdict v = PairVerdict(p);
    if (v == Verdict::kFabricUnreachable) return v;
    down = down || v == Verdict::kPeerDown;
    not_probed = not_probed || v == Verdict::kNotProbed;
  }
  if (down) return Verdict::kPeerDown;
  return not_probed ? Verdict::kNotProbed : Verdict::kOk;
}

const std::vector<double>& RttHistogram::Bounds() {
  static const std::vector<double> kBounds = {0.00005, 0.0001, 0.00025, 0.0005, 0.001,
                                              0.0025,  0.005,  0.01,    0.025,  0.05,
                                              0.1,     0.25,   0.5,     1,      2.5};
  return kBounds;
}

void RttHistogram::Observe(double seconds) {
  const auto& b = Bounds();
  auto it = std::lower_bound(b.begin(), b.end(), seconds);
  if (it != b.end()) ++counts_[static_cast<size_t>(it - b.begin())];
  ++count_;
  sum_ += seconds;
}

std::string RenderMetrics(const Report& r) {
  std::string out;
  out +=
      "# HELP fabric_peer_reachable 1 if the last fabric probe of this device pair came back.\n"
      "# TYPE fabric_peer_reachable gauge\n";
  for (const PairStatus& p : r.pairs) {
    out += fmt::format("fabric_peer_reachable{{{}}} {}\n", PairLabels(p), p.reachable ? 1 : 0);
  }
  out +=
      "# HELP fabric_peer_control_reachable 1 if the peer's doctor control channel answered "
      "the last query.\n# TYPE fabric_peer_control_reachable gauge\n";
  for (const PairStatus& p : r.pairs) {
    out += fmt::format("fabric_peer_control_reachable{{{}}} {}\n", PairLabels(p),
                       p.control_reachable ? 1 : 0);
  }
  out +=
      "# HELP fabric_peer_seconds_since_success Seconds since the last successful fabric probe "
      "of this pair (since the pair was first probed, if never).\n"
      "# TYPE fabric_peer_seconds_since_success gauge\n";
  for (const PairStatus& p : r.pairs) {
    double since =
        p.last_success_unix > 0 ? r.now_unix - p.last_success_unix : r.now_unix - p.last_probe_unix;
    out += fmt::format("fabric_peer_seconds_since_success{{{}}} {}\n", PairLabels(p),
                       Num(std::max(0.0, since)));
  }
  out +=
      "# HELP fabric_peer_not_probed 1 for a pair whose last round sent no fabric probe, with "
      "why (provider_mismatch, endpoint_closed, peer_has_no_device, bad_address); absent for "
      "probed pairs.\n# TYPE fabric_peer_not_probed gauge\n";
  for (const PairStatus& p : r.pairs) {
    if (p.reachable || p.not_probed.empty()) continue;
    out += fmt::format("fabric_peer_not_probed{{{},reason=\"{}\"}} 1\n", PairLabels(p),
                       Escape(p.not_probed));
  }
  out +=
      "# HELP fabric_peer_rtt_seconds Round trip of successful fabric probes.\n"
      "# TYPE fabric_peer_rtt_seconds histogram\n";
  for (const auto& [key, h] : r.rtt) {
    std::string labels =
        fmt::format(R"(local_device="{}",provider="{}")", Escape(key.first), Escape(key.second));
    uint64_t cumulative = 0;
    for (size_t i = 0; i < RttHistogram::Bounds().size(); ++i) {
      cumulative += h.counts()[i];
      out += fmt::format("fabric_peer_rtt_seconds_bucket{{{},le=\"{}\"}} {}\n", labels,
                         Num(RttHistogram::Bounds()[i]), cumulative);
    }
    out += fmt::format("fabric_peer_rtt_seconds_bucket{{{},le=\"+Inf\"}} {}\n", labels, h.count());
    out += fmt::format("fabric_peer_rtt_seconds_sum{{{}}} {}\n", labels, Num(h.sum()));
    out += fmt::format("fabric_peer_rtt_seconds_count{{{}}} {}\n", labels, h.count());
  }
  out +=
      "# HELP fabric_peer_probe_failures_total Failed probes and control queries by reason.\n"
      "# TYPE fabric_peer_probe_failures_total counter\n";
  for (const auto& [reason, n] : r.failures) {
    out += fmt::format("fabric_peer_probe_failures_total{{reason=\"{}\"}} {}\n", Escape(reason), n);
  }
  out +=
      "# HELP fabric_doctor_events_total Doctor events: probes sent, replies, garbage dropped, "
      "rate-limited replies, endpoint reopens.\n# TYPE fabric_doctor_events_total counter\n";
  for (const auto& [event, n] : r.counters) {
    out += fmt::format("fabric_doctor_events_total{{event=\"{}\"}} {}\n", Escape(event), n);
  }
  out +=
      "# HELP fabric_doctor_verdict 1 for the doctor's current overall verdict.\n"
      "# TYPE fabric_doctor_verdict gauge\n";
  Verdict overall = OverallVerdict(r.pairs, r.peers > 0);
  for (Verdict v : {Verdict::kOk, Verdict::kFabricUnreachable, Verdict::kPeerDown,
                    Verdict::kNoPeers, Verdict::kNotProbed}) {
    out += fmt::format("fabric_doctor_verdict{{verdict=\"{}\"}} {}\n", VerdictName(v),
                       v == overall ? 1 : 0);
  }
  return out;
}

nlohmann::ordered_json PairJson(const PairStatus& p) {
  return {{"peer_node", p.peer_node},
          {"local_device", p.local_device},
          {"peer_device", p.peer_device},
          {"provider", p.provider},
          {"reachable", p.reachable},
          {"control_reachable", p.control_reachable},
          {"rtt_seconds", p.rtt_seconds >= 0 ? nlohmann::ordered_json(p.rtt_seconds)
                                             : nlohmann::ordered_json(nullptr)},
          {"last_error", p.last_error},
          {"not_probed", p.not_probed}};
}

nlohmann::ordered_json RenderPeersJson(const Report& r) {
  nlohmann::ordered_json pairs = nlohmann::ordered_json::array();
  for (const PairStatus& p : r.pairs) {
    double since = p.last_success_unix > 0 ? r.now_unix - p.last_success_unix : -1;
    nlohmann::ordered_json pair = PairJson(p);
    pair["verdict"] = VerdictName(PairVerdict(p));
    pair["peer_address"] = p.peer_address;
    pair["seconds_since_success"] =
        since >= 0 ? nlohmann::ordered_json(since) : nlohmann::ordered_json(nullptr);
    pairs.push_back(std::move(pair));
  }
  nlohmann::ordered_json endpoints = nlohmann::ordered_json::array();
  for (const LocalEndpoint& e : r.endpoints) {
    endpoints.push_back({{"device", e.device},
                         {"provider", e.provider},
                         {"address", e.address},
                         {"error", e.error}});
  }
  nlohmann::ordered_json counters(r.counters);
  nlohmann::ordered_json failures(r.failures);
  return {{"verdict", VerdictName(OverallVerdict(r.pairs, r.peers > 0))},
          {"node", r.node},
          {"period_seconds", r.period_seconds},
          {"peers", r.peers},
          {"pairs", pairs},
          {"endpoints", endpoints},
          {"failures", failures},
          {"counters", counters}};
}

absl::StatusOr<PeersDocument> ParsePeersJson(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError("not a JSON object");
  PeersDocument doc;
  if (!j.contains("verdict") || !j["verdict"].is_string() || !j.contains("pairs") ||
      !j["pairs"].is_array()) {
    return absl::InvalidArgumentError("missing verdict or pairs");
  }
  auto v = ParseVerdict(j["verdict"].get<std::string>());
  if (!v.ok()) return v.status();
  doc.verdict = *v;
  doc.node = j.value("node", "");
  for (const auto& p : j["pairs"]) {
    if (!p.is_object()) return absl::InvalidArgumentError("pair is not an object");
    PairStatus s;
    s.peer_node = p.value("peer_node", "");
    s.local_device = p.value("local_device", "");
    s.peer_device = p.value("peer_device", "");
    s.provider = p.value("provider", "");
    s.reachable = p.value("reachable", false);
    s.control_reachable = p.value("control_reachable", false);
    s.rtt_seconds = p.contains("rtt_seconds") && p["rtt_seconds"].is_number()
                        ? p["rtt_seconds"].get<double>()
                        : -1;
    s.last_error = p.value("last_error", "");
    s.not_probed = p.value("not_probed", "");
    s.peer_address = p.value("peer_address", "");
    doc.pairs.push_back(std::move(s));
  }
  return doc;
}

}  // namespace fabric::doctor
