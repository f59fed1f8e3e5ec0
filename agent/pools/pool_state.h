// PoolState: the live state of one resource pool — its current snapshot, the
// subscribers that want each new advertisement (the ListAndWatch streams), the
// Allocate counters, and the claim through which every grant is recorded with
// the pool registry before Allocate answers. It outlives server restarts
// (kubelet restarts re-create the gRPC server; the pool and its counters stay).
// It knows nothing of gRPC: the servers in plugin/ turn snapshots into
// messages.
#ifndef FABRIC_AGENT_POOLS_POOL_STATE_H_
#define FABRIC_AGENT_POOLS_POOL_STATE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "agent/base/latency_histogram.h"
#include "agent/engine_env/gid_ledger.h"
#include "agent/pools/pool_snapshot.h"

namespace fabric {

// A consumer of every new advertisement of a pool (a ListAndWatch stream).
class PoolSubscriber {
 public:
  virtual ~PoolSubscriber() = default;
  // Must not block: called with PoolState's lock held.
  virtual void Push(std::shared_ptr<const PoolSnapshot> snap) = 0;
  // The agent ends the stream (shutdown or server restart).
  virtual void Close() = 0;
};

// Counters exported as metrics. Each only ever grows: an Allocate counts in
// allocate_calls when it starts and in exactly one of allocate_ok and
// allocate_errors when it completes (so ok is never derived as calls - errors,
// which a reader between the two would see go down, or wrap).
struct PoolStats {
  std::atomic<uint64_t> allocate_calls{0};
  std::atomic<uint64_t> allocate_ok{0};
  std::atomic<uint64_t> allocate_errors{0};
  std::atomic<uint64_t> preferred_calls{0};
  std::atomic<uint64_t> list_and_watch_messages{0};
  LatencyHistogram allocate_latency;
};

// True when the kubelet would see the same list: same unit IDs in the same
// order, same health, same NUMA node.
bool SameAdvertisement(const PoolSnapshot& a, const PoolSnapshot& b);

class PoolState {
 public:
  // Records a grant of `ids` of `resource`; an error refuses the Allocate.
  using Claimer =
      std::function<absl::Status(const std::string& resource, const std::vector<std::string>& ids)>;

  explicit PoolState(std::shared_ptr<const PoolSnapshot> initial);

  const std::string& resource() const { return resource_; }
  std::shared_ptr<const PoolSnapshot> snapshot() const;

  // Installs a new snapshot; every subscriber gets it unless the advertised
  // list is unchanged. Returns true when the advertisement changed.
  bool Update(std::shared_ptr<const PoolSnapshot> next);

  // Streams subscribe on open and unsubscribe when done. Subscribe pushes the
  // current snapshot to `s` under the same lock as every Update's push, so a
  // stream's pushes follow the order of the snapshots: an Update racing a new
  // stream can never leave the stale first list written last.
  void Subscribe(PoolSubscriber* s);
  void Unsubscribe(PoolSubscriber* s);
  // Ends every open stream.
  void CloseStreams();
  size_t open_streams() const;

  PoolStats& stats() { return stats_; }
  // What the GID index variables of this pool's grants named (Allocate
  // records, the status views read). Thread-safe.
  engine_env::GidLedger& gid_ledger() { return gid_ledger_; }

  // The registry installs the claimer; Allocate calls Claim with every ID it
  // is about to grant, and answers only if it returns OK. Without a claimer
  // (unit tests of the server alone) every claim succeeds.
  void SetClaimer(Claimer claimer);
  absl::Status Claim(const std::vector<std::string>& ids) const;

 private:
  const std::string resource_;
  mutable std::mutex mu_;
  std::shared_ptr<const PoolSnapshot> snapshot_ ABSL_GUARDED_BY(mu_);
  std::set<PoolSubscriber*> subscribers_ ABSL_GUARDED_BY(mu_);
  Claimer claimer_ ABSL_GUARDED_BY(mu_);
  PoolStats stats_;
  engine_env::GidLedger gid_ledger_;
};

}  // namespace fabric

#endif  // FABRIC_AGENT_POOLS_POOL_STATE_H_
