#include "tools/bench/process_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "fmt/format.h"

namespace fabric::bench {

bool ReadStatus(pid_t pid, ProcStatus* out) {
  std::ifstream f(fmt::format("/proc/{}/status", pid));
  if (!f) return false;
  std::string key;
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    in >> key;
    double v = 0;
    in >> v;
    if (key == "VmRSS:") out->rss_mib = v / 1024;
    if (key == "RssAnon:") out->rss_anon_mib = v / 1024;
    if (key == "RssFile:") out->rss_file_mib = v / 1024;
    if (key == "VmHWM:") out->hwm_mib = v / 1024;
    if (key == "Threads:") out->threads = static_cast<int>(v);
  }
  return true;
}

bool ReadStat(const std::string& path, uint64_t* ticks, std::string* comm) {
  std::ifstream f(path);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t open = s.find('('), close = s.rfind(')');
  if (open == std::string::npos || close == std::string::npos) return false;
  if (comm) *comm = s.substr(open + 1, close - open - 1);
  std::istringstream in(s.substr(close + 2));
  std::string field;
  // After "pid (comm) ": state is field 3; utime 14, stime 15.
  uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  *ticks = utime + stime;
  return true;
}

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  if (fd >= 0) close(fd);
  return port;
}

pid_t Spawn(const std::vector<std::string>& argv, const std::string& log_file) {
  pid_t pid = fork();
  if (pid == 0) {
    FILE* log = std::fopen(log_file.c_str(), "a");
    if (log) dup2(fileno(log), 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

void Terminate(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  for (int i = 0; i < 50; ++i) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || r < 0) return;  // exited (or already reaped by Sample)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

}  // namespace fabric::bench
