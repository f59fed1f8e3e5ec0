// CounterReader: the sysfs counter files of each device, read once per sampler
// round (agent/sampler) through descriptors kept open between rounds (pread at
// offset 0). Once a device's counter set is known, a round opens no file: it
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
#ifndef FABRIC_AGENT_SAMPLER_COUNTER_READER_H_
#define FABRIC_AGENT_SAMPLER_COUNTER_READER_H_

#include <sys/types.h>

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

// Where a device's counters live (the layout is agent/inventory's SysfsLayout).
std::vector<CounterDir> CounterDirsOf(const HostPaths& paths, const RdmaDevice& dev);

// The host-access seam for counter files (tests count lists, opens and reads
// through it).
class CounterFiles {
 public:
  virtual ~CounterFiles() = default;
  virtual absl::StatusOr<std::vector<std::string>> List(const std::string& dir);
  // An O_RDONLY descriptor, or -1 with errno set.
  virtual int Open(const std::string& path);
  // pread(2) at offset 0 of a descriptor Open gave.
  virtual ssize_t Read(int fd, char* buf, size_t size);
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

  // What one Read found: how many counters it read, and why the others (or
  // all of them) could not be read.
  struct ReadResult {
    size_t read = 0;
    size_t failed = 0;
    std::string first_error;  // names the file (or the device, when none was listed)
  };
  // Every hw counter (device-level and per port) and every PMA counter of
  // `dev`, in listing order, appended to `hw` and `pma`. Not thread-safe: one
  // reader (the sampler's round) at a time.
  ReadResult Read(const RdmaDevice& dev, std::vector<CounterValue>* hw,
                  std::vector<CounterValue>* pma);
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

#endif  // FABRIC_AGENT_SAMPLER_COUNTER_READER_H_
