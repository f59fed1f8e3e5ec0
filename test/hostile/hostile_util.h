// Helpers for the hostile tests: the real fabric-agent binary as a child
// process, /proc sampling (RSS, threads, fds), a copied sample node and the
// device -> /dev/infiniband/uverbsN map read from a sysfs tree.
#ifndef FABRIC_TEST_HOSTILE_HOSTILE_UTIL_H_
#define FABRIC_TEST_HOSTILE_HOSTILE_UTIL_H_

#include <sys/types.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "test/testing/test_dirs.h"
#include "tools/kubelet-sim/kubelet_sim.h"

namespace fabric::hostile {

using testing::TestDataDir;
std::string AgentBinary();
// An integer from the environment (for shortening a run by hand), or `def`.
int EnvInt(const char* name, int def);

// The hostile runs' work dir: /tmp/fabh-XXXXXX, kept when FABRIC_HOSTILE_KEEP is set.
class TempDir : public testing::TempDir {
 public:
  TempDir() : testing::TempDir("fabh", "FABRIC_HOSTILE_KEEP") {}
};

// One look at a process in /proc.
struct ProcSample {
  absl::Time at;
  long rss_kb = -1;
  int threads = -1;
  int fds = -1;
};

// fabric-agent's flags for a hostile run: the node tree `node` (sys/, dev/),
// the simulated kubelet and the agent's state under `work`, no CDI files,
// and `--config` when `config` is not empty.
std::vector<std::string> AgentArgs(const std::string& node, const std::string& work,
                                   const std::string& config = "");

// fabric-agent as a child process with stdout+stderr in a log file.
class AgentProcess {
 public:
  AgentProcess(std::vector<std::string> args, std::string log_path);
  ~AgentProcess();  // SIGKILL if still running.
  AgentProcess(const AgentProcess&) = delete;
  AgentProcess& operator=(const AgentProcess&) = delete;

  absl::Status Start();
  pid_t pid() const { return pid_; }
  // False once the process has exited (its status is then kept).
  bool Alive();
  void Signal(int sig);
  // SIGTERM, wait up to `timeout` (then SIGKILL). Returns the exit code, or
  // 128+signal if it was killed by a signal, -1 if it never started.
  int Stop(absl::Duration timeout = absl::Seconds(10));
  ProcSample Sample() const;
  std::string Log() const;
  // Occurrences of `needle` in the log.
  int CountInLog(const std::string& needle) const;

 private:
  std::vector<std::string> args_;
  std::string log_path_;
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
};

// Device name -> "/dev/infiniband/uverbsN", from <sysfs>/class/infiniband and
// each device's PCI function (<bdf>/infiniband_verbs/uverbsN).
std::map<std::string, std::string> UverbsPaths(const std::string& sysfs_root);

// Percentile (0..100) of an unsorted sample; 0 for an empty one.
// The simulated kubelet the hostile tests run against: it also serves
// PodResources, as every real kubelet does.
sim::KubeletSimOptions RealisticKubelet();

double Percentile(std::vector<double> v, double p);
double Median(std::vector<double> v);

// Runs a shell command; returns its exit status.
int Sh(const std::string& cmd);

// Writes `content` to `path` through a temp file and rename (what a ConfigMap
// update or an atomic editor does).
bool WriteAtomic(const std::string& path, const std::string& content);
// Writes in place (truncate + write): a reader may see a partial file.
bool WriteInPlace(const std::string& path, const std::string& content);
std::string Slurp(const std::string& path);

}  // namespace fabric::hostile

#endif  // FABRIC_TEST_HOSTILE_HOSTILE_UTIL_H_
