// Counter files read through descriptors kept open: sysfs regenerates an
// attribute's text on every read at offset 0, so a kept descriptor and one
// pread replace an open/read/close and its path walk (the largest part of the
// idle agent's CPU when 32 EFA devices' error counters were opened each
// second, and of a /metrics render before that).
#ifndef FABRIC_AGENT_BASE_COUNTER_FILE_H_
#define FABRIC_AGENT_BASE_COUNTER_FILE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fabric {

// How many descriptors all kept-open counter files of the process may hold
// together: half of what RLIMIT_NOFILE leaves after a 1024 reserve for sockets,
// inotify and the rest, at most 16384 (the soft limit is raised to the hard
// one first). Past it, readers open per read instead of failing.
class DescriptorBudget {
 public:
  static DescriptorBudget& Get();
  bool Take();  // false: over budget, open per read
  void Give();

 private:
  DescriptorBudget();
  std::atomic<int64_t> held_{0};
  int64_t limit_ = 0;
};

// The longest text a counter file may hold: 20 digits and some whitespace.
// Longer content is not a counter, whoever reads it: CounterFile reads one
// byte more than this and would otherwise parse only a prefix.
inline constexpr size_t kMaxCounterText = 63;

// "123\n" -> 123. False for empty, negative, non-numeric or over-long text.
bool ParseCounterText(absl::string_view text, uint64_t* value);

// One counter file, opened on the first Read and kept open while it reads.
// A failed read closes it, so the next Read opens the path again (the kernel
// removed and re-created the file, as a driver reload does).
class CounterFile {
 public:
  explicit CounterFile(std::string path) : path_(std::move(path)) {}
  ~CounterFile() { Close(); }
  CounterFile(CounterFile&& other) noexcept;
  CounterFile& operator=(CounterFile&& other) noexcept;
  CounterFile(const CounterFile&) = delete;
  CounterFile& operator=(const CounterFile&) = delete;

  // kNotFound: the file cannot be opened; kUnavailable: the read failed;
  // kInvalidArgument: the text is not a counter. Errors carry the path.
  absl::StatusOr<uint64_t> Read();
  const std::string& path() const { return path_; }
  bool is_open() const { return fd_ >= 0; }

 private:
  void Close();

  std::string path_;
  int fd_ = -1;
  bool budgeted_ = false;  // fd_ counts against DescriptorBudget
};

}  // namespace fabric

#endif  // FABRIC_AGENT_BASE_COUNTER_FILE_H_
