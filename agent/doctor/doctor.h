// The fabric doctor: every participating agent probes a bounded, rotating
// sample of its peers' fabric endpoints each period (scheme.h), asks their
// control channel when it needs their endpoint names or a fabric probe failed
// (control.h), and keeps one PairStatus per (local device, peer node, peer
// device) for /metrics and /v1/peers (report.h). Opt-in (--doctor); it shares
// nothing with the device-plugin path but the HTTP server it renders into.
#ifndef FABRIC_AGENT_DOCTOR_DOCTOR_H_
#define FABRIC_AGENT_DOCTOR_DOCTOR_H_

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/doctor/control.h"
#include "agent/doctor/fabric_prober.h"
#include "agent/doctor/peers.h"
#include "agent/doctor/report.h"
#include "agent/model/device.h"

namespace fabric::doctor {

struct DoctorOptions {
  bool enabled = false;                       // --doctor
  std::string peers;                          // --doctor-peers: file:PATH | dns:NAME[:PORT]
  std::string provider;                       // --doctor-provider: "" = each device's own
  std::string address = "0.0.0.0:7946";       // --doctor-address: control channel listen address
  absl::Duration period = absl::Seconds(10);  // --doctor-period
  absl::Duration probe_timeout = absl::ZeroDuration();  // 0: min(period / 2, 2 s)
  int sample = 2;                                       // K rotating peers per device and period
  int refresh_periods = 6;  // re-ask a healthy peer's control channel this often
  size_t max_pairs = 8192;  // pairs (and so series per gauge) kept at most
  std::string node_name;    // "" = $NODE_NAME, else the host name
  ProberLimits limits;
  // This network namespace's addresses, asked once per round (a test seam;
  // default LocalAddresses()).
  std::function<std::set<std::string>()> local_addresses;
};

// Sets what libfabric reads from the environment (FI_UNIVERSE_SIZE, which
// ofi_rxm sizes its CQs by) unless the operator set it. setenv is not
// thread-safe: call it from main() before any thread starts.
void PrepareProcessEnvironment();

// Checks the flags' values (period > 0, peers spec, address).
absl::Status ValidateOptions(const DoctorOptions& o);

// One probe endpoint per discovered device: EFA devices over "efa" (domain
// "<dev>-rdm"), every other RDMA device over "verbs;ofi_rxm" (domain "<dev>"),
// or all over --doctor-provider (tcp: bound to the control address' host).
std::vector<LocalDeviceSpec> DeviceSpecs(const NodeInventory& inventory, const DoctorOptions& o);

class Doctor {
 public:
  Doctor(DoctorOptions options, std::vector<LocalDeviceSpec> devices);
  ~Doctor();
  absl::Status Start();
  void Stop();

  Report Snapshot() const;
  std::string MetricsText() const;
  std::string PeersJson() const;
  uint16_t control_port() const { return server_ ? server_->port() : 0; }
  FabricProber& prober() { return *prober_; }
  const std::string& node() const { return node_; }
  uint64_t rounds() const;

 private:
  struct NodeState {
    std::optional<NodeInfo> info;
    bool control_ok = false;
    std::string control_error;
    std::string control_reason;
    absl::Time last_info = absl::InfinitePast();
    bool fabric_failed = false;
    int down_rounds = 0;  // consecutive rounds with control and every probe failed
  };
  using PairKey = std::tuple<std::string, std::string, std::string>;  // local, peer addr, peer dev

  void RunRounds();
  void Round(uint64_t t);
  void Query(const std::vector<PeerAddress>& nodes);
  NodeInfo Self() const;

  const DoctorOptions options_;
  const std::vector<LocalDeviceSpec> specs_;
  std::string node_;
  uint64_t instance_ = 0;
  PeerSpec spec_;
  PeerAddress listen_;
  absl::Duration probe_timeout_;
  std::unique_ptr<FabricProber> prober_;
  std::unique_ptr<ControlServer> server_;
  std::thread thread_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  uint64_t rounds_ = 0;
  std::vector<PeerAddress> last_peers_;
  std::set<std::string> self_addresses_;    // answered with our instance
  std::map<std::string, NodeState> nodes_;  // by control address
  std::map<PairKey, PairStatus> pairs_;
  std::map<std::pair<std::string, std::string>, RttHistogram> rtt_;
  std::map<std::string, uint64_t> failures_;
  std::map<std::string, uint64_t> counters_;
  size_t peer_count_ = 0;  // other nodes in the last round's ring
  // A failed observation of a pair is shown only when the pair's next probe
  // (in the next round) fails too: strikes_ counts consecutive failures, and
  // reprobe_ holds the pairs to probe again next round.
  std::map<PairKey, int> strikes_;
  std::set<PairKey> reprobe_;
};

}  // namespace fabric::doctor

#endif  // FABRIC_AGENT_DOCTOR_DOCTOR_H_
