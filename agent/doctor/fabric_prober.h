// The doctor's fabric side: one libfabric FI_EP_RDM endpoint per local device,
// each with a small dedicated, registered probe buffer (no workload memory is
// ever registered), driven by one thread that owns every libfabric call.
//
// Probe(): the caller hands over a batch (local device slot, peer endpoint
// name) and gets, per probe, the round trip or why not. Incoming probes are
// answered only for senders the control channel introduced (AllowSenders),
// at most `reply_rate` per second per device (a token bucket), so a peer
// cannot drive our send rate; anything that does not decode is counted as
// garbage and dropped. A peer endpoint name reaches fi_av_insert only when it
// has exactly the length of our own endpoint's address (and, for socket
// addresses, the same address family), from a zero-padded copy.
//
// The allow-list is bound to the source address that introduced a sender:
// each source holds at most max_senders_per_source names and can only evict
// its own (least recently renewed) introductions; other sources' entries are
// dropped only when they were not renewed for sender_ttl and room is needed.
// When the whole list is full of fresh entries, a new introduction is refused
// (counted allow_list_full), never one of another source's taken away.
#ifndef FABRIC_AGENT_DOCTOR_FABRIC_PROBER_H_
#define FABRIC_AGENT_DOCTOR_FABRIC_PROBER_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/doctor/protocol.h"
#include "agent/doctor/report.h"

namespace fabric::doctor {

struct LocalDeviceSpec {
  std::string device;    // label ("rdmap79s0"); with tcp any name
  std::string provider;  // requested: "efa", "verbs;ofi_rxm", "tcp"
  std::string domain;    // pin a libfabric domain ("rdmap79s0-rdm", "mlx5_0"); "" = any
  std::string node;      // IP-addressed providers: bind to this address ("" = provider's choice)
};

struct ProbeRequest {
  size_t device = 0;      // index into the devices given to the constructor
  std::string peer_name;  // peer's raw endpoint name
};

struct ProbeResult {
  bool ok = false;
  double rtt_seconds = -1;
  std::string reason;  // failures_total reason: fabric_timeout, fabric_error, ...
  std::string error;   // human-readable
};

struct ProberLimits {
  double reply_rate = 100;               // replies per second per device (token bucket rate)
  double reply_burst = 200;              // bucket size
  size_t max_senders = 65536;            // introduced endpoint names kept, all sources
  size_t max_senders_per_source = 1024;  // per control-connection source address
  absl::Duration sender_ttl = absl::Minutes(10);  // unrenewed this long: may make room
  size_t max_peers_av = 16384;  // address vector entries per device before a reset
  absl::Duration stuck_after = absl::Seconds(3);  // a send never completing: reopen
};

class FabricProber {
 public:
  FabricProber(std::vector<LocalDeviceSpec> devices, ProberLimits limits);
  ~FabricProber();
  FabricProber(const FabricProber&) = delete;
  FabricProber& operator=(const FabricProber&) = delete;

  // Opens every device (a device that cannot be opened is reported in
  // endpoints() and skipped) and starts the progress thread. Error only when
  // no device opened at all.
  absl::Status Start();
  void Stop();

  std::vector<LocalEndpoint> endpoints() const;
  // Open endpoints' names, for the control channel (refreshed after a reopen).
  std::vector<DeviceEndpoint> names() const;

  // Blocks until every probe is answered or `timeout` passed.
  std::vector<ProbeResult> Probe(const std::vector<ProbeRequest>& probes, absl::Duration timeout);

  // Endpoint names whose probes we answer, introduced by `asker` (its node
  // name) from control-connection source address `source`. Replaces that
  // asker's earlier introduction from the same source.
  void AllowSenders(const std::string& source, const std::string& asker,
                    const std::vector<std::string>& names);
  bool SenderAllowed(const std::string& name) const;

  std::map<std::string, uint64_t> counters() const;

  // Test hook: sends raw bytes from `device` to `peer_name` (garbage tests).
  absl::Status SendRaw(size_t device, const std::string& peer_name, const std::string& bytes);

  struct Device;  // libfabric state, private to fabric_prober.cc

 private:
  struct Batch;
  void Run();
  void Wake();  // ends the thread's idle poll()
  void Count(const std::string& event, uint64_t n = 1);

  const std::vector<LocalDeviceSpec> specs_;
  const ProberLimits limits_;
  std::vector<std::unique_ptr<Device>> devices_;  // touched by the thread only (after Start)
  std::thread thread_;
  std::atomic<bool> stop_{false};
  int wake_fd_ = -1;  // eventfd: a batch, a raw send or Stop() is waiting

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Batch>> queued_;  // handed to the thread
  std::vector<LocalEndpoint> endpoints_;       // ABSL_GUARDED_BY(mu_)
  std::vector<DeviceEndpoint> names_;
  struct Introduction {
    std::vector<std::string> names;
    std::chrono::steady_clock::time_point renewed;
  };
  struct Source {
    std::map<std::string, Introduction> askers;
    size_t names = 0;
  };
  void DropIntroduction(Source& src, std::map<std::string, Introduction>::iterator it);
  std::map<std::string, Source> sources_;    // by source address
  std::map<std::string, uint32_t> senders_;  // name -> introductions holding it
  size_t sender_total_ = 0;                  // names over all introductions
  std::map<std::string, uint64_t> counters_;
  std::deque<std::pair<size_t, std::pair<std::string, std::string>>> raw_;  // SendRaw queue
};

}  // namespace fabric::doctor

#endif  // FABRIC_AGENT_DOCTOR_FABRIC_PROBER_H_
