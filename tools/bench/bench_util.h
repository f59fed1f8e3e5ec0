// Shared pieces of fabric-bench: latency samples, the result table, temp dirs
// and a stderr redirect (the agent logs every Allocate at info level; the
// lines go to a file so the table stays readable, at the cost of a file write
// per call as with a real container log pipe).
#ifndef FABRIC_TOOLS_BENCH_BENCH_UTIL_H_
#define FABRIC_TOOLS_BENCH_BENCH_UTIL_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "agent/http/get.h"

namespace fabric::bench {

using Clock = std::chrono::steady_clock;

inline double MillisBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// CPU time of the calling thread (CLOCK_THREAD_CPUTIME_ID: the scheduler's
// nanosecond account). getrusage's user/system split is sampled at the tick
// (4 ms), far too coarse for a 1 ms render; use it only for the kernel share.
double ThreadCpuMillis();

// One GET to 127.0.0.1:<port> on a fresh connection, read to EOF (as
// Prometheus does after its keep-alive lapses); status 0 when there was no
// answer within `timeout`.
HttpResponse LocalGet(int port, const std::string& path, absl::Duration timeout = absl::Seconds(5));

// Latencies (or any values) with nearest-rank percentiles.
class Samples {
 public:
  void Add(double v) { values_.push_back(v); }
  size_t size() const { return values_.size(); }
  bool empty() const { return values_.empty(); }
  // q in [0, 1]; nearest rank. Requires !empty().
  double Percentile(double q) const;
  double Min() const { return Percentile(0); }
  double Max() const { return Percentile(1); }
  double Mean() const;

 private:
  std::vector<double> values_;
};

// One line of the result table. A row without a value prints
// "not measured: <note>" and makes the run fail in --check mode.
struct Row {
  std::string case_name;  // "alloc", "health", ...
  std::string metric;     // "Allocate p99 (1 device)"
  std::optional<double> value;
  std::string unit;  // "ms", "MiB", "%", "x", "count"
  // The same-run baseline the value is compared with, if any.
  std::optional<double> baseline;
  std::string baseline_name;
  // value / baseline when both exist, or an explicit ratio row.
  std::optional<double> ratio;
  std::string target;   // e.g. "<= 1.5x floor"; "" when informational
  std::string verdict;  // "met" | "MISSED" | "" (informational)
  std::string note;     // why not measured, or a short remark
  // A count (never a time) that --check enforces: a MISSED verdict fails the run.
  bool guard = false;
};

void PrintTable(const std::vector<Row>& rows);
// Machine-readable copy (one JSON object per row), for docs and CI.
bool WriteJson(const std::vector<Row>& rows, const std::string& path);

std::string Verdict(bool met);

// A short directory under /tmp (unix socket paths are limited to 108 bytes),
// removed recursively on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "fbench");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Sends fd 2 to `file` until destroyed (then restores it).
class StderrToFile {
 public:
  explicit StderrToFile(const std::string& file);
  ~StderrToFile();
  StderrToFile(const StderrToFile&) = delete;
  StderrToFile& operator=(const StderrToFile&) = delete;

 private:
  int saved_ = -1;
};

// Uniform random duration in [0, max_ms) — spacing between injected events so
// they do not phase-lock with a poll loop.
double RandomMillis(double max_ms);

}  // namespace fabric::bench

#endif  // FABRIC_TOOLS_BENCH_BENCH_UTIL_H_
