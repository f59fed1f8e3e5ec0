// Child processes and /proc readings shared by the cases that run the real
// fabric-agent binary (footprint, scale).
#ifndef FABRIC_TOOLS_BENCH_PROCESS_UTIL_H_
#define FABRIC_TOOLS_BENCH_PROCESS_UTIL_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fabric::bench {

struct ProcStatus {
  double rss_mib = 0, rss_anon_mib = 0, rss_file_mib = 0, hwm_mib = 0;
  int threads = 0;
};

// Fields of /proc/<pid>/status in kB.
bool ReadStatus(pid_t pid, ProcStatus* out);

// utime+stime (clock ticks) and comm of a /proc/.../stat file.
bool ReadStat(const std::string& path, uint64_t* ticks, std::string* comm);

// A free loopback TCP port (bound, read back, released: the agent binds it next).
int FreePort();

// fork + execv(argv), the child's stderr appended to `log_file`.
pid_t Spawn(const std::vector<std::string>& argv, const std::string& log_file);

// SIGTERM, up to 5 s to exit, then SIGKILL; reaps the child.
void Terminate(pid_t pid);

}  // namespace fabric::bench

#endif  // FABRIC_TOOLS_BENCH_PROCESS_UTIL_H_
