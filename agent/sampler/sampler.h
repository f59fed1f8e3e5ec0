// Sampler: the one reader of counter files (issue 17). Every period it takes
// one Sample: every live device's counters (read once, through descriptors
// kept open by CounterReader), the fabric resources each Pod's processes own
// (restrack, with each owner identified once per round), and each Pod's own
// network bytes. The newest Sample is kept whole for /metrics and health; what
// the transport verdicts (agent/observe) read of the last 10 minutes goes into
// a SampleRing (issue 26: constant, small memory). None of them reads a
// counter file.
#ifndef FABRIC_AGENT_SAMPLER_SAMPLER_H_
#define FABRIC_AGENT_SAMPLER_SAMPLER_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "agent/base/host_paths.h"
#include "agent/base/mono_clock.h"
#include "agent/model/device.h"
#include "agent/podprocs/pod_processes.h"
#include "agent/restrack/rdma_resources.h"
#include "agent/sampler/counter_reader.h"
#include "agent/sampler/sample.h"
#include "agent/sampler/sample_ring.h"

namespace fabric::sampler {

// What a source that is not configured says (the daemon without --observe).
inline constexpr char kObservationOff[] = "observation is off (--observe)";

struct SamplerOptions {
  HostPaths paths;  // sysfs_root: where the counters are
  absl::Duration period = absl::Seconds(5);
  absl::Duration max_window = absl::Minutes(10);       // the longest window a reader asks for
  std::function<absl::Time()> clock = MonotonicNow;    // Sample::mono
  std::function<absl::Time()> wall_clock = absl::Now;  // Sample::wall
  CounterFiles* files = nullptr;  // borrowed; nullptr: the real filesystem (tests count opens)
  absl::Duration relist_interval = absl::Minutes(5);  // see CounterReader
};

// The kubelet view's completeness, as the holds watcher reports it.
struct HoldsState {
  bool complete = true;
  std::string reason;  // why not, when !complete
};

// What the daemon gives each round; every callback may be empty (nothing).
// They run on the sampling thread (or TakeNow's caller) and must not block
// for long: short locks only.
struct SamplerInputs {
  std::function<std::vector<RdmaDevice>()> devices;  // the live devices
  std::function<std::vector<Grant>()> grants;        // holds + each resource's mode
  std::function<HoldsState()> holds;
};

struct SamplerStatus {
  uint64_t rounds = 0;
  absl::Duration last_round = absl::ZeroDuration();    // how long the last round took
  absl::Time last_sample_mono = absl::InfinitePast();  // options.clock of the last sample
  size_t unreadable_devices = 0;                       // in the last sample
  std::string last_counter_error;                      // the last unreadable device's error
  std::string last_resources_error;                    // empty when the last Dump answered
  std::string last_procs_error;                        // empty when the last ScanPods answered
  size_t ring_bytes = 0;                               // SampleRing::MemoryBytes()
};

class Sampler {
 public:
  using Hook = std::function<void(const SampleRing& ring)>;

  // `resources` and `procs` are borrowed and may be null: observation is off,
  // and every sample says so (resources_ok / procs_ok false, with why).
  Sampler(SamplerOptions options, SamplerInputs inputs, restrack::ResourceSource* resources,
          podprocs::ProcSource* procs);
  ~Sampler();  // Stop()
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // Samples every period on its own thread until Stop (which returns within
  // one round, never a whole period).
  void Start();
  void Stop();

  // One round on the caller's thread (the agent's first sample before it
  // serves; tests). Rounds never overlap: it waits for a running one.
  SamplePtr TakeNow();

  // The newest sample, whole; null before the first round.
  SamplePtr Latest() const;
  // Runs `read` with the ring of the kept samples (at most capacity()), under
  // the lock a round takes only to append to it: a window is read in place,
  // never copied. `read` must not call TakeNow.
  void ReadRing(absl::FunctionRef<void(const SampleRing&)> read) const;
  size_t capacity() const { return capacity_; }
  absl::Duration period() const { return options_.period; }
  // Takes the ring's read lock (ring_bytes): not from the hook.
  SamplerStatus status() const;

  // Called after each round with the ring, under its read lock, on the
  // sampling thread, one round at a time and in order. It may call Latest,
  // never status, TakeNow or ReadRing. Set it before Start.
  void OnSample(Hook hook);

 private:
  SamplePtr Round();
  void ReadResources(Sample* s, std::vector<podprocs::CgroupIdentity>* seen);
  void ReadPods(Sample* s, std::vector<podprocs::CgroupIdentity>* seen);
  void ReadNames(Sample* s, std::vector<podprocs::CgroupIdentity>* seen);

  const SamplerOptions options_;
  const SamplerInputs inputs_;
  restrack::ResourceSource* const resources_;
  podprocs::ProcSource* const procs_;
  const size_t capacity_;

  // Held for a whole round: the reader, the sources and seq_ are one round's.
  std::mutex round_mu_;
  CounterReader reader_;  // guarded by round_mu_
  uint64_t seq_ = 0;      // guarded by round_mu_

  mutable std::shared_mutex ring_mu_;  // the ring: appended by rounds, read by windows
  SampleRing ring_;

  mutable std::mutex mu_;  // the newest sample, the status and the hook
  SamplePtr latest_;
  SamplerStatus status_;
  Hook hook_;

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

// One read of every counter of `devices` (counters and traffic filled, the
// rest of the sample empty), with files opened and closed here: for one-shot
// callers (fabricctl, tests) that render /metrics without a running sampler.
// `files` is borrowed (nullptr: the real filesystem).
SamplePtr SampleCountersOnce(const HostPaths& paths, const std::vector<RdmaDevice>& devices,
                             CounterFiles* files = nullptr);

// A device's traffic totals from its counters (the rules of DeviceTraffic);
// `readable` is left to the caller.
DeviceTraffic TrafficOf(const RdmaDevice& dev, const DeviceCounters& counters);

}  // namespace fabric::sampler

#endif  // FABRIC_AGENT_SAMPLER_SAMPLER_H_
