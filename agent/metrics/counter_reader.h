// CounterReader: the sysfs counter files of each device, read for every
// /metrics render through descriptors kept open between renders (pread at
// offset 0). Once a device's counter set is known, a render opens no file: it
// costs one pread per counter, not an open/read/close with a path walk.
//
// The set of files is listed again when a device first appears, when its
// identity (verbs node, GUID, ports) changes, when a read fails (the kernel
// removed the file: ENODEV), and every relist_interval to pick up counters a
// driver added. Descriptors of devices no longer rendered are closed.
//
// Descriptors come from a process-wide budget derived from RLIMIT_NOFILE
// (the soft limit is raised to the hard one, as Go programs do); counters
// beyond it are opened and closed per read, as before, so the agent never
// runs itself out of descriptors.
#ifndef FABRIC_AGENT_METRICS_COUNTER_READER_H_
#define FABRIC_AGENT_METRICS_COUNTER_READER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/base/host_paths.h"
#include "agent/model/device.h"

namespace fabric {

// A directory of counter files of one device.
struct CounterDir {
  std::string dir;   // full path
  std::string port;  // "0" for device-level counters
  bool pma = false;  // ports/<n>/counters (IB PMA) rather than hw_counters
};

// Where a device's counters live. The one place metrics knows the sysfs
// layout of counters: point it at the inventory's API when that exists.
std::vector<CounterDir> CounterDirsOf(const HostPaths& paths, const RdmaDevice& dev);

// The host-access seam for counter files (tests count opens through it).
class CounterFiles {
 public:
  virtual ~CounterFiles() = default;
  virtual absl::StatusOr<std::vector<std::string>> List(const std::string& dir);
  // An O_RDONLY descriptor, or -1 with errno set.
  virtual int Open(const std::string& path);
};

struct CounterValue {
  std::string port;
  std::string name;
  uint64_t value = 0;
};

class CounterReader {
 public:
  // `files` is borrowed (nullptr: the real filesystem).
  explicit CounterReader(HostPaths paths, CounterFiles* files = nullptr,
                         absl::Duration relist_interval = absl::Minutes(5));
  ~CounterReader();
  CounterReader(const CounterReader&) = delete;
  CounterReader& operator=(const CounterReader&) = delete;

  // Every hw counter (device-level and per port) and every PMA counter of
  // `dev`, in listing order. Not thread-safe: one render at a time.
  void Read(const RdmaDevice& dev, std::vector<CounterValue>* hw, std::vector<CounterValue>* pma);
  // Closes the descriptors of every device not in `live`.
  void Retain(const std::set<std::string>& live);

  // Descriptors currently held (for tests and the bench).
  size_t open_descriptors() const;

 private:
  struct File {
    std::string path;
    std::string port;
    std::string name;
    bool pma = false;
    int fd = -1;  // -1: not held (over budget); opened per read
  };
  struct Device {
    std::string identity;
    absl::Time listed_at = absl::InfinitePast();  // MonotonicNow()
    std::vector<File> files;
  };
  void List(const RdmaDevice& dev, Device* d);
  void CloseAll(Device* d);
  absl::StatusOr<uint64_t> ReadOne(File& f);

  const HostPaths paths_;
  std::unique_ptr<CounterFiles> owned_files_;
  CounterFiles* files_;
  const absl::Duration relist_interval_;
  std::map<std::string, Device> devices_;
};

}  // namespace fabric

#endif  // FABRIC_AGENT_METRICS_COUNTER_READER_H_
