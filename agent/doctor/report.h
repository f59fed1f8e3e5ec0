// The doctor's view of its pairs, the verdict rules, and the two renderings of
// it: Prometheus text (appended to the agent's /metrics) and the /v1/peers
// JSON (read by `fabricctl doctor`). Pure functions; unit-tested.
#ifndef FABRIC_AGENT_DOCTOR_REPORT_H_
#define FABRIC_AGENT_DOCTOR_REPORT_H_

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace fabric::doctor {

enum class Verdict { kOk, kFabricUnreachable, kPeerDown, kNoPeers, kNotProbed };
// "ok", "fabric-unreachable", "peer-down", "no-peers", "not-probed"
const char* VerdictName(Verdict v);
absl::StatusOr<Verdict> ParseVerdict(const std::string& name);
// What to check for a failing verdict (one line); "" for ok.
const char* LikelyCause(Verdict v);

struct PairStatus {
  std::string peer_node;     // the peer's node name (its control address until it answered)
  std::string peer_address;  // control host:port
  std::string local_device;
  std::string peer_device;         // "" while the peer never answered on the control channel
  std::string provider;            // the local endpoint's provider
  bool reachable = false;          // the last fabric probe came back
  bool control_reachable = false;  // the last control query was answered
  double rtt_seconds = -1;         // of the last successful probe; -1 never
  std::string last_error;          // of the last failed probe or query; "" after a success
  double last_success_unix = 0;    // 0: never
  double last_probe_unix = 0;
  // Why no fabric probe was sent ("" when one was): provider_mismatch,
  // endpoint_closed (our endpoint is not open), peer_has_no_device,
  // bad_address (the peer's endpoint name does not fit our provider).
  std::string not_probed;
  bool operator==(const PairStatus&) const = default;
};

// reachable -> ok; not probed (not_probed set) -> not-probed; control
// answers but fabric not -> fabric-unreachable; both silent -> peer-down.
Verdict PairVerdict(const PairStatus& p);
// no-peers when there is no other node or no pair was probed yet; else the
// worst pair verdict: fabric-unreachable (it points at the network config,
// which breaks many pairs at once), then peer-down, then not-probed (a
// configuration fact of one pair, never security-group advice).
Verdict OverallVerdict(const std::vector<PairStatus>& pairs, bool have_peers);

class RttHistogram {
 public:
  static const std::vector<double>& Bounds();
  void Observe(double seconds);
  const std::vector<uint64_t>& counts() const { return counts_; }  // per bound, not cumulative
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<uint64_t> counts_ = std::vector<uint64_t>(Bounds().size(), 0);
  uint64_t count_ = 0;
  double sum_ = 0;
};

struct LocalEndpoint {
  std::string device;
  std::string provider;
  std::string address;  // fi_av_straddr of the endpoint name
  std::string error;    // why it is not open ("" when open)
};

struct Report {
  std::string node;
  double period_seconds = 0;
  double now_unix = 0;
  size_t peers = 0;  // other nodes in the peer list
  std::vector<LocalEndpoint> endpoints;
  std::vector<PairStatus> pairs;
  // (local_device, provider) -> RTT of successful probes
  std::map<std::pair<std::string, std::string>, RttHistogram> rtt;
  std::map<std::string, uint64_t> failures;  // by reason
  std::map<std::string, uint64_t> counters;  // probes_sent, garbage_control, ...
};

std::string RenderMetrics(const Report& r);
// One pair as the documented `fabricctl doctor -o json` shape: peer_node,
// local_device, peer_device, provider, reachable, control_reachable,
// rtt_seconds (null before a success), last_error, not_probed ("" if probed).
nlohmann::ordered_json PairJson(const PairStatus& p);
nlohmann::ordered_json RenderPeersJson(const Report& r);

// What `fabricctl doctor` needs back from /v1/peers.
struct PeersDocument {
  Verdict verdict = Verdict::kNoPeers;
  std::string node;
  std::vector<PairStatus> pairs;
};
absl::StatusOr<PeersDocument> ParsePeersJson(const std::string& text);

}  // namespace fabric::doctor

#endif  // FABRIC_AGENT_DOCTOR_REPORT_H_
