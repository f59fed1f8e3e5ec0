// SideFileWriter: keeps the files other node components read in step with the
// pools — the CDI specs (agent/cdi) and the NFD feature file (agent/nfd). It
// writes from a PoolRegistry::View copied under the registry's lock and does
// the disk I/O outside it, on its own thread, so Allocate never waits on a
// disk. Changes arriving while a write is in progress coalesce into one more.
// A failed write is retried with capped exponential backoff until it succeeds;
// a file that keeps failing is reported (Health, /metrics, /readyz), and with
// --cdi-devices a pool whose spec cannot be written refuses Allocate with the
// reason (CdiSpecReady) rather than hand out names no runtime can resolve.
#ifndef FABRIC_AGENT_DAEMON_SIDE_FILES_H_
#define FABRIC_AGENT_DAEMON_SIDE_FILES_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "agent/cdi/cdi_spec.h"
#include "agent/cdi/cdi_spec_writer.h"
#include "agent/pools/pool_registry.h"

namespace fabric {

struct SideFileOptions {
  bool write_cdi = false;
  std::string cdi_dir;
  std::string cdi_state_dir;      // durable mirror of the specs
  std::string memlock_hook_path;  // empty: no hook in the specs
  std::string memlock_limit = "unlimited";
  std::string nfd_features_file;  // empty: not written
  // A failed write is retried after retry_initial, doubling up to retry_max,
  // for as long as it fails (a full disk or a read-only mount can clear).
  std::chrono::milliseconds retry_initial{500};
  std::chrono::milliseconds retry_max{30000};
  // Consecutive failed attempts after which a file is reported as failing
  // (about 7 s of retries with the defaults).
  int attempts_before_failing = 5;
};

// How one side file fares: "cdi" (every CDI spec) or "nfd" (the feature file).
struct SideFileHealth {
  std::string file;
  uint64_t write_errors = 0;     // failed write attempts, ever
  int consecutive_failures = 0;  // since the last good write
  bool failing = false;          // consecutive_failures >= attempts_before_failing
  std::string last_error;        // of the last failed attempt; empty once written
};

// One pool's CDI spec: a device per present device of the pool; rdma_cm only
// in the edits of non-EFA devices (EFA does not use it), never spec-wide.
cdi::CdiSpecInput PoolCdiSpec(const PoolRegistry::PoolView& pool, const NodeView& node,
                              const SideFileOptions& options);

class SideFileWriter {
 public:
  // `registry` is borrowed and must outlive the writer.
  SideFileWriter(const PoolRegistry* registry, SideFileOptions options);
  ~SideFileWriter();

  // Writes once, synchronously (at start, before the first registration).
  void WriteNow();
  // Starts the writer thread; Poke() then schedules a write.
  void Start();
  void Poke();
  void Stop();

  // One entry per file this writer writes (cdi and/or nfd). Thread-safe.
  std::vector<SideFileHealth> Health() const;
  // OK unless `kind`'s CDI spec has failed to be written
  // attempts_before_failing times in a row: then an error that says why and
  // what to do, for Allocate to refuse with (the runtime could not resolve
  // the CDI names it returns). Thread-safe, never waits on the disk.
  absl::Status CdiSpecReady(const std::string& kind) const;
  // "" when no file is failing, else why, for /readyz.
  std::string NotReadyReason() const;
  // fabric_side_file_write_errors_total{file} and fabric_side_file_failing{file}.
  std::string MetricsText() const;

 private:
  struct Outcome {
    int attempts = 0;
    int consecutive = 0;
    uint64_t errors = 0;
    std::string last_error;
  };
  void Run();
  void Write(const PoolRegistry::View& view) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  // Records one attempt's result for `file`; returns its consecutive failures.
  int Record(Outcome* o, const std::string& error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(health_mu_);
  std::chrono::milliseconds Backoff(int consecutive_failures) const;

  const PoolRegistry* registry_;
  const SideFileOptions options_;
  std::unique_ptr<cdi::CdiSpecWriter> cdi_;
  std::mutex write_mu_;  // one write at a time
  // CDI kinds written for the configured pools; seeded from the state copies
  // so specs of pools removed while the agent was down are deleted too.
  std::set<std::string> kinds_ ABSL_GUARDED_BY(write_mu_);
  bool seeded_ ABSL_GUARDED_BY(write_mu_) = false;
  std::mutex mu_;
  std::condition_variable cv_;
  bool dirty_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // When a failed write is retried; unset while every file is written.
  std::optional<std::chrono::steady_clock::time_point> retry_at_ ABSL_GUARDED_BY(mu_);
  mutable std::mutex health_mu_;  // leaf lock: never held across I/O
  Outcome cdi_health_ ABSL_GUARDED_BY(health_mu_);
  Outcome nfd_health_ ABSL_GUARDED_BY(health_mu_);
  // Per CDI kind: consecutive failed writes and the last error; absent once written.
  std::map<std::string, std::pair<int, std::string>> cdi_kind_failures_ ABSL_GUARDED_BY(health_mu_);
  std::thread thread_;
};

}  // namespace fabric

#endif  // FABRIC_AGENT_DAEMON_SIDE_FILES_H_
