// SideFileWriter: keeps the files other node components read in step with the
// pools — the CDI specs (agent/cdi) and the NFD feature file (agent/nfd). It
// writes from a PoolRegistry::View copied under the registry's lock and does
// the disk I/O outside it, on its own thread, so Allocate never waits on a
// disk. Changes arriving while a write is in progress coalesce into one more.
#ifndef FABRIC_AGENT_DAEMON_SIDE_FILES_H_
#define FABRIC_AGENT_DAEMON_SIDE_FILES_H_

#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

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

 private:
  void Run();
  void Write(const PoolRegistry::View& view) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

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
  std::thread thread_;
};

}  // namespace fabric

#endif  // FABRIC_AGENT_DAEMON_SIDE_FILES_H_
